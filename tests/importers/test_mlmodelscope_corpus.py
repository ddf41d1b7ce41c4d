"""The MLModelScope importer over every real manifest of the agent repositories (tests/fixtures/mlmodelscope-corpus,
591 files of 11 repositories; origins and licences in each folder's ORIGIN.md): coverage by outcome and refusal
reason, pinned exactly, and the label files the importer names by MD5, checked by content."""

from __future__ import annotations

import collections
import hashlib
import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from repliscope.cli.main import app
from repliscope.datasets.label_sets import LABEL_SETS, label_set, label_set_bytes
from repliscope.importers.base import IMPORTERS
from repliscope.importers.batch import FolderRow, coverage, import_folder, import_one
from repliscope.importers.mlmodelscope_rules import (
    DETECTION_LABEL_FILES,
    KNOWN_LABEL_FILES,
    REFUSAL_REASONS,
)
from repliscope.manifest.labels import BUILTIN_LABELS
from repliscope.tasks.coco_names import COCO_80, COCO_CATEGORIES

CORPUS = Path(__file__).parents[1] / "fixtures" / "mlmodelscope-corpus"

EXPECTED_COVERAGE = [
    ("with warnings", 549),
    ("refused: unknown_label_file", 13),
    ("refused: instance_segmentation", 8),
    ("refused: invalid", 5),
    ("refused: detection_argmax", 4),
    ("refused: image_output", 4),
    ("refused: non_image_input", 4),
    ("refused: merged_outputs", 2),
    ("refused: segmentation_no_output", 2),
]
"""Before this corpus (importer of 2026-11-23): 419 translated, 172 refused (120 'unsupported task', 42 label files,
4 non-image inputs, 4 PyTorch detection, 2 merged outputs). Before semanticsegment was translated (2026-11-27
morning): 519 translated, 18 refused as semantic_segmentation, 27 unknown_label_file (synset1000.txt and
synset-21k.txt now ship as builtin:imagenet-1k-tf and builtin:imagenet-21k-mxnet). Before synset1001.txt and
synset1008.txt were rebuilt (2026-11-27): 545 translated, 17 unknown_label_file (the 13 left are no classifiers'
class lists: salient-object center100.txt and subitizing, SphereFace pairs.txt, TensorRT's FCN gist)."""

EXPECTED_PER_REPO = {
    "c3sr-caffe": {"translated": 31, "segmentation_no_output": 1, "unknown_label_file": 3},
    "c3sr-mxnet": {"translated": 78},
    "c3sr-pytorch": {
        "translated": 44,
        "non_image_input": 2,
        "detection_argmax": 2,
        "image_output": 1,
    },
    "c3sr-tensorflow": {
        "translated": 81,
        "non_image_input": 1,
        "instance_segmentation": 4,
        "image_output": 1,
        "merged_outputs": 1,
    },
    "rai-project-caffe": {"translated": 31, "segmentation_no_output": 1, "unknown_label_file": 3},
    "rai-project-caffe2": {"translated": 35, "unknown_label_file": 1, "invalid": 4},
    "rai-project-cntk": {"translated": 19, "invalid": 1, "unknown_label_file": 2},
    "rai-project-mxnet": {"translated": 78},
    "rai-project-pytorch": {"translated": 44, "detection_argmax": 2, "image_output": 1},
    "rai-project-tensorflow": {
        "translated": 81,
        "non_image_input": 1,
        "instance_segmentation": 4,
        "image_output": 1,
        "merged_outputs": 1,
    },
    "rai-project-tensorrt": {"translated": 27, "unknown_label_file": 4},
}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[FolderRow], Path]:
    out = tmp_path_factory.mktemp("corpus") / "out"
    return import_folder("mlmodelscope", CORPUS, out), out


