"""The Keras port of the Darknet model (as the TF Model Garden re-engineered YOLO) verified layer by layer against
libdarknet (golden: each layer's Keras layers on libdarknet's inputs; carried: the whole model), an injected leaky
slope localised, and the .keras file written and reloaded."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.yolo._assets import DARKNET_DATA, cfg_path, need_darknet, weights_path


@pytest.mark.slow
def test_keras_port_every_layer_within_tolerance_and_bug_localised(tmp_path: Path) -> None:
    need_darknet()
    pytest.importorskip("keras")
    from repliscope.backends.darknet import reference as ref
    from repliscope.backends.darknet.reference import darknet_layer_outputs
    from repliscope.convert.darknet_keras import convert_keras
    from repliscope.convert.darknet_verify import verify_layers

    x = ref.letterbox(DARKNET_DATA / "dog.jpg", 416, 416)[None]
    outs = darknet_layer_outputs(cfg_path(), weights_path(), x)
    r = verify_layers(cfg_path(), weights_path(), x, reference_outputs=outs, candidate="keras")
    assert r.passed and r.summary["golden"].compared == r.summary["carried"].compared == 24
    worst = max(row.carried.max_abs for row in r.layers if row.carried is not None)
    assert worst < 5e-4  # measured 1.3e-4 (convolutional_12)
    bad = verify_layers(
        cfg_path(), weights_path(), x, reference_outputs=outs, candidate="keras", modes=("golden",), leaky_slope=0.01
    )
    first = bad.first_divergent["golden"]
    assert first is not None and first.path == "convolutional_0"
    info = convert_keras(cfg_path(), weights_path(), tmp_path / "yolov3-tiny.keras")
    assert info["layers"] == 24 and info["parameters"] == 8_849_182
    import keras

    from repliscope.convert.darknet_keras import _yolo_layer_class

    _yolo_layer_class()
    model = keras.saving.load_model(tmp_path / "yolov3-tiny.keras")
    y = model.predict(np.ascontiguousarray(x.transpose(0, 2, 3, 1)), verbose=0)
    assert np.abs(y[-1].transpose(0, 3, 1, 2)[0] - outs[0]["yolo_23"]).max() < 1e-4


@pytest.mark.slow
def test_cli_convert_darknet_to_keras(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from repliscope.cli.main import app
    from tests.yolo._assets import MANIFEST, seed_cache

    need_darknet()
    pytest.importorskip("keras")
    seed_cache()
    out = tmp_path / "y.keras"
    args = ["convert", str(MANIFEST), "--to", "keras", "--out", str(out), "--verify-samples", "1"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "24 Darknet layers, 8,849,182 parameters" in res.output
    assert "golden: 24/24 layers within tolerance" in res.output
    assert out.is_file()


@pytest.mark.slow
def test_cli_layer_diff_darknet_keras() -> None:
    from typer.testing import CliRunner

    from repliscope.cli.main import app
    from tests.yolo._assets import MANIFEST, need_coco, seed_cache

    need_darknet()
    pytest.importorskip("keras")
    seed_cache()
    args = [
        "diff",
        str(MANIFEST),
        "--runtimes",
        "darknet",
        "keras",
        "--layers",
        "--batch",
        "1",
        "--dataset",
        f"coco:{need_coco()}",
    ]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "golden    24/24 passed" in res.output and "carried   24/24 passed" in res.output
