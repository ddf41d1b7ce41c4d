"""Any candidate against libdarknet (issue 39): a tf_keras SavedModel that nests its convs as the Model Garden does
(``backbone/block_0/bn``) and pairs with only some Darknet layers, a callable returning named tensors, and the
batch-norm convention named as the cause when a conv+BN unit diverges.

The candidate is YOLOv3-tiny's first five layers (conv 16, maxpool, conv 32, maxpool, conv 64) built in tf_keras
with pjreddie's weights and a REAL ``BatchNormalization`` layer: with its default epsilon 1e-3 it normalises
``(x - mean) / sqrt(var + 1e-3)`` where Darknet uses ``(x - mean) / (sqrt(var) + 1e-6)``: exactly the Model Garden's
mistake. The same model with the moving variance corrected so that ``sqrt(var' + eps) = sqrt(var) + 1e-6`` passes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.yolo._assets import DARKNET_DATA, MANIFEST, cfg_path, need_darknet, seed_cache, weights_path

CONVS = ("convolutional_0", "convolutional_2", "convolutional_4")

MAPPING = """\
convolutional_0: backbone/block_0
maxpool_1: backbone/pool_1
convolutional_2: backbone/block_2
convolutional_4:
  unit: [backbone/block_4/conv, backbone/block_4/bn]
  activation: leaky
"""


def _build(out: Path, epsilon: float, corrected: bool, keras_module: Any = None) -> Path:
    """The five-layer model, in tf_keras as a SavedModel folder ``out`` (or in ``keras_module``, e.g. Keras 3, as
    the ``.keras`` file ``out``); BN ``epsilon``; ``corrected``: the moving variance adjusted so that the layer
    computes Darknet's normalisation."""
    from repliscope.convert.darknet_cfg import load_network_cfg, read_weights

    if keras_module is None:
        import tf_keras as keras_module
    tf_keras = keras_module

    layers = tf_keras.layers
    net = load_network_cfg(cfg_path())
    weights = read_weights(weights_path(), net)
    inp = layers.Input((416, 416, 3), name="image")
    bb_in = layers.Input((416, 416, 3))
    h = bb_in
    for index, name in enumerate(("convolutional_0", "maxpool_1", "convolutional_2", "maxpool_3", "convolutional_4")):
        if name.startswith("maxpool"):
            h = layers.MaxPooling2D(2, 2, padding="same", name=f"pool_{index}")(h)
            continue
        w = weights.layers[name]
        assert w.variance is not None and w.scales is not None and w.mean is not None
        block_in = layers.Input(tuple(int(d) for d in h.shape[1:]))
        conv = layers.Conv2D(w.kernel.shape[0], 3, padding="same", use_bias=False, name="conv")
        bn = layers.BatchNormalization(epsilon=epsilon, name="bn")
        y = layers.LeakyReLU(0.1, name="leaky")(bn(conv(block_in)))
        block = tf_keras.Model(block_in, y, name=f"block_{index}")
        conv.set_weights([w.kernel.transpose(2, 3, 1, 0)])
        std = np.sqrt(w.variance.astype(np.float64))
        variance = (std + 1e-6) ** 2 - epsilon if corrected else w.variance.astype(np.float64)
        assert (variance > 0).all()
        bn.set_weights([w.scales, w.biases, w.mean, variance.astype(np.float32)])
        h = block(h)
    backbone = tf_keras.Model(bb_in, h, name="backbone")
    model = tf_keras.Model(inp, backbone(inp), name="tfmg_like")
    model.save(str(out))
    assert out.suffix == ".keras" or (out / "keras_metadata.pb").is_file()
    return out


@pytest.fixture(scope="module")
def dog() -> tuple[np.ndarray, list[dict[str, np.ndarray]]]:
    need_darknet()
    from repliscope.backends.darknet import reference as ref
    from repliscope.backends.darknet.reference import darknet_layer_outputs

    x = ref.letterbox(DARKNET_DATA / "dog.jpg", 416, 416)[None]
    return x, darknet_layer_outputs(cfg_path(), weights_path(), x)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    need_darknet()
    pytest.importorskip("tf_keras")
    root = tmp_path_factory.mktemp("tfmg")
    (root / "m.yaml").write_text(MAPPING, encoding="utf-8")
    return {
        "keras_eps": _build(root / "keras_eps", 1e-3, corrected=False),
        "torch_eps": _build(root / "torch_eps", 1e-5, corrected=False),
        "corrected": _build(root / "corrected", 1e-3, corrected=True),
        "mapping": root / "m.yaml",
    }


