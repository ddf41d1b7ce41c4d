"""Issue 20 item 2: ONNX external data stays inside the model's folder, and source.sha256 covers it.

The hostile model: an ``Add`` of the input and an initializer whose external ``location`` is
``../../../../../../../../etc/passwd``. On the old code OpenCV 5.0 read /etc/passwd into the weights and the
outputs' bytes began with ``root:x:0:0:``."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import pytest

from repliscope.errors import ChecksumError, SourceError
from repliscope.manifest.sources import resolve_source
from repliscope.runtimes import ModelArtifact, create_runner
from repliscope.runtimes.onnx_external import check_external_data, source_sha256
from tests.runtimes.onnx_hostile import classifier_with_external_weights, with_external_entries

PASSWD = "../../../../../../../../etc/passwd"


def _folder(tmp_path: Path) -> Path:
    folder = tmp_path / "models" / "m"
    folder.mkdir(parents=True)
    return folder


def _artifact(path: Path) -> ModelArtifact:
    return ModelArtifact(
        path=path,
        sha256="0" * 64,
        format="onnx",
        input_name="input",
        input_shape=(-1, 64),
        input_dtype="float32",
        output_names=("logits",),
    )


@pytest.mark.parametrize(
    ("location", "why"),
    [
        (PASSWD, "a path leaving the model's folder ('..')"),
        ("/etc/passwd", "an absolute path"),
        ("sub/../../weights.bin", "a path leaving the model's folder ('..')"),
        ("..\\..\\etc\\passwd", "a path leaving the model's folder ('..')"),
        ("C:\\Windows\\win.ini", "an absolute path"),
        ("missing.bin", "a file that cannot be read (No such file or directory)"),
    ],
)
def test_hostile_locations_are_refused_naming_tensor_and_path(tmp_path: Path, location: str, why: str) -> None:
    model = classifier_with_external_weights(_folder(tmp_path), location=location)
    with pytest.raises(SourceError) as ei:
        check_external_data(model)
    assert str(ei.value) == (
        f"ONNX model {model}: tensor 'W' keeps its data in '{location}', {why}; refused "
        "(external data must be a file inside the model's folder)"
    )


def test_symlink_out_of_the_folder_is_refused(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    model = classifier_with_external_weights(folder, location="linked.bin")
    (folder / "linked.bin").symlink_to("/etc/passwd")
    with pytest.raises(
        SourceError,
        match=r"tensor 'W' keeps its data in 'linked.bin', a symlink leading out of "
        r"the model's folder \(to /etc/passwd\)",
    ):
        check_external_data(model)
    (folder / "linked.bin").unlink()
    (folder / "sub").symlink_to(tmp_path)  # a symlinked folder component
    (tmp_path / "x.bin").write_bytes(b"\0" * 256)
    model = classifier_with_external_weights(folder, location="sub/x.bin")
    with pytest.raises(SourceError, match="a symlink leading out of the model's folder"):
        check_external_data(model)


def test_a_good_model_with_external_data_runs(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    model = classifier_with_external_weights(folder)
    (found,) = check_external_data(model)
    assert (found.tensor, found.location, found.path) == ("W", "weights.bin", (folder / "weights.bin").resolve())
    runner = create_runner("onnxruntime", _artifact(model), threads=1, cache_dir=tmp_path / "cache")
    out = runner.infer_outputs(np.ones((2, 64), np.float32))["logits"]
    np.testing.assert_array_equal(out, np.arange(64, dtype=np.float32)[None] + 1 + np.zeros((2, 1), np.float32))


@pytest.mark.parametrize("runtime", ["onnxruntime", "opencv_dnn"])
def test_runtimes_refuse_passwd_external_data(tmp_path: Path, runtime: str) -> None:
    model = classifier_with_external_weights(_folder(tmp_path), location=PASSWD, classes=64)
    runner = create_runner(runtime, _artifact(model), threads=1, cache_dir=tmp_path / "cache")
    with pytest.raises(SourceError, match=r"tensor 'W' keeps its data in '\.\./\.\./.*etc/passwd', a path leaving"):
        runner.infer_outputs(np.zeros((1, 64), np.float32))


def test_diff_candidates_refuse_passwd_external_data(tmp_path: Path) -> None:
    from repliscope.backends.onnxruntime.candidate import OnnxCandidate
    from repliscope.diff.layers.onnx_graph_candidate import OnnxGraphCandidate

    model = classifier_with_external_weights(_folder(tmp_path), location=PASSWD)
    for make in (OnnxGraphCandidate, OnnxCandidate):
        with pytest.raises(SourceError, match="tensor 'W' keeps its data in"):
            make(model)


def test_sha256_covers_the_external_data(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    model = classifier_with_external_weights(folder)
    plain = hashlib.sha256(model.read_bytes()).hexdigest()
    weights = hashlib.sha256((folder / "weights.bin").read_bytes()).hexdigest()
    expected = hashlib.sha256(f"{plain}  model.onnx\n{weights}  weights.bin\n".encode()).hexdigest()
    assert source_sha256(model) == (expected, [("weights.bin", weights)])
    got = resolve_source("models/m/model.onnx", base_dir=tmp_path, sha256=expected, cache_dir=tmp_path, format="onnx")
    assert got == model.resolve()
    # the file's own sha256 no longer verifies a model with external data; a changed weights file is refused
    with pytest.raises(ChecksumError, match=r"and its external data \(weights.bin\) is "):
        resolve_source("models/m/model.onnx", base_dir=tmp_path, sha256=plain, cache_dir=tmp_path, format="onnx")
    data = bytearray((folder / "weights.bin").read_bytes())
    data[0] ^= 1
    (folder / "weights.bin").write_bytes(bytes(data))
    with pytest.raises(ChecksumError):
        resolve_source("models/m/model.onnx", base_dir=tmp_path, sha256=expected, cache_dir=tmp_path, format="onnx")


def test_self_contained_model_hash_is_the_file_hash(tmp_path: Path) -> None:
    import onnx

    folder = _folder(tmp_path)
    model = classifier_with_external_weights(folder)
    inline = folder / "inline.onnx"
    onnx.save_model(onnx.load(str(model)), str(inline))
    assert not os.path.exists(folder / "inline.onnx.data")
    assert source_sha256(inline) == (hashlib.sha256(inline.read_bytes()).hexdigest(), [])


def test_manifest_hash_prints_the_set_hash(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from repliscope.cli.main import app

    folder = _folder(tmp_path)
    model = classifier_with_external_weights(folder)
    result = CliRunner().invoke(app, ["manifest", "hash", str(model)])
    assert result.exit_code == 0, result.output
    assert result.output == f"{source_sha256(model)[0]}  {model}\n"
    hostile = classifier_with_external_weights(folder, name="bad.onnx", location=PASSWD)
    result = CliRunner().invoke(app, ["manifest", "hash", str(hostile)])
    assert result.exit_code == 2 and "tensor 'W' keeps its data in" in result.output


def test_manifest_new_writes_the_set_hash(tmp_path: Path) -> None:
    from repliscope.manifest.scaffold import scaffold

    folder = _folder(tmp_path)
    model = classifier_with_external_weights(folder)
    text = scaffold("model.onnx", folder, tmp_path / "cache")
    assert f"  sha256: {source_sha256(model)[0]}   # computed from the file" in text


def test_a_file_that_is_not_onnx_keeps_the_runtime_error_and_the_plain_hash(tmp_path: Path) -> None:
    from repliscope.manifest.checksums import source_file_sha256
    from repliscope.runtimes.errors import ModelLoadError

    junk = _folder(tmp_path) / "junk.onnx"
    junk.write_bytes(b"\xff\xfe not a protobuf")
    assert check_external_data(junk) == []
    assert source_file_sha256(junk) == hashlib.sha256(junk.read_bytes()).hexdigest()
    runner = create_runner("onnxruntime", _artifact(junk), threads=1, cache_dir=tmp_path / "cache")
    with pytest.raises(ModelLoadError, match="onnxruntime cannot load"):
        runner.infer_outputs(np.zeros((1, 64), np.float32))


# Issue 32 item 3 / issue 38 item 1: two ``location`` entries, the first /etc/passwd (OpenCV read it), the last the
# model itself (the guard checked it). Every entry is checked as the runtimes read it.
DUPLICATE = [("location", PASSWD), ("location", "model.onnx"), ("offset", "0"), ("length", "256")]


@pytest.mark.parametrize("runtime", ["onnxruntime", "opencv_dnn"])
def test_runtimes_refuse_a_duplicate_location(tmp_path: Path, runtime: str) -> None:
    model = with_external_entries(classifier_with_external_weights(_folder(tmp_path)), DUPLICATE)
    runner = create_runner(runtime, _artifact(model), threads=1, cache_dir=tmp_path / "cache")
    with pytest.raises(SourceError) as ei:
        runner.infer_outputs(np.zeros((1, 64), np.float32))
    assert (
        f"ONNX model {model}: tensor 'W' external_data has the key 'location' twice ('{PASSWD}' and 'model.onnx')"
        in (str(ei.value))
    )


def test_the_set_hash_refuses_a_duplicate_location(tmp_path: Path) -> None:
    model = with_external_entries(classifier_with_external_weights(_folder(tmp_path)), DUPLICATE)
    with pytest.raises(SourceError, match="has the key 'location' twice"):
        source_sha256(model)
    with pytest.raises(SourceError, match="has the key 'location' twice"):
        resolve_source(str(model), base_dir=tmp_path, sha256="0" * 64, cache_dir=tmp_path, format="onnx")


@pytest.mark.parametrize(
    ("entries", "data_location", "why"),
    [
        ([("location", "weights.bin"), ("offset", "0"), ("offset", "4")], None, "has the key 'offset' twice"),
        ([("location", "weights.bin"), ("basepath", "/etc")], None, "has the key 'basepath', not one of location"),
        ([("location", "weights.bin"), ("offset", "-8")], None, "has offset '-8', not a non-negative integer"),
        ([("location", "weights.bin"), ("length", "0x10")], None, "has length '0x10', not a non-negative integer"),
        ([("location", PASSWD)], 0, "entries on a tensor whose data_location is not EXTERNAL"),
    ],
)
def test_entries_the_guard_does_not_check_are_refused(
    tmp_path: Path, entries: list[tuple[str, str]], data_location: int | None, why: str
) -> None:
    model = with_external_entries(classifier_with_external_weights(_folder(tmp_path)), entries, data_location)
    with pytest.raises(SourceError) as ei:
        check_external_data(model)
    assert f"tensor 'W' external_data {why}" in str(ei.value)
