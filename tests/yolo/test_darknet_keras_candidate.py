"""``repliscope diff MANIFEST --candidate PORT.keras --layers`` on the darknet manifest: the Keras port FILE (as
``repliscope convert --to keras`` writes it) against libdarknet, every layer within tolerance, and a bug injected
into the file (leaky slope 0.1 -> 0.01 in one layer's config, BN epsilon 1e-3 folded into one layer's weights)
localised to that layer in both modes."""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest

from tests.yolo._assets import DARKNET_DATA, MANIFEST, cfg_path, need_darknet, seed_cache, weights_path


@pytest.fixture(scope="module")
def port(tmp_path_factory: pytest.TempPathFactory) -> Path:
    need_darknet()
    pytest.importorskip("keras")
    from repliscope.convert.darknet_keras import convert_keras

    out = tmp_path_factory.mktemp("port") / "yolov3-tiny.keras"
    convert_keras(cfg_path(), weights_path(), out)
    return out


@pytest.fixture(scope="module")
def dog() -> tuple[np.ndarray, list[dict[str, np.ndarray]]]:
    need_darknet()
    from repliscope.backends.darknet import reference as ref
    from repliscope.backends.darknet.reference import darknet_layer_outputs

    x = ref.letterbox(DARKNET_DATA / "dog.jpg", 416, 416)[None]
    return x, darknet_layer_outputs(cfg_path(), weights_path(), x)