def _diff(models: dict[str, Path], dog, which: str, **kw):
    from repliscope.convert.darknet_candidate import darknet_format, verify_candidate

    x, outs = dog
    spec = str(models[which])
    assert darknet_format(spec, None) == "tf_keras"  # a SavedModel folder written by tf_keras
    return verify_candidate(
        cfg_path(), weights_path(), x, spec, "tf_keras", mapping_file=models["mapping"], reference_outputs=outs, **kw
    )


@pytest.mark.slow
def test_keras_epsilon_is_named_at_convolutional_0(models, dog) -> None:
    r = _diff(models, dog, "keras_eps")
    assert [row.path for row in r.layers] == ["convolutional_0", "maxpool_1", "convolutional_2", "convolutional_4"]
    for mode in ("golden", "carried"):
        first = r.first_divergent[mode]
        assert first is not None and first.path == "convolutional_0" and first.ratio > 10, (mode, first)
    # golden feeds each unit libdarknet's input: every conv+BN unit diverges, the maxpool is exact
    golden = {row.path: row.golden for row in r.layers}
    assert golden["maxpool_1"] is not None and golden["maxpool_1"].max_abs == 0.0
    assert all(golden[c] is not None and not golden[c].passed for c in CONVS)
    named = {(c.path, c.mode): c for c in r.causes}
    for conv in CONVS:
        cause = named[(conv, "golden")]
        assert cause.cause == "batch_norm_convention" and cause.convention == "keras", cause
        assert cause.residual < 0.1 * cause.error, cause  # the convention explains >= 90 % of the error
        assert cause.residuals["darknet"] == pytest.approx(cause.error)
        assert cause.residuals["keras"] < cause.residuals["torch"] < cause.residuals["darknet"]
    assert named[("convolutional_0", "golden")].residual < 0.01 * named[("convolutional_0", "golden")].error
    assert named[("convolutional_0", "carried")].convention == "keras"
    text = " ".join(r.notes)
    assert "'convolutional_0' (golden): batch-norm convention: the candidate normalises with Keras" in text
    assert "sqrt(var + 1e-3)" in text and "Darknet's (x - mean) / (sqrt(var) + 1e-6)" in text
    # partial pairing: everything after convolutional_4 (and maxpool_3, which has no unit) skipped with a note
    assert "20 reference layer(s) have no counterpart in the candidate and are skipped" in text
    assert "'convolutional_4' <- 'backbone/block_4/bn': activation leaky" in text
    reasons = {u.path: u.reason for u in r.uncompared}
    assert set(reasons) >= {"maxpool_3", "maxpool_5", "yolo_23"}
    assert reasons["yolo_23"].startswith("skipped: the candidate has no unit paired with it")
    assert r.candidate["format"] == "tf_keras" and r.candidate["skipped"][0] == "maxpool_3"
    assert r.candidate["transforms"] == {"convolutional_4": "activation leaky"}


@pytest.mark.slow
def test_torch_epsilon_is_told_from_keras(models, dog) -> None:
    r = _diff(models, dog, "torch_eps", modes=("golden",))
    causes = {c.path: c for c in r.causes}
    assert r.first_divergent["golden"] is not None and r.first_divergent["golden"].path == "convolutional_0"
    assert causes["convolutional_0"].convention == "torch", causes
    assert causes["convolutional_0"].residuals["torch"] < 0.05 * causes["convolutional_0"].residuals["keras"]


@pytest.mark.slow
def test_the_corrected_model_passes(models, dog) -> None:
    r = _diff(models, dog, "corrected")
    assert r.first_divergent == {"golden": None, "carried": None}, [
        (row.path, row.golden, row.carried) for row in r.layers
    ]
    assert r.summary["golden"].compared == r.summary["carried"].compared == 4 and not r.causes


