"""Op-level golden diff on the small ResNet (examples/models/tiny_resnet.py): functional ReLUs and residual adds are
units; functional-op bugs in the ONNX (edited graph) and in a torch port (buggy copy exported to ONNX) are each
localized to the op that makes them; true negatives pass."""

from __future__ import annotations

import types
from typing import Any

import numpy as np
import onnx
import torch
import torch.nn.functional as F

from repliscope.backends.onnxruntime.candidate import OnnxCandidate
from repliscope.diff.layers.driver import diff_layers
from repliscope.diff.layers.layer_result import LayerDiffResult, Mode
from repliscope.diff.layers.torch_reference import TorchReference
from tests.diff.conftest import drop_node, edited, export_onnx, find_node, jitter_weights

OPS = [
    "/relu",
    "layer1.0/relu",
    "layer1.0/add",
    "layer1.0/relu#2",
    "layer2.0/relu",
    "layer2.0/add",
    "layer2.0/relu#2",
    "/flatten",
]


def _diff(
    model: Any, onnx_model: onnx.ModelProto, x: np.ndarray, modes: tuple[Mode, ...] = ("golden", "carried")
) -> LayerDiffResult:
    return diff_layers(TorchReference(model), OnnxCandidate(onnx_model, source="edited"), x, modes=modes)


def _failing(result: LayerDiffResult, mode: str) -> list[str]:
    return [
        r.path
        for r in result.layers
        if r.missing or ((s := (r.golden if mode == "golden" else r.carried)) is not None and not s.passed)
    ]


def test_healthy_every_op_compared_and_within_tolerance(
    tiny_resnet: tuple[Any, onnx.ModelProto], tiny_x: np.ndarray
) -> None:
    model, proto = tiny_resnet
    result = _diff(model, proto, tiny_x)
    assert result.passed and result.uncompared == [] and result.not_compared == []
    assert result.reference_layers == 14 and result.reference_ops == len(OPS)
    assert [r.path for r in result.layers if r.op] == OPS
    golden = result.summary["golden"]
    assert (golden.compared, golden.ops, golden.reference_units, golden.missing) == (16, 8, 22, 0)
    assert golden.max_ratio < 0.5 and result.summary["carried"].max_ratio < 0.5
    rows = {r.path: r for r in result.layers}
    add = rows["layer1.0/add"]
    assert add.kind == "add" and add.source.endswith("examples/models/tiny_resnet.py:31")
    assert add.golden is not None and add.golden.max_abs == 0.0  # fed the reference inputs: exact
    assert rows["layer2.0.proj.1"].covers == ["layer2.0.proj.0", "layer2.0.proj.1"]  # fused Conv + BN
    assert rows["/flatten"].source.endswith("tiny_resnet.py:47") and rows["/flatten"].ref_shape == [4, 32]
    assert result.output is not None and result.output.passed and result.output.max_abs < 1e-5


def test_dropped_residual_add_in_the_onnx_is_the_first_divergence(
    tiny_resnet: tuple[Any, onnx.ModelProto], tiny_x: np.ndarray
) -> None:
    model, proto = tiny_resnet
    broken = edited(proto)
    drop_node(broken, find_node(broken, "Add", "layer1.0"), keep=0)
    result = _diff(model, broken, tiny_x)
    for mode in ("golden", "carried"):
        first = result.first_divergent[mode]
        assert first is not None and first.path == "layer1.0/add" and first.kind == "add"
        assert first.source.endswith("tiny_resnet.py:31") and "no node for this add" in first.missing
    assert _failing(result, "golden") == ["layer1.0/add"]  # every other unit, fed reference inputs, passes
    assert "layer2.0.bn1" in _failing(result, "carried")  # the error carries on
    assert result.summary["golden"].missing == 1 and result.summary["golden"].failed == 0
    assert result.output is not None and not result.output.passed and not result.passed


def test_add_edited_into_an_identity_is_a_divergence_not_an_uncompared_op(
    tiny_resnet: tuple[Any, onnx.ModelProto], tiny_x: np.ndarray
) -> None:
    model, proto = tiny_resnet
    broken = edited(proto)
    node = find_node(broken, "Add", "layer1.0")  # keeps its export metadata (scope, FX node, call site)
    node.op_type = "Identity"
    del node.input[1]
    result = _diff(model, broken, tiny_x)
    for mode in ("golden", "carried"):
        first = result.first_divergent[mode]
        assert first is not None and first.path == "layer1.0/add"
        assert "reads 1 activation tensor(s), the reference op reads 2" in first.missing
    assert _failing(result, "golden") == ["layer1.0/add"] and result.uncompared == []
    assert not result.passed


