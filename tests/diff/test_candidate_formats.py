"""Any candidate: format detection, the proposed mapping, and torch / TFLite / SavedModel / .keras candidates of
examples/tiny-resnet.yaml (built from the Keras port in tests/diff/_ports.py), correct and with porting bugs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from repliscope.backends.tflite.candidate import GOLDEN_LIMIT
from repliscope.datasets import resolve_dataset
from repliscope.diff.layers.auto_mapping import ReferenceUnit, propose
from repliscope.diff.layers.candidate_format import FORMATS, build_candidate, detect_format, diff_candidate
from repliscope.diff.layers.layer_result import LayerDiffResult
from repliscope.diff.layers.mapping import UnitInfo
from repliscope.diff.layers.torch_reference import TorchReference
from repliscope.diff.task_level import first_batch
from repliscope.errors import RepliscopeError
from repliscope.evaluation.run import RunSettings, prepare
from tests.conftest import EXAMPLES
from tests.diff import _ports

TINY = EXAMPLES / "tiny-resnet.yaml"
PORTS = Path(_ports.__file__)
REFERENCE_UNITS = 22
"""tiny-resnet: 14 module layers + 8 functional ops (4 relu, 2 add, flatten, ... as the reference traces)."""


# -- detection ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make, expected",
    [
        (lambda d: _touch(d / "m.onnx"), "onnx"),
        (lambda d: _touch(d / "m.tflite"), "tflite"),
        (lambda d: _touch(d / "m.keras"), "keras"),
        (lambda d: _touch(d / "mapping.yaml"), "keras"),
        (lambda d: _touch(d / "sm" / "saved_model.pb").parent, "savedmodel"),
        (lambda d: _touch(d / "port" / "mapping.yaml").parent, "keras"),
        (lambda d: "tests.diff._ports:same", "torch"),
        (lambda d: f"{PORTS}:elu", "torch"),
    ],
)
def test_detect_format(tmp_path: Path, make: Any, expected: str) -> None:
    assert detect_format(str(make(tmp_path))) == expected


def test_detect_format_errors_list_every_format(tmp_path: Path) -> None:
    for bad in (_touch(tmp_path / "weights.bin"), tmp_path, tmp_path / "missing.tflite"):
        with pytest.raises(RepliscopeError) as err:
            detect_format(str(bad))
        assert all(f"{name}: " in str(err.value) for name in FORMATS), str(err.value)
    assert sorted(FORMATS) == ["callable", "keras", "onnx", "savedmodel", "tf_keras", "tflite", "torch"]


def test_one_registry_keyed_by_the_format_words() -> None:
    from repliscope.diff import CANDIDATES

    classes = {name: CANDIDATES.get(name).__name__ for name in FORMATS}
    assert classes == {
        "onnx": "OnnxCandidate",
        "tflite": "TfliteCandidate",
        "savedmodel": "TensorflowCandidate",
        "keras": "KerasCandidate",
        "torch": "TorchCandidate",
        "tf_keras": "TfKerasCandidate",
        "callable": "CallableCandidate",
    }
    assert sorted(CANDIDATES.names()) == [
        "callable",
        "darknet_keras",
        "darknet_onnx",
        "keras",
        "onnx",
        "onnxruntime",
        "savedmodel",
        "tf_keras",
        "tflite",
        "torch",
    ]


def _touch(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x")
    return path


# -- the proposed mapping ----------------------------------------------------------------------------------------


def test_proposal_pairs_a_fused_unit_with_the_last_layer_it_covers() -> None:
    ref = [
        ReferenceUnit("stem.pad", "ZeroPad2d", (1, 3, 9, 9)),
        ReferenceUnit("stem", "Conv2d", (1, 8, 4, 4)),
        ReferenceUnit("bn", "BatchNorm2d", (1, 8, 4, 4)),
        ReferenceUnit("act", "ReLU6", (1, 8, 4, 4)),
        ReferenceUnit("dw", "Conv2d", (1, 8, 4, 4)),
        ReferenceUnit("dw_bn", "BatchNorm2d", (1, 8, 4, 4)),
        ReferenceUnit("fc", "Linear", (1, 10)),
    ]
    cand = [
        UnitInfo("pad", "PAD", (1, 9, 9, 3)),
        UnitInfo("conv_fused", "CONV_2D", (1, 4, 4, 8)),
        UnitInfo("dw_fused", "DEPTHWISE_CONV_2D", (1, 4, 4, 8)),
        UnitInfo("reshape", "RESHAPE", (1, 8)),
        UnitInfo("logits", "FULLY_CONNECTED", (1, 10)),
    ]
    p = propose(ref, cand, "NHWC")
    assert p.mapping == {"stem.pad": "pad", "act": "conv_fused", "dw_bn": "dw_fused", "fc": "logits"}
    assert p.covers["act"] == ["stem", "bn", "act"] and p.covers["dw_bn"] == ["dw", "dw_bn"]
    assert p.unmatched_candidate == ["reshape"] and p.uncovered_reference == []


def test_proposal_never_pairs_a_weighted_layer_with_an_activation() -> None:
    ref = [ReferenceUnit("conv", "Conv2d", (1, 4, 2, 2)), ReferenceUnit("relu", "ReLU", (1, 4, 2, 2))]
    assert propose(ref[:1], [UnitInfo("r", "Relu", (1, 4, 2, 2))], "NCHW").mapping == {}
    assert propose(ref, [UnitInfo("r", "Relu", (1, 4, 2, 2))], "NCHW").mapping == {}  # a Relu computes no conv
    two = [UnitInfo("c", "Conv2D", (1, 4, 2, 2)), UnitInfo("r", "Relu", (1, 4, 2, 2))]
    assert propose(ref, two, "NCHW").mapping == {"conv": "c", "relu": "r"}
    convs = [ReferenceUnit(f"conv{k}", "Conv2d", (1, 4, 2, 2)) for k in range(2)]
    p = propose(convs, [UnitInfo("c", "CONV_2D", (1, 2, 2, 4))], "NHWC")  # one unit never computes two convs
    assert p.mapping == {"conv0": "c"} and p.uncovered_reference == ["conv1"]


# -- candidates of tiny-resnet -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny(cache_dir: Path) -> tuple[TorchReference, np.ndarray, list[str]]:
    prepared = prepare(TINY, RunSettings(runtime="torch", threads=2, batch_size=4, cache_dir=cache_dir))
    ids, x = first_batch(
        prepared.pipeline, resolve_dataset("foolbox_imagenet"), 4, tuple(prepared.artifact.input_shape[1:])
    )
    return TorchReference.from_artifact(prepared.artifact), x, ids


@pytest.fixture(scope="module")
def port_files(tiny: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The Keras port (correct, and each bug) as .keras, .tflite and SavedModel files."""
    pytest.importorskip("tensorflow")
    import tensorflow as tf

    from repliscope.cli.common import quiet_keras

    quiet_keras()
    out = tmp_path_factory.mktemp("ports")
    files: dict[str, Path] = {}
    for bug in (None, *_ports.BUGS):
        model = _ports.keras_tiny_resnet(tiny[0].module, bug)
        tag = bug or "correct"
        files[f"{tag}.tflite"] = out / f"{tag}.tflite"
        files[f"{tag}.tflite"].write_bytes(tf.lite.TFLiteConverter.from_keras_model(model).convert())
        if bug in (None, "elu_after_add"):
            files[f"{tag}.keras"] = out / f"{tag}.keras"
            model.save(files[f"{tag}.keras"])
            files[f"{tag}.savedmodel"] = out / f"{tag}_savedmodel"
            model.export(str(files[f"{tag}.savedmodel"]), format="tf_saved_model", verbose=False)
    return files