@pytest.mark.slow
def test_the_savedmodel_graph_as_a_candidate(models, dog, tmp_path: Path) -> None:
    """The same folder as a TensorFlow SavedModel (``--candidate-format savedmodel``): its graph operations are the
    units; a unit spans the unpaired operations before it (``convolutional_4`` covers ``maxpool_3``)."""
    from repliscope.convert.darknet_candidate import verify_candidate

    scope = "StatefulPartitionedCall/tfmg_like/backbone"
    mapping = tmp_path / "ops.yaml"
    mapping.write_text(
        f"convolutional_0: {scope}/block_0/leaky/LeakyRelu\n"
        f"maxpool_1: {scope}/pool_1/MaxPool\n"
        f"convolutional_2: {scope}/block_2/leaky/LeakyRelu\n"
        f"convolutional_4: {{unit: {scope}/block_4/bn/FusedBatchNormV3, activation: leaky}}\n",
        encoding="utf-8",
    )
    x, outs = dog
    spec = str(models["keras_eps"])
    r = verify_candidate(
        cfg_path(), weights_path(), x, spec, "savedmodel", mapping_file=mapping, reference_outputs=outs
    )
    assert r.candidate["format"] == "savedmodel"
    rows = {row.path: row for row in r.layers}
    assert rows["convolutional_4"].covers == ["maxpool_3", "convolutional_4"]
    assert rows["maxpool_1"].golden is not None and rows["maxpool_1"].golden.max_abs == 0.0
    for mode in ("golden", "carried"):
        first = r.first_divergent[mode]
        assert first is not None and first.path == "convolutional_0", (mode, first)
    golden = {c.path: c.convention for c in r.causes if c.mode == "golden"}
    assert golden == dict.fromkeys(CONVS, "keras")
    good = verify_candidate(
        cfg_path(),
        weights_path(),
        x,
        str(models["corrected"]),
        "savedmodel",
        mapping_file=mapping,
        reference_outputs=outs,
    )
    assert good.passed and good.summary["golden"].compared == good.summary["carried"].compared == 4


@pytest.mark.slow
def test_a_keras3_file_with_nested_paths(models, dog) -> None:
    """A Keras 3 ``.keras`` file whose mapping names nested paths is read layer by sub-layer
    (KerasNestedCandidate), not only by its top-level layers."""
    keras = pytest.importorskip("keras")
    from repliscope.convert.darknet_candidate import verify_candidate

    path = _build(models["mapping"].parent / "k3.keras", 1e-3, corrected=False, keras_module=keras)
    x, outs = dog
    r = verify_candidate(
        cfg_path(), weights_path(), x, str(path), "keras", mapping_file=models["mapping"], reference_outputs=outs
    )
    assert r.candidate["candidate"] == "keras" and r.candidate["pairs"]["convolutional_0"] == "backbone/block_0"
    assert [row.path for row in r.layers] == ["convolutional_0", "maxpool_1", "convolutional_2", "convolutional_4"]
    assert {c.path: c.convention for c in r.causes if c.mode == "golden"} == dict.fromkeys(CONVS, "keras")


@pytest.mark.slow
def test_a_callable_returning_named_tensors(models, dog, tmp_path: Path) -> None:
    """``FILE.py:NAME`` returns the model's block outputs (NHWC): carried mode pairs them through the mapping's
    ``layout: NHWC``; golden mode is listed as not run, with the reason."""
    from repliscope.convert.darknet_candidate import darknet_format, verify_candidate

    user = tmp_path / "tfmg_layers.py"
    user.write_text(
        "import numpy as np\n"
        "import tf_keras\n"
        f"MODEL = tf_keras.models.load_model({str(models['keras_eps'])!r}, compile=False)\n"
        "\n"
        "def layers(x):\n"
        "    bb = MODEL.get_layer('backbone')\n"
        "    h = np.ascontiguousarray(x.transpose(0, 2, 3, 1))\n"
        "    out = {}\n"
        "    for name in ('block_0', 'pool_1', 'block_2', 'pool_3', 'block_4'):\n"
        "        h = bb.get_layer(name)(h, training=False)\n"
        "        out[name] = h.numpy()\n"
        "    return out\n",
        encoding="utf-8",
    )
    mapping = tmp_path / "m.yaml"
    mapping.write_text(
        "".join(
            f"{d}: {{unit: {u}, layout: NHWC}}\n"
            for d, u in [
                ("convolutional_0", "block_0"),
                ("maxpool_1", "pool_1"),
                ("convolutional_2", "block_2"),
                ("maxpool_3", "pool_3"),
                ("convolutional_4", "block_4"),
            ]
        ),
        encoding="utf-8",
    )
    spec = f"{user}:layers"
    assert darknet_format(spec, None) == "callable"
    x, outs = dog
    r = verify_candidate(cfg_path(), weights_path(), x, spec, "callable", mapping_file=mapping, reference_outputs=outs)
    assert r.modes == ["carried"] and r.notes[0].startswith("golden mode not run: a callable candidate returns")
    first = r.first_divergent["carried"]
    assert first is not None and first.path == "convolutional_0"
    assert {c.path: c.convention for c in r.causes}["convolutional_0"] == "keras"
    pools = {row.path: row.carried for row in r.layers if row.path.startswith("maxpool")}
    assert set(pools) == {"maxpool_1", "maxpool_3"} and all(s is not None for s in pools.values())


