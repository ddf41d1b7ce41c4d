"""Label-map outputs (kind ``mask_labels``, ``mask_from_outputs`` with ``labels: true``): a model that emits one
class index per pixel (TensorFlow DeepLab's ``SemanticPredictions``), read as labels and resized by nearest."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from repliscope.errors import ManifestError, ManifestErrors, RepliscopeError
from repliscope.manifest.loader import load_manifest
from repliscope.ops.base import BuildContext, Geometry, Predictions
from repliscope.ops.pipeline import Pipeline, build_op

FIXTURE = Path(__file__).parents[1] / "fixtures" / "segmentation" / "colour-segmenter.yaml"
NAMES = ("background", "a", "b")
LABELS_OUTPUT = """outputs:
  - name: logits
    shape: [1, 32, 32]
    dtype: int64
    layout: NHW
    kind: mask_labels

postprocess:
  - op: mask_from_outputs
    output: logits
    layout: NHW
    activated: false
    labels: true
  - op: mask_resize
    method: nearest
    mapping: geometry
    sampling: half_pixel
    input_size: [32, 32]
    library: numpy
"""


def labels_manifest(tmp_path: Path, extra: str = "", kind: str = "mask_labels", labels: str = "true") -> Path:
    text = FIXTURE.read_text()
    start, end = text.index("outputs:"), text.index("labels:\n  source")
    body = LABELS_OUTPUT.replace("kind: mask_labels", f"kind: {kind}").replace("labels: true", f"labels: {labels}")
    p = tmp_path / "m.yaml"
    p.write_text(text[:start] + body + extra + "\n" + text[end:])
    for name in ("colour_segmenter.onnx", "colour-labels.txt"):
        (tmp_path / name).write_bytes((FIXTURE.parent / name).read_bytes())
    return p


def _errors(path: Path) -> list[str]:
    with pytest.raises((ManifestError, ManifestErrors)) as ei:
        load_manifest(path)
    return [str(e) for e in ei.value.errors]


def test_a_label_map_manifest_loads(tmp_path: Path) -> None:
    loaded = load_manifest(labels_manifest(tmp_path))
    assert loaded.manifest.outputs[0].kind == "mask_labels"


@pytest.mark.parametrize(
    ("extra", "kind", "labels", "expected"),
    [
        (
            "  - op: mask_argmax\n",
            "mask_labels",
            "true",
            "field 'postprocess[2]': the output is a label map already (labels: true): mask_argmax takes scores",
        ),
        (
            "",
            "mask_logits",
            "true",
            "field 'postprocess[0].labels': output 'logits' is of kind mask_logits: labels must be false",
        ),
        (
            "",
            "mask_labels",
            "false",
            "field 'postprocess[0].labels': output 'logits' is of kind mask_labels: labels must be true",
        ),
    ],
)
def test_problems_are_named(tmp_path: Path, extra: str, kind: str, labels: str, expected: str) -> None:
    errors = _errors(labels_manifest(tmp_path, extra, kind, labels))
    assert any(expected in e for e in errors), errors


def test_a_bilinear_resize_of_labels_is_refused(tmp_path: Path) -> None:
    path = labels_manifest(tmp_path)
    path.write_text(
        path.read_text().replace(
            "    method: nearest\n    mapping: geometry", "    method: bilinear\n    mapping: geometry"
        )
    )
    assert any("must use method nearest" in e for e in _errors(path))


def _pipeline(layout: str = "NHW") -> Pipeline:
    ctx = BuildContext(class_names=NAMES)
    first = build_op(
        {"op": "mask_from_outputs", "output": "o", "layout": layout, "activated": False, "labels": True}, "post", ctx
    )
    resize = build_op(
        {"op": "mask_resize", "method": "nearest", "mapping": "stretch", "sampling": "half_pixel", "library": "numpy"},
        "post",
        ctx,
    )
    return Pipeline([], [first, resize])  # type: ignore[list-item]


def test_labels_are_read_and_resized_by_nearest() -> None:
    x = np.array([[[0, 1], [2, 7]]], dtype=np.int64)  # 7: not a class, kept (scored as "no class")
    maps = _pipeline().postprocess({"o": x}, geometry=[Geometry((4, 6))]).segmentation
    assert maps is not None and maps[0].values is None and maps[0].space == "source"
    assert maps[0].labels is not None and maps[0].labels.dtype == np.int32
    assert maps[0].labels.tolist() == [[0, 0, 0, 1, 1, 1], [0, 0, 0, 1, 1, 1], [2, 2, 2, 7, 7, 7], [2, 2, 2, 7, 7, 7]]


def test_a_one_channel_nhwc_label_output() -> None:
    x = np.array([[[[1.0], [2.0]]]], dtype=np.float32)  # (1, 1, 2, 1): integral floats are class indices
    maps = _pipeline("NHWC").postprocess({"o": x}, geometry=[Geometry((1, 2))]).segmentation
    assert maps is not None and maps[0].labels is not None and maps[0].labels.tolist() == [[1, 2]]


def test_non_integral_values_are_not_labels() -> None:
    with pytest.raises(RepliscopeError, match="not class indices"):
        _pipeline().postprocess({"o": np.full((1, 2, 2), 0.5, np.float32)}, geometry=[Geometry((2, 2))])


def test_the_first_op_alone_gives_labels_in_the_output_grid() -> None:
    op = build_op(
        {"op": "mask_from_outputs", "output": "o", "layout": "NHW", "activated": False, "labels": True},
        "post",
        BuildContext(class_names=NAMES),
    )
    p = op(Predictions(scores=np.zeros((2, 1), np.float32), outputs={"o": np.zeros((2, 3, 4), np.int64)}))
    assert p.segmentation is not None and [m.labels.shape for m in p.segmentation] == [(3, 4), (3, 4)]
    assert all(m.space == "output" for m in p.segmentation)
