"""MLModelScope label files: CarML's ``synset1000.txt``, ``synset-21k.txt``, ``synset1.txt``, ``synset1001.txt``
and ``synset1008.txt`` shipped byte for byte (their MD5 is the manifests' ``features_checksum``), an unknown one
refused with what to provide, and ``--labels FILE`` (the user's copy, used only when its MD5 is the manifest's)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from repliscope.cli.main import app
from repliscope.datasets.label_sets import label_set, label_set_bytes
from repliscope.importers.base import ConfigImportError
from repliscope.importers.batch import import_one
from repliscope.importers.mlmodelscope import MLModelScopeImporter
from repliscope.importers.mlmodelscope_rules import KNOWN_LABEL_FILES, LABEL_FILE_NOTES

CORPUS = Path(__file__).parents[1] / "fixtures" / "mlmodelscope-corpus"
INCEPTION_5H = CORPUS / "rai-project-tensorflow" / "Inception_5h.yml"  # synset1008.txt
VGG16_SOS = CORPUS / "rai-project-caffe" / "VGG16_SOS.yml"  # salient_object_subitizing.txt: unknown


@pytest.mark.parametrize(
    ("source", "md5", "count", "first", "last"),
    [
        ("builtin:imagenet-1k-tf", "7315c2c8bffdb680cf8c5d2a7c45c363", 1000, "kit fox, Vulpes macrotis", "dumbbell"),
        ("builtin:imagenet-21k-mxnet", "851bbe06499cf53fa6f8fb72ad61e906", 21841, "Yorkshire terrier", None),
        ("builtin:imagenet-1001-slim", "6c05083991207dea5c37f2d271014fad", 1001, "unknown unknown", "toilet tissue"),
        ("builtin:imagenet-1001-tf", "1aac07127a5d6b9b634d7e43626eef05", 1001, "unknown unknown", "dumbbell"),
        ("builtin:imagenet-1008-tf", "2bb228d6cf55ae4e6409f55fc81fcfe7", 1008, "unknown unknown", "unknown unknown"),
    ],
)
def test_shipped_imagenet_orders_are_carmls_files(
    source: str, md5: str, count: int, first: str, last: str | None
) -> None:
    assert hashlib.md5(label_set_bytes(source)).hexdigest() == md5
    assert KNOWN_LABEL_FILES[md5] == (source, count)
    names = label_set(source)
    assert len(names) == count and names[0] == first
    if last is not None:
        assert names[-1].split(",")[0] == last


def test_unknown_first_sets_are_the_public_lists_with_their_padding() -> None:
    """synset1.txt = 'unknown unknown' + synset.txt (= builtin:imagenet-1k's wnid order); synset1001.txt =
    'unknown unknown' + synset1000.txt; synset1008.txt = synset1001.txt + 7 'unknown unknown' lines."""
    from repliscope.datasets.classes import imagenet_classes

    unknown = b"unknown unknown" + bytes([10])
    tf = label_set_bytes("builtin:imagenet-1k-tf")
    assert label_set_bytes("builtin:imagenet-1001-tf") == unknown + tf
    assert label_set_bytes("builtin:imagenet-1008-tf") == unknown + tf + unknown * 7
    slim = label_set_bytes("builtin:imagenet-1001-slim")
    assert slim.startswith(unknown)
    wnids = [ln.split(" ", 1)[0] for ln in slim.decode().splitlines()[1:]]
    assert wnids == [wnid for wnid, _ in imagenet_classes()]  # tench first, toilet tissue last
    assert set(LABEL_FILE_NOTES) == {
        "6c05083991207dea5c37f2d271014fad",
        "1aac07127a5d6b9b634d7e43626eef05",
        "2bb228d6cf55ae4e6409f55fc81fcfe7",
    }


def test_tf_inception_order_is_a_permutation_of_imagenet_1k() -> None:
    from repliscope.datasets.classes import imagenet_classes

    wnids = [ln.split(" ", 1)[0] for ln in label_set_bytes("builtin:imagenet-1k-tf").decode().splitlines()]
    assert sorted(wnids) == sorted(wnid for wnid, _ in imagenet_classes()) and len(set(wnids)) == 1000
    assert label_set("builtin:imagenet-1k-tf")[:3] == ("kit fox, Vulpes macrotis", "English setter", "Siberian husky")


@pytest.mark.parametrize(
    ("file", "labels"),
    [
        ("rai-project-caffe/Inception_v3.yml", {"source": "builtin:imagenet-1k-tf", "num_classes": 1000}),
        ("rai-project-cntk/Inception-v3.yml", {"source": "builtin:imagenet-1k-tf", "num_classes": 1000}),
        ("rai-project-caffe/InceptionBN_21K.yml", {"source": "builtin:imagenet-21k-mxnet", "num_classes": 21841}),
        ("rai-project-tensorrt/InceptionBN-21K.yml", {"source": "builtin:imagenet-21k-mxnet", "num_classes": 21841}),
        (
            "rai-project-tensorflow/MobileNet_v1_1.0_224.yml",
            {"source": "builtin:imagenet-1001-slim", "num_classes": 1001},
        ),
        ("c3sr-tensorflow/MLPerf_ResNet50_v1.5.yml", {"source": "builtin:imagenet-1001-tf", "num_classes": 1001}),
        ("rai-project-tensorflow/Inception_5h.yml", {"source": "builtin:imagenet-1008-tf", "num_classes": 1008}),
    ],
)
def test_manifests_with_those_files_translate(file: str, labels: dict[str, object]) -> None:
    m = import_one("mlmodelscope", CORPUS / file).manifest
    assert m["labels"] == labels
    assert m["outputs"][0]["shape"] == [-1, labels["num_classes"]]


@pytest.mark.parametrize(
    ("file", "source", "class_1", "warned"),
    [
        ("rai-project-tensorflow/MobileNet_v1_1.0_224.yml", "builtin:imagenet-1001-slim", "tench", "tench first"),
        ("rai-project-tensorflow/Inception_5h.yml", "builtin:imagenet-1008-tf", "kit fox", "7 'unknown unknown'"),
        ("rai-project-tensorflow/MLPerf_ResNet50_v1.5.yml", "builtin:imagenet-1001-tf", "kit fox", "wrong synset"),
    ],
)
def test_translated_manifest_names_class_1_as_mlmodelscope_did(
    tmp_path: Path, file: str, source: str, class_1: str, warned: str
) -> None:
    """The translation reads as MLModelScope's GetLabels read the file: index 0 'unknown unknown', index 1 the first
    ImageNet class of the file's order; the warning says what the offset (and, for MLPerf, the order) means."""
    from repliscope.manifest.labels import read_class_names
    from repliscope.manifest.loader import load_manifest

    result = import_one("mlmodelscope", CORPUS / file)
    assert result.manifest["labels"]["source"] == source
    assert "sha256" not in result.manifest["labels"]  # builtin: no placeholder
    out = tmp_path / "m.yaml"
    out.write_text(yaml.safe_dump(result.manifest), encoding="utf-8")
    names = read_class_names(load_manifest(out), tmp_path)
    assert names[0] == "unknown unknown" and names[1].split(",")[0] == class_1
    assert len(names) == result.manifest["outputs"][0]["shape"][1]
    offset = [w.message for w in result.warnings if w.code == "mlmodelscope.label_offset"]
    assert len(offset) == 1 and warned in offset[0]


def test_a_file_still_unknown_says_what_to_provide() -> None:
    with pytest.raises(ConfigImportError) as err:
        MLModelScopeImporter().translate(VGG16_SOS)
    msg = str(err.value)
    assert err.value.reason == "unknown_label_file"
    assert "salient_object_subitizing.txt" in msg and "--labels FILE" in msg
    assert "da8e6ab825a44a900f1654f09f51d71f" in msg and "not a label file the importer knows" in msg


def _inception_5h_for(tmp_path: Path, text: str) -> tuple[Path, Path]:
    """A copy of Inception_5h.yml whose features_checksum is the MD5 of ``text``, and ``text`` as a file."""
    labels = tmp_path / "synset1008.txt"
    labels.write_text(text, encoding="utf-8")
    data = yaml.safe_load(INCEPTION_5H.read_text(encoding="utf-8"))
    data["output"]["parameters"]["features_checksum"] = hashlib.md5(text.encode()).hexdigest()
    manifest = tmp_path / "Inception_5h.yml"
    manifest.write_text(yaml.safe_dump(data), encoding="utf-8")
    return manifest, labels


def test_labels_file_with_the_manifests_md5_is_used(tmp_path: Path) -> None:
    text = "dummy\n" + "".join(f"class {i}\n" for i in range(1007))
    manifest, labels = _inception_5h_for(tmp_path, text)
    result = MLModelScopeImporter(labels=labels).translate(manifest)
    assert result.manifest["labels"] == {
        "source": labels.as_posix(),
        "sha256": hashlib.sha256(text.encode()).hexdigest(),
        "num_classes": 1008,
    }
    assert result.manifest["outputs"][0]["shape"] == [-1, 1008]
    assert "mlmodelscope.labels_file" in {w.code for w in result.warnings}


def test_labels_file_of_another_md5_is_not_used(tmp_path: Path) -> None:
    other = tmp_path / "other.txt"
    other.write_text("a\nb\n", encoding="utf-8")
    with pytest.raises(ConfigImportError) as err:
        MLModelScopeImporter(labels=other).translate(VGG16_SOS)
    assert err.value.reason == "unknown_label_file"
    assert f"--labels {other} has MD5 {hashlib.md5(b'a' + bytes([10]) + b'b' + bytes([10])).hexdigest()}" in str(
        err.value
    )


def test_labels_file_with_a_blank_line_inside_is_refused(tmp_path: Path) -> None:
    manifest, labels = _inception_5h_for(tmp_path, "a\n\nb\n")
    with pytest.raises(ConfigImportError) as err:
        MLModelScopeImporter(labels=labels).translate(manifest)
    assert "blank line 2 inside the list" in str(err.value)


def test_cli_labels_option(tmp_path: Path) -> None:
    manifest, labels = _inception_5h_for(tmp_path, "".join(f"c{i}\n" for i in range(1008)))
    out = tmp_path / "out.yaml"
    res = CliRunner().invoke(
        app, ["manifest", "import", "mlmodelscope", str(manifest), "--labels", str(labels), "--out", str(out)]
    )
    assert res.exit_code == 0, res.output
    assert yaml.safe_load(out.read_text(encoding="utf-8"))["labels"]["num_classes"] == 1008
    res = CliRunner().invoke(app, ["manifest", "import", "mlmodelscope", str(manifest), "--labels", "nope.txt"])
    assert res.exit_code == 2 and "--labels nope.txt: no such file" in res.output
    res = CliRunner().invoke(app, ["manifest", "import", "timm", str(manifest), "--labels", str(labels)])
    assert res.exit_code == 2 and "the timm importer takes no --labels" in res.output


def test_labels_file_for_a_manifest_without_checksum_is_used_unchecked(tmp_path: Path) -> None:
    """TensorRT's voc-fcn16s.yml names a gist with no features_checksum: MLModelScope downloaded it unchecked, so
    the given file is taken as it is, and the warning says it was not checked."""
    labels = tmp_path / "voc.txt"
    labels.write_text("".join(f"c{i}\n" for i in range(21)), encoding="utf-8")
    with pytest.raises(ConfigImportError) as err:
        MLModelScopeImporter().translate(CORPUS / "rai-project-tensorrt" / "voc-fcn16s.yml")
    assert "(none given: check the file by other means)" in str(err.value)
    result = MLModelScopeImporter(labels=labels).translate(CORPUS / "rai-project-tensorrt" / "voc-fcn16s.yml")
    assert result.manifest["labels"]["num_classes"] == 21
    warned = {w.code: w.message for w in result.warnings}
    assert "NOT checked: the manifest has no features_checksum" in warned["mlmodelscope.labels_file"]