@pytest.mark.slow
def test_coverage_by_reason_is_pinned(corpus: tuple[list[FolderRow], Path]) -> None:
    rows, out = corpus
    assert len(rows) == 591
    assert coverage(rows) == EXPECTED_COVERAGE
    per: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for r in rows:
        per[r.file.split("/")[0]][r.reason or "translated"] += 1
    assert {k: dict(v) for k, v in per.items()} == EXPECTED_PER_REPO
    # every refusal has a documented reason and a message naming its file; none is an untranslatable translation
    assert {r.reason for r in rows if r.outcome == "refused"} <= set(REFUSAL_REASONS)
    assert all(r.detail.startswith(str(CORPUS)) for r in rows if r.outcome == "refused")
    assert not [r.file for r in rows if "does not validate" in r.detail]
    # each translation was validated offline by import_folder and written
    written = sorted(str(p.relative_to(out)) for p in out.rglob("*.yaml"))
    assert written == sorted(str(Path(r.file).with_suffix(".yaml")) for r in rows if r.outcome != "refused")


@pytest.mark.slow
def test_every_classification_detection_and_segmentation_refusal_is_explained(
    corpus: tuple[list[FolderRow], Path],
) -> None:
    rows, _ = corpus
    kinds = {}
    for r in rows:
        data = yaml.safe_load((CORPUS / r.file).read_text(encoding="utf-8"))
        kinds[r.file] = str((data.get("output") or {}).get("type", "")).lower()
    refused = collections.Counter(
        (kinds[r.file], r.reason)
        for r in rows
        if r.outcome == "refused" and kinds[r.file] in ("classification", "feature", "boundingbox", "semanticsegment")
    )
    assert refused == {
        ("feature", "unknown_label_file"): 7,
        ("classification", "unknown_label_file"): 6,
        ("feature", "invalid"): 5,
        ("boundingbox", "detection_argmax"): 4,
        ("boundingbox", "merged_outputs"): 2,
        ("semanticsegment", "segmentation_no_output"): 2,  # Caffe FCN-8s: the agent returned no mask
    }
    # every 'feature' manifest of Caffe2, CNTK and TensorRT with a known label file is translated
    translated = collections.Counter(kinds[r.file] for r in rows if r.outcome != "refused")
    assert translated == {"classification": 387, "feature": 78, "boundingbox": 68, "semanticsegment": 16}


def test_caffe2_feature_manifest_is_a_classifier_with_the_agents_bgr_chw() -> None:
    result = import_one("mlmodelscope", CORPUS / "rai-project-caffe2" / "BVLC_AlexNet_Caffe.yml")
    m = result.manifest
    assert m["task"] == "image_classification"
    assert m["labels"] == {"source": "builtin:imagenet-1k", "num_classes": 1000}
    assert m["preprocess"][0]["channels"] == "BGR" and m["inputs"][0]["layout"] == "NCHW"
    assert m["inputs"][0]["shape"] == [-1, 3, 227, 227]
    # MLModelScope's mean is indexed R, G, B in both modes: BGR tensor -> [mean[2], mean[1], mean[0]]
    assert {"op": "subtract_mean", "value": [104.0, 117.0, 123.0]} in m["preprocess"]
    codes = [w.code for w in result.warnings]
    assert {
        "mlmodelscope.feature_output",
        "mlmodelscope.agent_overrides",
        "mlmodelscope.agent_steps_unverified",
    } <= set(codes)


def test_tensorrt_feature_manifest_keeps_dlframeworks_defaults_and_the_agents_output_name() -> None:
    m = import_one("mlmodelscope", CORPUS / "rai-project-tensorrt" / "BVLC-AlexNet.yml").manifest
    assert m["task"] == "image_classification" and m["labels"]["source"] == "builtin:imagenet-1k"
    assert m["outputs"][0]["name"] == "prob"


def test_ilsvrc_detection_synsets_label_a_classifier() -> None:
    m = import_one("mlmodelscope", CORPUS / "rai-project-cntk" / "BVLC-Reference-RCNN-ILSVRC13.yml").manifest
    assert m["labels"] == {"source": "builtin:ilsvrc-det-200", "num_classes": 200}
    assert m["outputs"][0] == {
        "name": "z",
        "shape": [-1, 200],
        "dtype": "float32",
        "layout": "NC",
        "kind": "probabilities",
    }