def _diff(
    tiny: Any, fmt: str, path: Path | str, modes: tuple[str, ...] = ("golden", "carried"), mapping: Path | None = None
) -> LayerDiffResult:
    reference, x, ids = tiny
    built = build_candidate(fmt, str(path), reference, x, mapping_file=mapping)
    return diff_candidate(reference, built.candidate, x, modes, samples=ids, built=built)


def test_keras_port_matches_the_reference_before_any_export(tiny: Any) -> None:
    pytest.importorskip("tensorflow")
    reference, x, _ = tiny
    keras_out = np.asarray(_ports.keras_tiny_resnet(reference.module)(_ports.nhwc(x)))
    np.testing.assert_allclose(keras_out, reference.run(x), atol=2e-5)


def test_tf_keras_savedmodel_against_the_torch_reference(tiny: Any, tmp_path: Path) -> None:
    """The same port built in tf_keras (Keras 2) and saved as a SavedModel folder: detected as tf_keras, paired by a
    proposal, every compared unit within tolerance; the unit after an explicit ZeroPadding2D cannot be fed in
    golden mode (another shape) and passes carried."""
    tf_keras = pytest.importorskip("tf_keras")
    reference, x, _ = tiny
    folder = tmp_path / "tiny_tf_keras"
    _ports.keras_tiny_resnet(reference.module, keras=tf_keras).save(str(folder))
    assert detect_format(str(folder)) == "tf_keras"
    r = _diff(tiny, "tf_keras", folder)
    assert r.candidate["candidate"] == "tf_keras" and r.candidate["mapping_origin"] == "proposed"
    assert r.passed and r.summary["carried"].compared == REFERENCE_UNITS and r.summary["golden"].failed == 0
    assert r.summary["golden"].compared == REFERENCE_UNITS - 1
    assert any("'layer2.0.conv1': golden mode cannot compare it" in n for n in r.notes)
    with pytest.raises(
        RepliscopeError, match="a callable candidate is compared with a darknet reference, not the torch one"
    ):
        build_candidate("callable", f"{PORTS}:same", reference, x)


