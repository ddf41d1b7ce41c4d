"""Layer-level diff of EfficientNet-Lite0: torch reference vs its ONNX export in onnxruntime, on 8 real images."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx

from repliscope.backends.onnxruntime.candidate import OnnxCandidate
from repliscope.diff.layers.layer_result import LayerDiffResult
from repliscope.diff.layers.plot import plot_layer_errors
from repliscope.diff.layers.torch_reference import TorchReference

# 49 Conv (BatchNorm + padding folded in) + 33 Clip (ReLU6) + ReduceMean + Gemm = 84 module units, plus the
# 10 functional ops of forward (9 residual adds, the root's view), compared op by op since issue 12.
MODULE_UNITS = 84
OPS = [
    "_blocks.2/add",
    "_blocks.4/add",
    "_blocks.6/add",
    "_blocks.7/add",
    "_blocks.9/add",
    "_blocks.10/add",
    "_blocks.12/add",
    "_blocks.13/add",
    "_blocks.14/add",
    "/view",
]
COMPARED = MODULE_UNITS + len(OPS)
REFERENCE_LAYERS = 150  # 49 convs + 49 batch norms + 33 ReLU6 calls + 17 ZeroPad2d + pool + fc


def test_healthy_golden_passes_every_layer(healthy: LayerDiffResult) -> None:
    assert healthy.summary["golden"].compared == COMPARED
    assert healthy.summary["golden"].passed == COMPARED
    assert healthy.first_divergent["golden"] is None
    assert healthy.reference_layers == REFERENCE_LAYERS
    assert healthy.not_compared == []
    assert healthy.reference_ops == len(OPS) and healthy.uncompared == []
    assert healthy.summary["golden"].ops == len(OPS)
    assert healthy.summary["golden"].reference_units == REFERENCE_LAYERS + len(OPS)  # every unit covered once
    assert healthy.output is not None and healthy.output.passed and healthy.output.max_abs < 1e-4
    assert healthy.passed
    assert healthy.input_shape == [8, 3, 224, 224] and healthy.input_dtype == "float32"
    assert healthy.samples[0] == "imagenet_00_243.jpg" and len(healthy.samples) == 8
    # real headroom: the worst layer is well inside its tolerance
    assert healthy.summary["golden"].max_ratio < 0.5


def test_healthy_carried_passes_with_accumulated_tolerance(healthy: LayerDiffResult) -> None:
    assert healthy.summary["carried"].compared == COMPARED
    assert healthy.first_divergent["carried"] is None
    golden = [r.golden.max_abs for r in healthy.layers if r.golden]
    carried = [r.carried.max_abs for r in healthy.layers if r.carried]
    assert sum(carried) > sum(golden)  # error carried forward is larger than each layer's own


def test_onnx_nodes_map_to_torch_paths(healthy: LayerDiffResult) -> None:
    rows = {r.path: r for r in healthy.layers}
    assert rows["_bn0"].covers == ["_conv_stem", "_conv_stem.static_padding", "_bn0"]
    assert rows["_bn0"].kind == "Conv2dStaticSamePadding+ZeroPad2d+BatchNorm2d"
    assert rows["_bn0"].reduction == 3 * 3 * 3
    assert rows["_bn0"].source.endswith("efficientnet_lite_pytorch/utils.py:" + rows["_bn0"].source.rsplit(":")[-1])
    assert rows["_blocks.1._bn0"].covers == ["_blocks.1._expand_conv", "_blocks.1._bn0"]  # Identity padding skipped
    assert rows["_blocks.1._swish#2"].covers == ["_blocks.1._swish#2"]
    assert rows["_swish#2"].ref_shape == [8, 1280, 7, 7]
    assert rows["_fc"].reduction == 1280 and rows["_fc"].ref_shape == [8, 1000]
    assert rows["_avg_pooling"].reduction == 49
    assert [r.path for r in healthy.layers][:4] == ["_bn0", "_swish", "_blocks.0._bn1", "_blocks.0._swish"]
    relu = rows["_swish"].golden
    assert relu is not None and relu.max_abs == 0.0 and relu.ulp == 0.0  # clip is exact given the same input


def test_functional_ops_are_compared_with_their_call_site(healthy: LayerDiffResult) -> None:
    rows = {r.path: r for r in healthy.layers}
    assert [r.path for r in healthy.layers if r.op] == OPS
    add = rows["_blocks.2/add"]
    assert add.kind == "add" and add.covers == ["_blocks.2/add"] and add.ref_shape == [8, 24, 56, 56]
    assert add.source.endswith("efficientnet_lite_pytorch/model.py:123")
    assert add.golden is not None and add.golden.max_abs == 0.0  # an add fed the reference inputs is exact
    assert rows["/view"].ref_shape == [8, 1280] and rows["/view"].source.endswith("model.py:311")
    order = [r.path for r in healthy.layers]
    assert order.index("_blocks.2._bn2") < order.index("_blocks.2/add") < order.index("_blocks.3._bn0")


def test_broken_candidate_golden_names_exactly_the_layer(broken: LayerDiffResult) -> None:
    first = broken.first_divergent["golden"]
    assert first is not None
    assert first.path == "_blocks.5._bn0"
    assert first.covers == ["_blocks.5._expand_conv", "_blocks.5._bn0"]
    assert first.kind == "Conv2dStaticSamePadding+BatchNorm2d"
    assert "efficientnet_lite_pytorch/utils.py:" in first.source
    assert broken.summary["golden"].failed == 1  # golden mode attributes the error to that layer only


def test_broken_candidate_carried_error_grows(broken: LayerDiffResult, healthy: LayerDiffResult) -> None:
    first = broken.first_divergent["carried"]
    assert first is not None and first.path == "_blocks.5._bn0"
    rows = broken.layers
    later = [r for r in rows if r.index > first.index]
    failing_carried = [r.path for r in later if r.carried is not None and not r.carried.passed]
    failing_golden = [r.path for r in later if r.golden is not None and not r.golden.passed]
    assert failing_golden == []
    assert len(failing_carried) > 20
    assert "_fc" in failing_carried
    before = [r for r in rows if r.index < first.index]
    assert all(r.carried is not None and r.carried.passed for r in before)
    healthy_fc = healthy.layers[-1].carried
    broken_fc = rows[-1].carried
    assert healthy_fc is not None and broken_fc is not None and broken_fc.max_abs > 100 * healthy_fc.max_abs


def test_plot_written(broken: LayerDiffResult, tmp_path: Path) -> None:
    out = plot_layer_errors(broken, tmp_path / "sub" / "layers.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_run_layer_matches_full_session(
    reference: TorchReference, onnx_path: Path, batch: tuple[list[str], np.ndarray]
) -> None:
    """Carried mode unit by unit gives the same logits as the full onnxruntime graph."""
    import onnxruntime as ort

    _, x = batch
    cand = OnnxCandidate(onnx_path)
    paths = cand.mapped_layers(reference.layers(x))
    outputs = dict(cand.forward_layers(x[:2], paths))
    (full,) = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"]).run(["logits"], {"input": x[:2]})
    np.testing.assert_allclose(outputs["_fc"], full, rtol=0, atol=1e-4)
    assert set(outputs) == set(paths)


def test_dropped_residual_add_is_localized_and_fails(
    reference: TorchReference, onnx_path: Path, batch: tuple[list[str], np.ndarray]
) -> None:
    """Issue 12's blind spot: a residual add dropped from one block. Golden mode names the add itself (it has no
    counterpart in the candidate), every other unit fed the reference inputs passes, and the result fails."""
    from repliscope.diff.layers.driver import diff_layers
    from tests.diff.conftest import drop_node, find_node

    model = onnx.load(str(onnx_path))
    drop_node(model, find_node(model, "Add", "_blocks.6"), keep=0)
    ids, x = batch
    result = diff_layers(reference, OnnxCandidate(model, source="dropped add"), x[:2], modes=["golden"], samples=ids)
    first = result.first_divergent["golden"]
    assert first is not None and first.path == "_blocks.6/add" and first.missing
    assert first.source.endswith("efficientnet_lite_pytorch/model.py:123")
    assert [r.path for r in result.layers if r.missing or (r.golden and not r.golden.passed)] == ["_blocks.6/add"]
    assert result.output is not None and not result.output.passed and not result.passed