@pytest.mark.parametrize(
    ("file", "labels"),
    [
        ("rai-project-mxnet/SSD_512_MobileNet_1.0_VOC.yml", {"source": "builtin:voc-20", "num_classes": 20}),
        ("rai-project-mxnet/SSD_512_MobileNet_1.0_COCO.yml", {"source": "builtin:coco-80", "num_classes": 80}),
        ("c3sr-caffe/AI_Matrix_SSD_VGG16.yml", {"source": "builtin:voc-21", "num_classes": 21}),
    ],
)
def test_detection_label_files_named_offline(file: str, labels: dict[str, object]) -> None:
    path = CORPUS / file
    if not path.is_file():
        pytest.fail(f"{file} is not in the corpus")
    assert import_one("mlmodelscope", path).manifest["labels"] == labels


VOC = [
    "aeroplane",
    "bicycle",
    "bird",
    "boat",
    "bottle",
    "bus",
    "car",
    "cat",
    "chair",
    "cow",
    "diningtable",
    "dog",
    "horse",
    "motorbike",
    "person",
    "pottedplant",
    "sheep",
    "sofa",
    "train",
    "tvmonitor",
]
PAPER_ONLY = {
    12: "street sign",
    26: "hat",
    29: "shoe",
    30: "eye glasses",
    45: "plate",
    66: "mirror",
    68: "window",
    69: "desk",
    71: "door",
    83: "blender",
    91: "hair brush",
}
COCO_PAPER = [COCO_CATEGORIES.get(i) or PAPER_ONLY[i] for i in range(1, 92)]


@pytest.mark.parametrize(
    ("md5", "text"),
    [
        ("5ae5d62183cfb6f6d3ac109359d06a1b", "\n".join(VOC) + "\n"),
        ("9ce439bcfb44c304e49a0fe1ae398f69", "\n".join(["background", *VOC])),
        ("571d630ea11ec39c0b6e6e9ff216b151", "\n".join(COCO_80)),
        ("e7103a997c945e0f87c49a03c9c56a1b", "\n".join(["background", *COCO_80]) + "\n"),
        ("a830abf70aabcb873475cbf57e3ce380", "\n".join(COCO_PAPER)),
        ("17249a4106513972e03c00728e7cd380", "\n".join(["background", *COCO_PAPER]) + "\n"),
    ],
)
def test_label_files_identified_by_md5_are_these_lists(md5: str, text: str) -> None:
    """Each MD5 the importer maps was matched by CONTENT: the list written out has exactly the MD5 the manifests
    declare (features_checksum), and the builtin label set it maps to has those names."""
    assert hashlib.md5(text.encode()).hexdigest() == md5
    source, count, _ = DETECTION_LABEL_FILES[md5]
    names = [ln for ln in text.splitlines() if ln]
    assert len(names) in (count, count + 1)  # the coco paper list has 91 names, coco-91 indexes ids 0..90
    if source in LABEL_SETS:
        assert list(label_set(source)) == names
        assert hashlib.md5(label_set_bytes(source)).hexdigest() == md5  # shipped byte for byte


def test_shipped_label_sets() -> None:
    assert set(LABEL_SETS) <= set(BUILTIN_LABELS)
    det = label_set("builtin:ilsvrc-det-200")
    assert hashlib.md5(label_set_bytes("builtin:ilsvrc-det-200")).hexdigest() in KNOWN_LABEL_FILES
    assert (len(det), det[0], det[-1]) == (200, "accordion", "zebra")
    assert label_set("builtin:coco-80-background")[:2] == ("background", "person")
    for source, (_, count) in LABEL_SETS.items():
        assert len(label_set(source)) == count


