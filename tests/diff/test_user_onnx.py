"""A user's own ONNX export (fixed batch of 1, TorchScript or dynamo exporter) as a candidate, and the proposed
mapping on what such an export looks like (Linear = MatMul + Add, shapes only known at run time)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

from repliscope.datasets import resolve_dataset
from repliscope.diff.layers.auto_mapping import ReferenceUnit, propose
from repliscope.diff.layers.candidate_format import build_candidate, diff_candidate
from repliscope.diff.layers.mapping import FixedBatch, UnitInfo, save_mapping
from repliscope.diff.layers.onnx_graph_candidate import OnnxGraphCandidate
from repliscope.diff.layers.torch_reference import TorchReference
from repliscope.diff.task_level import first_batch
from repliscope.errors import RepliscopeError
from repliscope.evaluation.run import RunSettings, prepare
from tests.conftest import EXAMPLES

TINY = EXAMPLES / "tiny-resnet.yaml"
REFERENCE_UNITS = 22


def test_alignment_leaves_an_uncoverable_tail_uncovered() -> None:
    """Two convolutions after the last possible pair cannot both be covered by one unit: they stay uncovered
    (this used to crash the backtracking with an IndexError)."""
    ref = [
        ReferenceUnit("act", "relu", (1, 4)),
        ReferenceUnit("c0", "Conv2d", (1, 4, 2, 2)),
        ReferenceUnit("c1", "Conv2d", (1, 4, 2, 2)),
    ]
    p = propose(ref, [UnitInfo("r", "Relu", (1, 4))])
    assert p.mapping == {"act": "r"} and p.uncovered_reference == ["c0", "c1"]


def test_alignment_prefers_units_named_after_the_layer() -> None:
    """q, k, v Linear exported as MatMul + Add each: every pairing with 4 pairs has the same count; the names
    decide (q -> /q/Add, not the transpose -> /q/MatMul shift), and a transpose pairs only with a data movement."""
    ref = [ReferenceUnit("/transpose", "transpose", (1, 6, 4)), *[ReferenceUnit(n, "Linear", (1, 6, 4)) for n in "qkv"]]
    cand = [UnitInfo("/Transpose_output_0", "Transpose", (1, 6, 4))]
    cand += [UnitInfo(f"/{n}/{op}_output_0", op, (1, 6, 4)) for n in "qkv" for op in ("MatMul", "Add")]
    p = propose(ref, cand)
    assert p.mapping == {
        "/transpose": "/Transpose_output_0",
        "q": "/q/Add_output_0",
        "k": "/k/Add_output_0",
        "v": "/v/Add_output_0",
    }
    assert p.unmatched_candidate == ["/q/MatMul_output_0", "/k/MatMul_output_0", "/v/MatMul_output_0"]


def test_a_fused_conv_named_after_its_conv_still_goes_to_the_batch_norm() -> None:
    ref = [
        ReferenceUnit("stem", "Conv2d", (1, 4, 2, 2)),
        ReferenceUnit("bn", "BatchNorm2d", (1, 4, 2, 2)),
        ReferenceUnit("fc", "Linear", (1, 3)),
    ]
    p = propose(ref, [UnitInfo("/stem/Conv_output_0", "Conv", (1, 4, 2, 2)), UnitInfo("logits", "Gemm", (1, 3))])
    assert p.mapping == {"bn": "/stem/Conv_output_0", "fc": "logits"} and p.covers["bn"] == ["stem", "bn"]


@pytest.fixture(scope="module")
def tiny(cache_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """tiny-resnet, a batch of 4 real images, and the user's exports with the default (fixed) batch of 1."""
    import torch

    prepared = prepare(TINY, RunSettings(runtime="torch", threads=2, batch_size=4, cache_dir=cache_dir))
    ids, x = first_batch(
        prepared.pipeline, resolve_dataset("foolbox_imagenet"), 4, tuple(prepared.artifact.input_shape[1:])
    )
    reference = TorchReference.from_artifact(prepared.artifact)
    out = tmp_path_factory.mktemp("user_onnx")
    example = (torch.from_numpy(x[:1]),)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(reference.module, example, str(out / "ts.onnx"), dynamo=False, input_names=["input"])
        torch.onnx.export(reference.module, example, str(out / "dynamo.onnx"), dynamo=True, input_names=["input"])
    return {"reference": reference, "x": x, "ids": ids, "ts": out / "ts.onnx", "dynamo": out / "dynamo.onnx"}