def test_a_callable_spec_follows_the_code_ref_rules(tmp_path: Path) -> None:
    """``--candidate FILE.py:NAME`` is the user's own code, but its NAME follows code_refs' rules: a private name
    and a module reached as an attribute are refused before anything is called."""
    from repliscope.diff.layers.callable_candidate import CallableCandidate
    from repliscope.errors import RepliscopeError

    marker = tmp_path / "called"
    user = tmp_path / "cand.py"
    user.write_text(
        f"import os\n\ndef _hidden(x):\n    open({str(marker)!r}, 'w').close()\n    return {{}}\n", encoding="utf-8"
    )
    with pytest.raises(RepliscopeError, match="_hidden"):
        CallableCandidate.from_spec(f"{user}:_hidden")
    with pytest.raises(
        RepliscopeError, match=r"--candidate .*cand.py:os.system: 'os' is a module; name an object in it"
    ):
        CallableCandidate.from_spec(f"{user}:os.system")
    assert not marker.exists()
    (tmp_path / "bad.py").write_text("def f(x):\n    return [1, 2]\n", encoding="utf-8")
    cand = CallableCandidate.from_spec(f"{tmp_path / 'bad.py'}:f")
    with pytest.raises(
        RepliscopeError, match=r"--candidate .*bad.py:f: returned list, not a non-empty dict name -> array"
    ):
        cand.units(np.zeros((1, 3, 4, 4), np.float32))


def test_an_h5_file_with_a_custom_layer_says_what_to_give(tmp_path: Path) -> None:
    pytest.importorskip("tf_keras")
    import tf_keras

    from repliscope.backends.tensorflow.tf_keras_candidate import load_tf_keras
    from repliscope.errors import RepliscopeError

    class Yolo(tf_keras.layers.Layer):
        def call(self, x):
            return x * 2

    inp = tf_keras.Input((4, 4, 3))
    tf_keras.Model(inp, Yolo(name="yolo")(inp)).save(tmp_path / "m.h5")
    with pytest.raises(
        RepliscopeError, match=r"cannot load the tf_keras model .*m.h5.*Unknown layer: 'Yolo'.*SavedModel folder"
    ):
        load_tf_keras(tmp_path / "m.h5")


@pytest.mark.slow
def test_cli_names_the_cause(models, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from repliscope.cli.main import app

    seed_cache()
    images = tmp_path / "images"
    images.mkdir()
    shutil.copy(DARKNET_DATA / "dog.jpg", images / "dog_0.jpg")
    base = ["diff", str(MANIFEST), "--layers", "--dataset", str(images), "--batch", "1"]
    res = CliRunner().invoke(
        app, [*base, "--candidate", str(models["keras_eps"]), "--mapping", str(models["mapping"]), "--json"]
    )
    assert res.exit_code == 1, res.output
    doc = json.loads(res.output[res.output.index("{") :])
    assert doc["first_divergent"]["golden"]["path"] == "convolutional_0"
    assert [(c["path"], c["mode"], c["convention"]) for c in doc["causes"]][:1] == [
        ("convolutional_0", "golden", "keras")
    ]
    bad = tmp_path / "bad.yaml"
    bad.write_text("convolutional_0:\n  unit: backbone/block_0\n  layuot: NHWC\n", encoding="utf-8")
    res = CliRunner().invoke(app, [*base, "--candidate", str(models["keras_eps"]), "--mapping", str(bad)])
    assert res.exit_code == 2
    assert f"{bad}:3: unknown key 'layuot'" in " ".join(res.output.split())
    assert "(allowed: unit, activation, layout, scale)" in " ".join(res.output.split())