def test_torch_port_by_name_golden_and_carried_pass(tiny: Any) -> None:
    r = _diff(tiny, "torch", f"{PORTS}:same")
    assert r.candidate["mapping"] == f"{REFERENCE_UNITS} layers mapped (by name)"
    for mode in ("golden", "carried"):
        assert r.summary[mode].compared == REFERENCE_UNITS and r.summary[mode].failed == 0
        assert r.summary[mode].max_ratio == 0.0  # the same code on the same inputs
    assert r.passed and r.output is not None and r.output.max_abs == 0.0


def test_torch_port_functional_bug_is_localized_in_both_modes(tiny: Any) -> None:
    r = _diff(tiny, "torch", f"{PORTS}:elu")
    assert r.candidate["mapping"] == f"{REFERENCE_UNITS} layers mapped (proposed)"  # layer1.0/elu is no namesake
    for mode in ("golden", "carried"):
        first = r.first_divergent[mode]
        assert first is not None and first.path == "layer1.0/relu#2" and first.source.endswith("tiny_resnet.py:31")
    assert r.summary["golden"].failed == 1 and not r.passed


def test_tflite_carried_only_all_units_pass(tiny: Any, port_files: dict[str, Path]) -> None:
    r = _diff(tiny, "tflite", port_files["correct.tflite"])
    assert r.modes == ["carried"] and r.summary["carried"].failed == 0
    assert r.summary["carried"].compared >= 10 and r.passed
    assert r.output is not None and r.output.passed


@pytest.mark.parametrize("bug", _ports.BUGS)
def test_tflite_bug_first_divergent_carried_unit(tiny: Any, port_files: dict[str, Path], bug: str) -> None:
    r = _diff(tiny, "tflite", port_files[f"{bug}.tflite"])
    first = r.first_divergent["carried"]
    assert first is not None and _ports.BUG_UNITS[bug] in first.covers, (bug, first)
    assert not r.passed


def test_savedmodel_golden_and_carried_pass_and_localize_a_bug(tiny: Any, port_files: dict[str, Path]) -> None:
    r = _diff(tiny, "savedmodel", port_files["correct.savedmodel"])
    assert r.modes == ["golden", "carried"] and r.passed
    assert r.summary["golden"].compared == r.summary["carried"].compared >= 15
    bad = _diff(tiny, "savedmodel", port_files["elu_after_add.savedmodel"])
    first = bad.first_divergent["golden"]
    assert first is not None and first.path == "layer1.0/relu#2"
    assert bad.summary["golden"].failed == 1  # golden: only the unit with the bug