def _with_leaky_slope(port: Path, out: Path, layer: str, slope: float) -> Path:
    """A copy of the .keras file whose ``layer`` (a LeakyReLU) has another negative slope in its config."""
    with zipfile.ZipFile(port) as z:
        files = {n: z.read(n) for n in z.namelist()}
    config = json.loads(files["config.json"])
    (entry,) = [e for e in config["config"]["layers"] if e["name"] == layer]
    assert entry["class_name"] == "LeakyReLU" and entry["config"]["negative_slope"] == pytest.approx(0.1)
    entry["config"]["negative_slope"] = slope
    files["config.json"] = json.dumps(config).encode()
    with zipfile.ZipFile(out, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
    return out


def _with_bn_epsilon(port: Path, out: Path, layer: str, epsilon: float) -> Path:
    """A copy of the .keras file whose ``layer`` has its batch norm folded with ``epsilon`` added to the variance
    (the usual convention) instead of Darknet's 1e-6 added to sqrt(variance)."""
    import keras

    from repliscope.convert.darknet_cfg import load_network_cfg, read_weights
    from repliscope.convert.darknet_keras import _yolo_layer_class
    from repliscope.convert.darknet_onnx import fold_batch_norm

    _yolo_layer_class()
    model = keras.saving.load_model(port, compile=False)
    net = load_network_cfg(cfg_path())
    kernel, bias = fold_batch_norm(read_weights(weights_path(), net).layers[layer], epsilon)
    model.get_layer(f"{layer}_conv").set_weights([kernel.transpose(2, 3, 1, 0), bias])
    model.save(out)
    return out


@pytest.mark.slow
def test_port_file_every_layer_within_tolerance(port: Path, dog) -> None:  # type: ignore[no-untyped-def]
    from repliscope.convert.darknet_candidate import verify_keras_file

    x, outs = dog
    r = verify_keras_file(cfg_path(), weights_path(), x, port, reference_outputs=outs, samples=["dog.jpg"])
    assert r.passed and r.summary["golden"].compared == r.summary["carried"].compared == 24
    assert r.summary["golden"].failed == r.summary["carried"].failed == 0
    assert [row.path for row in r.layers][-2:] == ["convolutional_22", "yolo_23"]
    worst = max(row.carried.max_abs for row in r.layers if row.carried is not None)
    assert worst < 5e-4  # measured 1.2e-4 (convolutional_12, |ref| up to 37.9)
    assert max(row.golden.ratio for row in r.layers if row.golden is not None) < 0.5  # measured 0.097
    assert r.candidate["source"] == str(port) and r.candidate["mapping_origin"] == "by Darknet layer name"


@pytest.mark.slow
@pytest.mark.parametrize(("bug", "layer"), [("leaky", "convolutional_13"), ("epsilon", "convolutional_4")])
def test_bug_in_the_port_file_is_localised(port: Path, dog, tmp_path: Path, bug: str, layer: str) -> None:  # type: ignore[no-untyped-def]
    from repliscope.convert.darknet_candidate import verify_keras_file

    x, outs = dog
    if bug == "leaky":
        bad = _with_leaky_slope(port, tmp_path / "bad.keras", layer, 0.01)
    else:
        bad = _with_bn_epsilon(port, tmp_path / "bad.keras", layer, 1e-3)
    r = verify_keras_file(cfg_path(), weights_path(), x, bad, reference_outputs=outs)
    assert not r.passed
    for mode in ("golden", "carried"):
        first = r.first_divergent[mode]
        assert first is not None and first.path == layer and first.ratio > 10, (mode, first)
    # golden feeds every layer libdarknet's inputs: only the layer with the bug fails
    assert [row.path for row in r.layers if row.golden is not None and not row.golden.passed] == [layer]


@pytest.mark.slow
def test_mapping_pairs_renamed_layers(port: Path, dog, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from repliscope.convert.darknet_candidate import verify_keras_file
    from repliscope.diff.layers.mapping import MappingError
    from repliscope.diff.layers.pairs import Pair, pair_units

    x, outs = dog
    r = verify_keras_file(
        cfg_path(),
        weights_path(),
        x,
        port,
        mapping={"route_17": "route_17"},
        modes=("golden",),
        reference_outputs=outs,
    )
    assert r.passed and r.candidate["mapping_origin"] == "from --mapping" and "pairs" not in r.candidate
    # a Darknet layer without a unit of its name is skipped (partial pairing), not an error
    pairs, skipped = pair_units(["convolutional_0", "yolo_23"], ["convolutional_0", "yolo_out"], None, "p.keras")
    assert list(pairs) == ["convolutional_0"] and skipped == ["yolo_23"]
    with pytest.raises(
        MappingError, match=r"p.keras: the candidate has no unit for 1 pair\(s\): line 3: 'yolo_23: yolo_ou'"
    ):
        pair_units(["yolo_23"], ["yolo_out"], {"yolo_23": Pair("yolo_ou", line=3)}, "p.keras")
    with pytest.raises(MappingError, match="--mapping names Darknet layers the cfg does not have: conv_1"):
        verify_keras_file(cfg_path(), weights_path(), x, port, mapping={"conv_1": "x"}, reference_outputs=outs)
    assert pair_units(["yolo_23"], ["yolo_out"], {"yolo_23": Pair("yolo_out")}, "p.keras")[0] == {
        "yolo_23": Pair("yolo_out")
    }


@pytest.mark.slow
def test_cli_diff_candidate_keras_port(port: Path, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from repliscope.cli.main import app

    seed_cache()
    images = tmp_path / "images"
    images.mkdir()
    shutil.copy(DARKNET_DATA / "dog.jpg", images / "dog_0.jpg")  # a name the label rule detection accepts
    base = ["diff", str(MANIFEST), "--layers", "--dataset", str(images), "--batch", "1"]
    res = CliRunner().invoke(app, [*base, "--candidate", str(port)])
    assert res.exit_code == 0, res.output
    assert "golden    24/24 passed" in res.output and "carried   24/24 passed" in res.output
    bad = _with_leaky_slope(port, tmp_path / "bad.keras", "convolutional_8", 0.01)
    res = CliRunner().invoke(app, [*base, "--candidate", str(bad), "--json"])
    assert res.exit_code == 1, res.output
    doc = json.loads(res.output)
    assert doc["first_divergent"]["golden"]["path"] == doc["first_divergent"]["carried"]["path"] == "convolutional_8"
    onnx_file = tmp_path / "y.onnx"
    onnx_file.write_bytes(b"not read")
    res = CliRunner().invoke(app, [*base, "--candidate", str(onnx_file)])  # an ONNX file is a candidate too
    assert res.exit_code == 2
    assert f"ONNX candidate '{onnx_file}' cannot be read: DecodeError" in " ".join(res.output.split())


def test_cli_refuses_what_a_darknet_candidate_cannot_be(tmp_path: Path) -> None:
    """An unreadable ONNX file (one line naming it); --save-mapping, before any model is loaded."""
    from PIL import Image
    from typer.testing import CliRunner

    from repliscope.cli.main import app

    (tmp_path / "y.onnx").write_bytes(b"not read")
    (tmp_path / "y.keras").write_bytes(b"not read")
    (tmp_path / "images").mkdir()
    Image.new("RGB", (8, 8)).save(tmp_path / "images" / "black_0.jpg")
    base = ["diff", str(MANIFEST), "--layers", "--dataset", str(tmp_path / "images"), "--batch", "1"]
    res = CliRunner().invoke(app, [*base, "--candidate", str(tmp_path / "y.onnx")])
    assert res.exit_code == 2
    assert "cannot be read: DecodeError" in " ".join(res.output.split())
    res = CliRunner().invoke(app, [*base, "--candidate", str(tmp_path / "y.keras"), "--save-mapping", "m.yaml"])
    assert res.exit_code == 2
    assert "a darknet manifest's candidate is paired by Darknet layer name" in " ".join(res.output.split())