@pytest.mark.parametrize("export, origin", [("ts", "proposed"), ("dynamo", "onnx metadata")])
def test_a_batch_one_export_runs_on_a_batch_of_four(tiny: dict[str, Any], export: str, origin: str) -> None:
    """The export's input batch is fixed at 1 (ONNX Runtime rejects a batch of 4: this used to crash); the
    candidate runs in chunks of one sample and every unit passes in both modes."""
    dims = onnx.load(str(tiny[export]), load_external_data=False).graph.input[0].type.tensor_type.shape.dim
    assert dims[0].dim_value == 1
    built = build_candidate("onnx", str(tiny[export]), tiny["reference"], tiny["x"])
    assert isinstance(built.candidate, FixedBatch) and built.mapping_origin == origin
    result = diff_candidate(
        tiny["reference"], built.candidate, tiny["x"], ("golden", "carried"), samples=tiny["ids"], built=built
    )
    assert result.summary["golden"].failed == 0 and result.summary["carried"].failed == 0
    assert result.summary["golden"].compared == result.summary["carried"].compared > 0
    assert result.output is not None and result.output.passed
    assert result.candidate["fixed_batch"] == "1 (run in chunks)"


def test_a_batch_that_is_not_a_multiple_of_the_fixed_one_is_a_clear_error(tiny: dict[str, Any]) -> None:
    built = build_candidate("onnx", str(tiny["ts"]), tiny["reference"], tiny["x"])
    chunked = FixedBatch(built.candidate.inner, 3)  # type: ignore[attr-defined]
    with pytest.raises(RepliscopeError, match=r"fixed batch size of 3.*multiple of 3, not 4"):
        chunked.output(tiny["x"])


def test_torchscript_export_shapes_are_measured(tmp_path: Path) -> None:
    """The TorchScript exporter writes ``x.flatten(2)`` as a Reshape to a computed shape, which shape inference
    leaves unknown ((1, -1, -1)); units() measures it by a run on the first sample."""
    import torch

    class Tokens(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(3, 5)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(x.flatten(2).transpose(1, 2))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Tokens(), (torch.zeros(1, 3, 4, 4),), str(tmp_path / "t.onnx"), dynamo=False)
    cand = OnnxGraphCandidate(tmp_path / "t.onnx")
    assert any(-1 in u.shape[1:] for u in cand._units)
    shapes = {u.op: u.shape for u in cand.units(np.zeros((2, 3, 4, 4), np.float32))}
    assert shapes["Reshape"] == (2, 3, 16) and shapes["Transpose"] == (2, 16, 3) and shapes["Add"] == (2, 16, 5)


def test_a_unit_that_fails_on_the_reference_inputs_names_the_mapping(tiny: dict[str, Any]) -> None:
    cand = OnnxGraphCandidate(tiny["ts"])
    gemm = next(u for u in cand.units(tiny["x"][:1]) if u.op == "Gemm")
    cand.set_mapped([u.name for u in cand.units(tiny["x"][:1]) if u.op == "Flatten"])
    with pytest.raises(RepliscopeError, match=r"fails on the reference input.*wrong reference layer.*--mapping"):
        cand.run_layer(gemm.name, [np.zeros((1, 7), np.float32)])