def test_savedmodel_unit_that_fails_on_the_reference_input_names_the_mapping(
    tiny: Any, port_files: dict[str, Path]
) -> None:
    """A unit fed a tensor of another shape (a wrong pairing) used to escape as a TensorFlow ValueError
    (an internal error); it is a clear error pointing at the mapping."""
    from repliscope.backends.tensorflow.candidate import TensorflowCandidate

    x = tiny[1]
    cand = TensorflowCandidate(port_files["correct.savedmodel"])
    units = cand.units(x)
    name = next(u.name for u in units if u.op == "Relu")
    cand.set_mapped([units[0].name])
    with pytest.raises(RepliscopeError, match=r"fails on the reference input.*wrong reference layer.*--mapping"):
        cand.run_layer(name, [np.zeros((4, 3, 7, 5), np.float32)])


def test_keras_file_without_port_mapping_uses_layer_names(tiny: Any, port_files: dict[str, Path]) -> None:
    r = _diff(tiny, "keras", port_files["correct.keras"])
    assert r.passed and r.summary["golden"].failed == 0 and r.summary["golden"].compared >= 15
    bad = _diff(tiny, "keras", port_files["elu_after_add.keras"])
    assert bad.first_divergent["golden"] is not None and bad.first_divergent["golden"].path == "layer1.0/relu#2"


def test_saved_mapping_round_trips(tiny: Any, port_files: dict[str, Path], tmp_path: Path) -> None:
    from repliscope.diff.layers.mapping import load_mapping, save_mapping

    reference, x, _ = tiny
    built = build_candidate("tflite", str(port_files["correct.tflite"]), reference, x)
    assert built.mapping_origin == "proposed"
    file = tmp_path / "mapping.yaml"
    save_mapping(built.mapping, file, header="proposed")
    assert load_mapping(file) == built.mapping
    again = build_candidate("tflite", str(port_files["correct.tflite"]), reference, x, mapping_file=file)
    assert again.mapping_origin == "by file" and again.mapping == built.mapping


def test_forced_format_for_an_unusual_suffix(tiny: Any, port_files: dict[str, Path], tmp_path: Path) -> None:
    odd = tmp_path / "model.bin"
    shutil.copy(port_files["correct.tflite"], odd)
    with pytest.raises(RepliscopeError, match="--candidate-format"):
        detect_format(str(odd))
    assert _diff(tiny, "tflite", odd).passed


def test_cli_tflite_says_golden_was_not_run_and_why(port_files: dict[str, Path]) -> None:
    from typer.testing import CliRunner

    from repliscope.cli.main import app

    base = ["diff", str(TINY), "--candidate", str(port_files["correct.tflite"]), "--batch", "2"]
    res = CliRunner().invoke(app, [*base, "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["modes"] == ["carried"] and data["candidate"]["format"] == "tflite"
    assert data["notes"][0] == "golden mode not run: " + GOLDEN_LIMIT
    human = " ".join(CliRunner().invoke(app, base).stdout.split())
    assert f"golden golden mode not run: {GOLDEN_LIMIT}" in human and "proposed layer mapping (tflite)" in human
    only_golden = CliRunner().invoke(app, [*base, "--mode", "golden"])
    assert only_golden.exit_code == 2
    assert only_golden.stderr == f"error: golden mode is not possible for this candidate: {GOLDEN_LIMIT}\n"
    bug = CliRunner().invoke(
        app, ["diff", str(TINY), "--candidate", str(port_files["dropped_residual.tflite"]), "--batch", "2", "--json"]
    )
    assert bug.exit_code == 1 and json.loads(bug.stdout)["first_divergent"]["carried"] is not None


def test_a_keras_file_under_a_sparse_user_mapping(tiny: Any, port_files: dict[str, Path], tmp_path: Path) -> None:
    """Under --mapping, a mapped Keras layer's golden unit spans the unmapped layers since the previous mapped
    one (here a whole residual block up to its add)."""
    mapping = tmp_path / "m.yaml"
    mapping.write_text("conv1: conv1\nbn1: bn1\nlayer1.0/add: layer1_0_add\nfc: fc\n")
    keras_file = port_files["correct.keras"]
    r = _diff(tiny, "keras", keras_file, mapping=mapping)
    assert [row.path for row in r.layers] == ["conv1", "bn1", "layer1.0/add", "fc"] and r.passed
    assert r.layers[2].covers[0] == "/relu" and r.summary["golden"].failed == 0
    assert r.candidate["mapping"] == f"4 layers mapped (from {mapping})"
