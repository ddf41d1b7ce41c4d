"""score_activation, score_threshold, max_detections, class_map and detections_from_outputs by hand."""

from __future__ import annotations

import numpy as np
import pytest

from repliscope.errors import OpSpecError, RepliscopeError
from repliscope.ops.base import BoxFormat
from repliscope.ops.detection.class_map import COCO80_TO_91, COCO91_TO_80
from tests.ops.detection._helpers import XYXY_NORM, boxes, detection_preds, output_preds, post


def test_sigmoid_with_mediapipe_clip_and_softmax_on_an_output() -> None:
    op = post(op="score_activation", function="sigmoid", clip=80.0, output=None)
    out = op(detection_preds(boxes([[0, 0, 1, 1]] * 3, scores=[0.0, np.log(3.0), -200.0])))
    assert out.detections is not None
    np.testing.assert_allclose(out.detections[0].scores, [0.5, 0.75, 1 / (1 + np.exp(80.0))], rtol=1e-6)
    soft = post(op="score_activation", function="softmax", clip=None, output="logits")
    logits = np.log(np.array([[[1.0, 1.0, 2.0], [1.0, 3.0, 4.0]]], np.float32))
    got = soft(output_preds(logits=logits, other=np.ones((1, 2))))
    np.testing.assert_allclose(got.outputs["logits"], [[[0.25, 0.25, 0.5], [0.125, 0.375, 0.5]]], rtol=1e-6)
    np.testing.assert_array_equal(got.outputs["other"], np.ones((1, 2)))
    clip_only = post(op="score_activation", function="none", clip=2.0, output="logits")
    np.testing.assert_array_equal(
        clip_only(output_preds(logits=np.array([[-5.0, 1.0, 5.0]]))).outputs["logits"], [[-2.0, 1.0, 2.0]]
    )
    with pytest.raises(OpSpecError) as exc:
        post(op="score_activation", function="softmax", clip=None, output=None)
    assert exc.value.key == "function" and exc.value.allowed == ["none", "sigmoid"]
    with pytest.raises(RepliscopeError, match=r"reads model output 'scores'.*\(outputs: logits\)"):
        post(op="score_activation", function="sigmoid", clip=None, output="scores")(output_preds(logits=logits))


def test_threshold_comparison_is_explicit_and_max_detections_breaks_ties_by_index() -> None:
    b = boxes([[i, 0, i + 1, 1] for i in range(5)], scores=[0.5, 0.9, 0.5, 0.1, 0.7], classes=[0, 1, 2, 3, 4])
    ge = post(op="score_threshold", threshold=0.5, keep="ge")(detection_preds(b))
    gt = post(op="score_threshold", threshold=0.5, keep="gt")(detection_preds(b))
    assert ge.detections is not None and gt.detections is not None
    assert ge.detections[0].classes.tolist() == [0, 1, 2, 4] and gt.detections[0].classes.tolist() == [1, 4]
    top = post(op="max_detections", k=3)(detection_preds(b))
    assert top.detections is not None and top.detections[0].classes.tolist() == [1, 4, 0]
    np.testing.assert_array_equal(top.detections[0].boxes[:, 0], [1, 4, 0])
    with pytest.raises(OpSpecError) as exc:
        post(op="score_threshold", threshold=0.5, keep=">=")
    assert exc.value.key == "keep" and exc.value.allowed == ["ge", "gt"]


def test_coco_tables() -> None:
    assert len(COCO80_TO_91) == 80 and COCO80_TO_91[:12] == (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13)
    assert COCO80_TO_91[-1] == 90 and 12 not in COCO91_TO_80 and COCO91_TO_80[90] == 79
    op = post(op="class_map", background=None, offset=0, table="coco80_to_91")
    to80 = post(op="class_map", background=None, offset=0, table="coco91_to_80")
    b = boxes([[0, 0, 1, 1]] * 4, classes=[0, 11, 12, 79])
    mid = op(detection_preds(b))
    assert mid.detections is not None and mid.detections[0].classes.tolist() == [1, 13, 14, 90]
    back = to80(mid)
    assert back.detections is not None and back.detections[0].classes.tolist() == [0, 11, 12, 79]
    with pytest.raises(RepliscopeError, match=r"coco91_to_80: 12 .* is not a COCO category id"):
        to80(detection_preds(boxes([[0, 0, 1, 1]], classes=[12])))
    with pytest.raises(RepliscopeError, match=r"reads classes 0\.\.79, got 80"):
        op(detection_preds(boxes([[0, 0, 1, 1]], classes=[80])))


def test_background_is_dropped_before_the_offset() -> None:
    b = boxes([[0, 0, 1, 1], [1, 1, 2, 2], [2, 2, 3, 3]], scores=[0.3, 0.2, 0.1], classes=[0, 1, 80])
    out = post(op="class_map", background=0, offset=-1, table="coco80_to_91")(detection_preds(b))
    assert out.detections is not None
    assert out.detections[0].classes.tolist() == [1, 90] and out.detections[0].scores.tolist() == pytest.approx(
        [0.2, 0.1]
    )
    with pytest.raises(OpSpecError) as exc:
        post(op="class_map", background=None, offset=0, table="coco")
    assert exc.value.key == "table" and exc.value.allowed == ["coco80_to_91", "coco91_to_80", "none"]


def test_detections_from_outputs_with_count_and_float_classes() -> None:
    op = post(
        op="detections_from_outputs",
        boxes="b",
        scores="s",
        classes="c",
        count="n",
        format={**XYXY_NORM, "kind": "yxyx"},
    )
    b = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4) / 100
    s = np.array([[0.9, 0.8, 0.7], [0.6, 0.5, 0.4]], np.float32)
    c = np.array([[1.0, 18.0, 3.0], [44.0, 1.0, 1.0]], np.float32)
    out = op(output_preds(b=b, s=s, c=c, n=np.array([2.0, 0.0], np.float32)))
    assert out.detections is not None
    first, second = out.detections
    assert first.format == BoxFormat("yxyx", normalized=True)
    np.testing.assert_array_equal(first.boxes, b[0, :2])
    assert first.classes.tolist() == [1, 18] and first.classes.dtype == np.int64
    assert second.boxes.shape == (0, 4) and second.scores.shape == (0,)
    single = post(op="detections_from_outputs", boxes="b", scores="s", classes=None, count=None, format=XYXY_NORM)
    one = single(output_preds(b=b, s=s))
    assert one.detections is not None and one.detections[1].classes.tolist() == [0, 0, 0]
    with pytest.raises(RepliscopeError, match="non-integer class ids"):
        op(output_preds(b=b, s=s, c=c + 0.5, n=np.array([2.0, 0.0])))
    with pytest.raises(RepliscopeError, match=r"'n' must hold one whole count in \[0, 3\]"):
        op(output_preds(b=b, s=s, c=c, n=np.array([4.0, 0.0])))
    with pytest.raises(RepliscopeError, match=r"'s' has shape \(2, 2\), not \(2, 3\)"):
        op(output_preds(b=b, s=s[:, :2], c=c, n=np.array([1, 1])))
    with pytest.raises(OpSpecError) as exc:
        post(
            op="detections_from_outputs",
            boxes="b",
            scores="s",
            classes=None,
            count=None,
            format={**XYXY_NORM, "kind": "ltrb"},
        )
    assert exc.value.key == "format.kind" and exc.value.allowed == ["cxcywh", "xywh", "xyxy", "yxyx"]
