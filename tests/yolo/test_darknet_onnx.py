"""Darknet -> ONNX conversion verified layer by layer against libdarknet (golden + carried), and injected
converter bugs localised to their layer: BN epsilon on the variance instead of the square root's 1e-6, leaky
slope 0.1 -> 0.01."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from repliscope.convert.darknet_onnx import convert
from tests.yolo._assets import DARKNET_DATA, cfg_path, need_darknet, weights_path


@pytest.fixture(scope="module")
def reference() -> tuple[np.ndarray, list[dict[str, np.ndarray]]]:
    need_darknet()
    from repliscope.backends.darknet import reference as ref
    from repliscope.backends.darknet.reference import darknet_layer_outputs

    x = ref.letterbox(DARKNET_DATA / "dog.jpg", 416, 416)[None]
    return x, darknet_layer_outputs(cfg_path(), weights_path(), x)


def test_every_layer_within_tolerance(reference) -> None:  # type: ignore[no-untyped-def]
    from repliscope.convert.darknet_verify import verify_layers

    x, outs = reference
    r = verify_layers(cfg_path(), weights_path(), x, reference_outputs=outs, samples=["dog.jpg"])
    assert r.passed and [row.path for row in r.layers][:3] == ["convolutional_0", "maxpool_1", "convolutional_2"]
    assert r.summary["golden"].compared == r.summary["carried"].compared == 24
    assert r.summary["golden"].failed == r.summary["carried"].failed == 0
    worst = max(row.carried.max_abs for row in r.layers if row.carried is not None)
    assert worst < 2e-4  # measured 7.5e-5 (convolutional_12, |ref| up to 37.9)
    yolo = next(row for row in r.layers if row.path == "yolo_23")
    assert yolo.golden is not None and yolo.golden.max_abs < 1e-5


@pytest.mark.parametrize(
    ("bug", "layer"), [({"epsilon": 1e-3}, "convolutional_0"), ({"leaky_slope": 0.01}, "convolutional_0")]
)
def test_injected_bug_is_localised(reference, bug: dict[str, float], layer: str) -> None:  # type: ignore[no-untyped-def]
    from repliscope.convert.darknet_verify import verify_layers

    x, outs = reference
    r = verify_layers(cfg_path(), weights_path(), x, reference_outputs=outs, modes=("golden",), **bug)
    first = r.first_divergent["golden"]
    assert not r.passed and first is not None and first.path == layer and first.ratio > 10
    # golden mode feeds each layer libdarknet's inputs: the layers without the bug (pools, route, upsample, yolo)
    # pass, every convolution with BN / leaky fails
    failing = {row.path.split("_")[0] for row in r.layers if row.golden is not None and not row.golden.passed}
    assert failing == {"convolutional"}


def test_convert_writes_a_runnable_onnx(tmp_path: Path) -> None:
    import onnxruntime as ort

    info = convert(cfg_path(), weights_path(), tmp_path / "yolov3-tiny.onnx")
    assert info["layers"] == 24 and info["parameters"] == 8_849_210 and info["weights_version"] == "0.2.0"
    # 8,858,734 Darknet floats - 3 x 3184 folded BN scales/means/variances + 28 shape/scale constants
    s = ort.InferenceSession(str(tmp_path / "yolov3-tiny.onnx"), providers=["CPUExecutionProvider"])
    out = s.run(None, {"data": np.zeros((2, 3, 416, 416), np.float32)})
    assert [o.name for o in s.get_outputs()] == ["yolo_16", "yolo_23"]
    assert out[0].shape == (2, 255, 13, 13) and out[1].shape == (2, 255, 26, 26)


@pytest.mark.slow
def test_cli_convert_to_onnx_verifies_every_layer(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from repliscope.cli.main import app
    from tests.yolo._assets import MANIFEST, seed_cache

    need_darknet()
    seed_cache()
    out = tmp_path / "y.onnx"
    args = ["convert", str(MANIFEST), "--to", "onnx", "--out", str(out), "--verify-samples", "1"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "24 Darknet layers, 8,849,210 parameters" in res.output
    assert "golden: 24/24 layers within tolerance" in res.output and "carried: 24/24" in res.output
    bad = CliRunner().invoke(app, ["convert", str(MANIFEST), "--to", "tflite", "--out", str(out)])
    assert bad.exit_code == 2 and (
        "--to 'tflite': unknown target framework (allowed: keras (from pytorch_state_dict), onnx (from darknet), "
        "keras (from darknet))" in bad.output
    )


def test_onnxruntime_runs_the_darknet_source_through_the_cached_conversion(tmp_path: Path) -> None:
    from repliscope.evaluation.run import RunSettings, prepare
    from repliscope.runtimes import create_runner
    from tests.yolo._assets import MANIFEST, seed_cache

    seed_cache()
    prepared = prepare(MANIFEST, RunSettings(runtime="onnxruntime", threads=1, batch_size=1))
    runner = create_runner("onnxruntime", prepared.artifact, 1, tmp_path)
    out = runner.infer_outputs(np.full((1, 3, 416, 416), 0.5, np.float32))
    assert sorted(out) == ["yolo_16", "yolo_23"] and out["yolo_23"].shape == (1, 255, 26, 26)
    assert runner.notes["conversion"]["converter"] == "repliscope.convert.darknet_onnx"
    again = create_runner("onnxruntime", prepared.artifact, 1, tmp_path)
    again.load()
    assert again.notes["conversion"]["cached"] is True


@pytest.mark.slow
def test_cli_layer_diff_darknet_onnxruntime() -> None:
    from typer.testing import CliRunner

    from repliscope.cli.main import app
    from tests.yolo._assets import MANIFEST, need_coco, seed_cache

    need_darknet()
    seed_cache()
    args = [
        "diff",
        str(MANIFEST),
        "--runtimes",
        "darknet",
        "onnxruntime",
        "--layers",
        "--batch",
        "1",
        "--dataset",
        f"coco:{need_coco()}",
    ]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "golden    24/24 passed" in res.output and "carried   24/24 passed" in res.output
    bad = CliRunner().invoke(app, [*args[:5], "--layers", "--candidate", "x.onnx"])
    assert bad.exit_code == 2 and "no --candidate" in bad.output
