"""Lite0 torch -> the hand-written Keras port: outputs on the 20 foolbox ImageNet images, save/load, CLI."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from repliscope.convert.verify import compare_logits, keras_logits, save_and_reload, torch_logits
from repliscope.diff.tolerance import TolerancePolicy
from tests.convert import _helpers as H

# Keras' own weight saving trips numpy 2's copy-keyword deprecation; not ours to fix
pytestmark = pytest.mark.filterwarnings("ignore:__array__ implementation doesn't accept a copy keyword")


@pytest.fixture(scope="module")
def logits() -> tuple[np.ndarray, np.ndarray]:
    x, _ = H.foolbox_images()
    return torch_logits(H.torch_lite0(), x), keras_logits(H.converted()[0], x)


def test_every_weight_is_converted_and_the_epsilons_agree() -> None:
    model, mapping = H.converted()
    assert mapping.spec.batch_norm_epsilon == "check"  # a mismatch would have raised
    assert len(model.weights) == 247
    assert {layer.epsilon for layer in model.layers if hasattr(layer, "moving_variance")} == {1e-3}


def test_softmax_matches_torch_within_1e4_and_top1_is_identical(logits: tuple[np.ndarray, np.ndarray]) -> None:
    check = compare_logits(*logits)
    assert check.n == 20
    assert check.max_abs_prob_diff < 1e-4, check
    assert check.flipped == []


def test_keras_gets_the_same_18_of_20_right_as_torch(logits: tuple[np.ndarray, np.ndarray]) -> None:
    _, labels = H.foolbox_images()
    ref, cand = (lg.argmax(-1) for lg in logits)
    assert int((ref == labels).sum()) == 18
    assert int((cand == labels).sum()) == 18


def test_saved_keras_file_reloads_to_the_same_outputs(tmp_path: Path, logits: tuple[np.ndarray, np.ndarray]) -> None:
    model = H.converted()[0]
    reloaded = save_and_reload(model, tmp_path / "lite0.keras")
    # the file keeps every weight, bit for bit
    assert len(reloaded.weights) == len(model.weights) == 247
    for saved, original in zip(reloaded.weights, model.weights, strict=True):
        assert saved.path == original.path
        np.testing.assert_array_equal(saved.numpy(), original.numpy(), err_msg=original.path)
    # so the outputs are the same computation; TensorFlow's multi-threaded reductions are not bit-reproducible
    # across thread schedules (3 of 4000 logits 1.4e-6 apart on a loaded machine), so they are compared with the
    # project's float32 tolerance of the classifier (k * eps * sqrt(1280 products per logit) * max|logit|)
    x, _ = H.foolbox_images()
    ref = logits[1][:4]
    fc = H.torch_lite0()._fc
    tol = TolerancePolicy().tolerance("_fc", ["Linear"], ref.dtype, fc.in_features, float(np.abs(ref).max()))
    assert tol < 1e-3
    np.testing.assert_allclose(keras_logits(reloaded, x[:4]), ref, rtol=0, atol=tol)


def test_convert_cli_writes_a_verified_keras_file(tmp_path: Path) -> None:
    from repliscope.cli.convert_cmd import register

    H.require_keras()
    app = typer.Typer()
    register(app)
    app.command("noop", hidden=True)(lambda: None)  # typer collapses a single-command app
    out = tmp_path / "weights.keras"
    result = CliRunner().invoke(
        app,
        [
            "convert",
            str(H.REPO / "examples" / "efficientnet-lite0.yaml"),
            "--to",
            "keras",
            "--mapping",
            str(H.MAPPING),
            "--out",
            str(out),
            "--verify-samples",
            "4",
            "--no-layers",
        ],
    )
    assert result.exit_code == 0, result.output
    assert out.is_file() and out.with_suffix(".mapping.yaml").is_file()
    assert "247 weights converted" in result.output
    assert "top-1 identical on 4/4" in result.output
    # the written file + its mapping sidecar are a diff candidate of their own
    from repliscope.backends.keras.candidate import KerasCandidate

    cand = KerasCandidate.from_path(out, H.torch_lite0())
    assert cand.describe()["mapping"] == str(out.with_suffix(".mapping.yaml"))
    x, _ = H.foolbox_images()
    fc_in = H.capture(H.torch_lite0(), x[:1])[-1]
    assert fc_in.path == "_fc"
    assert H.relative_error(cand.run_layer("_fc", fc_in.inputs), fc_in.output) < 1e-6


def test_convert_cli_reports_every_offender_and_exits_2(tmp_path: Path) -> None:
    from repliscope.cli.convert_cmd import register

    H.require_keras()
    bad = tmp_path / "mapping.yaml"
    bad.write_text(H.MAPPING.read_text().replace("  - {torch: _fc, keras: fc, kind: dense}\n", ""))
    app = typer.Typer()
    register(app)
    app.command("noop", hidden=True)(lambda: None)
    result = CliRunner().invoke(
        app,
        [
            "convert",
            str(H.REPO / "examples" / "efficientnet-lite0.yaml"),
            "--mapping",
            str(bad),
            "--model",
            str(H.PORT_DIR),
            "--out",
            str(tmp_path / "w.keras"),
        ],
    )
    assert result.exit_code == 2
    assert "_fc.weight (1000, 1280)" in result.output and "_fc.bias (1000,)" in result.output
    assert not (tmp_path / "w.keras").exists()