def test_no_imagenet_label_file_of_the_corpus_is_refused() -> None:
    """The 13 label files still refused are no classifier's class list (salient-object boxes and counts,
    SphereFace's LFW pairs, a VOC gist without checksum): every ImageNet synset file the corpus names is known."""
    urls: collections.Counter[str] = collections.Counter()
    for path in CORPUS.rglob("*.yml"):
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        params = (data.get("output") or {}).get("parameters") or {}
        if "/synsets/imagenet/" in str(params.get("features_url") or ""):
            urls[str(params.get("features_checksum"))] += 1
    assert set(urls) <= set(KNOWN_LABEL_FILES)
    assert urls["6c05083991207dea5c37f2d271014fad"] == 82  # synset1.txt, no longer a URL with a placeholder sha256
    assert urls["1aac07127a5d6b9b634d7e43626eef05"] == 2 and urls["2bb228d6cf55ae4e6409f55fc81fcfe7"] == 2


@pytest.mark.parametrize(
    ("out_type", "reason", "advice"),
    [
        ("instancesegment", "instance_segmentation", "write an object_detection manifest by hand"),
        ("image", "image_output", "no image-to-image task or metric (PSNR, SSIM)"),
        ("coordinates", "coordinates_output", "no keypoint task or metric (OKS, PCK)"),
        ("raw", "other_output", "allowed: classification, feature, boundingbox, semanticsegment"),
    ],
)
def test_output_types_refused_with_their_reason(tmp_path: Path, out_type: str, reason: str, advice: str) -> None:
    """(semanticsegment is translated: its refusals are in test_mlmodelscope_segmentation.py.)"""
    text = (CORPUS / "rai-project-caffe" / "BVLC_AlexNet.yml").read_text(encoding="utf-8")
    data = yaml.safe_load(text)
    data["output"]["type"] = out_type
    path = tmp_path / "m.yml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    with pytest.raises(Exception) as err:
        import_one("mlmodelscope", path)
    assert getattr(err.value, "reason", None) == reason
    assert f"{path}: output.type: '{out_type}' is " in str(err.value) and advice in str(err.value)
    assert IMPORTERS.get("mlmodelscope").refusal_reasons[reason]


def test_every_corpus_folder_has_its_origin() -> None:
    folders = sorted(p for p in CORPUS.iterdir() if p.is_dir())
    assert len(folders) == 11
    for folder in folders:
        origin = (folder / "ORIGIN.md").read_text(encoding="utf-8")
        assert "- commit: `" in origin and "- licence:" in origin and "github.com/" in origin


@pytest.mark.slow
def test_cli_prints_coverage_table(tmp_path: Path) -> None:
    res = CliRunner(env={"COLUMNS": "160"}).invoke(
        app,
        ["manifest", "import", "mlmodelscope", str(CORPUS / "rai-project-caffe"), "--out-dir", str(tmp_path / "out")],
    )
    assert res.exit_code == 0, res.output
    assert "coverage: 35 files" in res.output
    rows = [ln for ln in res.output.splitlines() if ln.startswith("│")]
    cells = [[c.strip() for c in ln.strip("│").split("│")][:3] for ln in rows]
    assert ["with warnings", "31", "88.6 %"] in cells
    assert ["refused: unknown_label_file", "3", "8.6 %"] in cells
    assert ["refused: segmentation_no_output", "1", "2.9 %"] in cells
    assert res.output.splitlines()[-1].startswith("0 translated, 31 with warnings, 4 refused; written to ")


def test_cli_json_rows_carry_the_reason(tmp_path: Path) -> None:
    res = CliRunner().invoke(
        app,
        [
            "manifest",
            "import",
            "mlmodelscope",
            str(CORPUS / "rai-project-cntk"),
            "--out-dir",
            str(tmp_path / "out"),
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    rows = {r["file"]: (r["outcome"], r["reason"]) for r in json.loads(res.stdout)}
    assert len(rows) == 22
    assert rows["InceptionBN-21K.yml"] == ("with warnings", "")  # synset-21k.txt, shipped
    assert rows["VGG16_SOD.yml"] == ("refused", "unknown_label_file")
    assert rows["Inception-ResNet-v2.yml"] == ("refused", "invalid")
    assert rows["BVLC-AlexNet.yml"] == ("with warnings", "")
    assert collections.Counter(reason or outcome for outcome, reason in rows.values()) == {
        "with warnings": 19,
        "unknown_label_file": 2,
        "invalid": 1,
    }