def test_a_dropped_residual_under_a_proposed_mapping_is_a_golden_divergence(
    tiny: dict[str, Any], tmp_path: Path
) -> None:
    """The user's export with the first residual Add replaced by an Identity of its first input: the proposal
    leaves the Identity unpaired, the next Relu covers the add, and golden mode feeds it two reference tensors
    where the candidate reads one. That used to abort the whole diff with an error; it is now that unit's golden
    divergence (with the reason in the notes), and carried mode localizes it to the same unit."""
    model = onnx.load(str(tiny["ts"]))
    add = next(n for n in model.graph.node if n.op_type == "Add")
    add.op_type = "Identity"
    del add.input[1]
    onnx.save(model, str(tmp_path / "noresid.onnx"))
    built = build_candidate("onnx", str(tmp_path / "noresid.onnx"), tiny["reference"], tiny["x"])
    result = diff_candidate(tiny["reference"], built.candidate, tiny["x"], ("golden", "carried"), built=built)
    golden, carried = result.first_divergent["golden"], result.first_divergent["carried"]
    assert golden is not None and carried is not None
    assert golden.path == carried.path == "layer1.0/relu#2" and golden.covers == ["layer1.0/add", "layer1.0/relu#2"]
    assert result.summary["golden"].failed == 1
    assert any(
        "reads 1 activation(s), the reference layer 2" in n and "dropped or extra input" in n for n in result.notes
    )


def test_a_port_with_a_changed_op_is_aligned_not_paired_by_shifted_op_names() -> None:
    """A torch port calling F.gelu where the reference calls F.relu: the port's '/relu' is the reference's
    '/relu#2' (op names count per container). Pairing '/relu' by name used to send golden mode to the wrong op;
    the root ops are aligned instead (gelu <-> the first relu), module layers still pair by name."""
    shape = (1, 4, 2, 2)
    ref = [
        ReferenceUnit("conv_a", "Conv2d", shape),
        ReferenceUnit("/relu", "relu", shape),
        ReferenceUnit("conv_b", "Conv2d", shape),
        ReferenceUnit("/add", "add", shape),
        ReferenceUnit("/relu#2", "relu", shape),
    ]
    port = [
        UnitInfo("conv_a", "Conv2d", shape),
        UnitInfo("/gelu", "gelu", shape),
        UnitInfo("conv_b", "Conv2d", shape),
        UnitInfo("/add", "add", shape),
        UnitInfo("/relu", "relu", shape),
    ]
    p = propose(ref, port)
    assert p.mapping == {"conv_a": "conv_a", "/relu": "/gelu", "conv_b": "conv_b", "/add": "/add", "/relu#2": "/relu"}
    same = [UnitInfo(r.path, r.kind, r.shape) for r in ref]
    assert propose(ref, same).mapping == {r.path: r.path for r in ref}


def test_a_fused_unit_whose_inputs_enter_at_two_layers_is_compared_in_carried_mode_only(tmp_path: Path) -> None:
    """A correct export under a sparse user mapping: the Softmax unit also computes the transpose and the
    q @ k^T, whose two inputs enter at two reference layers; golden mode can only feed it the transpose's one
    input. That used to abort the diff (and, briefly, to count as a divergence); it is now compared in carried
    mode only, with the reason, and the diff passes."""
    import torch

    class Attention(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.q, self.k = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.softmax(self.q(x) @ self.k(x).transpose(1, 2), dim=-1)

    torch.manual_seed(0)
    module = Attention().eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module,
            (torch.zeros(1, 5, 4),),
            str(tmp_path / "att.onnx"),
            dynamo=False,
            dynamic_axes={"x": {0: "n"}},
            input_names=["x"],
        )
    units = OnnxGraphCandidate(tmp_path / "att.onnx").units(np.zeros((1, 5, 4), np.float32))
    adds = [u.name for u in units if u.op == "Add"]
    softmax = next(u.name for u in units if u.op == "Softmax")
    save_mapping({"q": adds[0], "k": adds[1], "/softmax": softmax}, tmp_path / "map.yaml")
    reference = TorchReference(module)
    x = np.random.default_rng(0).standard_normal((3, 5, 4)).astype(np.float32)
    built = build_candidate("onnx", str(tmp_path / "att.onnx"), reference, x, mapping_file=tmp_path / "map.yaml")
    result = diff_candidate(reference, built.candidate, x, ("golden", "carried"), built=built)
    assert result.first_divergent == {"golden": None, "carried": None}
    assert result.summary["golden"].compared == 2 and result.summary["carried"].compared == 3
    assert any(n.startswith("'/softmax': golden mode cannot feed it") for n in result.notes)