def test_dropped_add_fails_in_carried_mode_alone(tiny_resnet: tuple[Any, onnx.ModelProto], tiny_x: np.ndarray) -> None:
    model, proto = tiny_resnet
    broken = edited(proto)
    drop_node(broken, find_node(broken, "Add", "layer2.0"), keep=0)
    result = _diff(model, broken, tiny_x, modes=("carried",))
    first = result.first_divergent["carried"]
    assert first is not None and first.path == "layer2.0/add" and not result.passed
    reasons = {u.path: u.reason for u in result.uncompared}
    assert "dead code" in reasons["layer2.0.proj.1"]  # the projection's output is no longer read


def test_relu_replaced_by_elu_in_the_onnx(tiny_resnet: tuple[Any, onnx.ModelProto], tiny_x: np.ndarray) -> None:
    model, proto = tiny_resnet
    broken = edited(proto)
    find_node(broken, "Relu", "layer1.0", nth=1).op_type = "Elu"
    result = _diff(model, broken, tiny_x)
    first = result.first_divergent["golden"]
    assert first is not None and first.path == "layer1.0/relu#2" and first.ratio > 1e3
    assert _failing(result, "golden") == ["layer1.0/relu#2"] and not result.passed


def test_relu_replaced_by_elu_in_a_torch_port(tiny_resnet: tuple[Any, onnx.ModelProto], tiny_x: np.ndarray) -> None:
    """The port's block ends with F.elu: its ONNX (exported from the port) is paired op by op with the reference."""
    model, _ = tiny_resnet
    port = __import__("copy").deepcopy(model)
    block = port.layer2[0]

    def forward(self: Any, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.elu(out + self.proj(x))

    block.forward = types.MethodType(forward, block)
    result = _diff(model, export_onnx(port), tiny_x)
    first = result.first_divergent["golden"]
    assert first is not None and first.path == "layer2.0/relu#2"
    assert _failing(result, "golden") == ["layer2.0/relu#2"]
    assert any("the reference calls relu, the ONNX graph has elu" in n for n in result.notes)


def test_true_negatives_pass(tiny_resnet: tuple[Any, onnx.ModelProto], tiny_x: np.ndarray) -> None:
    """1-ulp weight jitter, and the classifier's reduction axis permuted consistently (input features gathered in a
    permuted order, weight columns permuted the same way: the same sum in another order)."""
    model, proto = tiny_resnet
    assert _diff(model, jitter_weights(proto), tiny_x).passed
    permuted = edited(proto)
    gemm = find_node(permuted, "Gemm", "fc")
    (weight,) = [i for i in permuted.graph.initializer if i.name == gemm.input[1]]
    order = np.random.default_rng(0).permutation(weight.dims[1])
    weight.CopyFrom(onnx.numpy_helper.from_array(onnx.numpy_helper.to_array(weight)[:, order], weight.name))
    permuted.graph.initializer.append(onnx.numpy_helper.from_array(order.astype(np.int64), "perm"))
    gather = onnx.helper.make_node("Gather", [gemm.input[0], "perm"], ["gathered"], axis=1)
    gather.metadata_props.extend(gemm.metadata_props)  # part of the fc unit
    nodes = [onnx.NodeProto.FromString(n.SerializeToString()) for n in permuted.graph.node]
    at = next(i for i, n in enumerate(nodes) if n.op_type == "Gemm")
    nodes[at].input[0] = "gathered"
    permuted.graph.ClearField("node")
    permuted.graph.node.extend([*nodes[:at], gather, *nodes[at:]])
    result = _diff(model, permuted, tiny_x)
    fc = {r.path: r for r in result.layers}["fc"]
    assert result.passed and fc.golden is not None and fc.golden.max_abs > 0  # another summation order, in tolerance


def test_plot_marks_the_missing_op(tiny_resnet: tuple[Any, onnx.ModelProto], tiny_x: np.ndarray, tmp_path: Any) -> None:
    from repliscope.diff.layers.plot import plot_layer_errors

    model, proto = tiny_resnet
    broken = edited(proto)
    drop_node(broken, find_node(broken, "Add", "layer1.0"), keep=0)
    out = plot_layer_errors(_diff(model, broken, tiny_x), tmp_path / "ops.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_an_identity_op_the_candidate_dropped_is_listed_not_failed(tiny_x: np.ndarray) -> None:
    """``x * 1.0`` in the reference, no node for it in the candidate (the ONNX optimizer removes it): the op is
    listed as not compared because its output equals its input on the batch, and the diff passes."""
    from torch import nn

    class Scaled(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU())
            self.head = nn.Linear(4, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head((self.body(x) * 1.0).mean((2, 3)))

    torch.manual_seed(0)
    model = Scaled().eval()
    proto = export_onnx(model)
    assert not [n for n in proto.graph.node if n.op_type == "Mul"]
    result = _diff(model, proto, tiny_x)
    assert result.passed and [r.path for r in result.layers if r.op] == ["/mean"]
    assert [(u.path, u.reason.split(" (")[0]) for u in result.uncompared] == [("/mul", "identity on this batch")]
    assert [r.index for r in result.layers] == list(range(len(result.layers)))
