"""nms: hand cases with exact kept indices, and agreement with straightforward loop references."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from repliscope.errors import OpSpecError
from repliscope.ops.base import Boxes, BoxFormat
from repliscope.ops.detection.nms import Nms
from tests.ops.detection._helpers import boxes, detection_preds, post

HARD: dict[str, Any] = {
    "op": "nms",
    "method": "hard",
    "iou_threshold": 0.5,
    "class_aware": False,
    "max_output": None,
    "soft_function": None,
    "sigma": None,
    "min_score": None,
}


def nms(**changes: Any) -> Nms:
    op = post(**{**HARD, **changes})
    assert isinstance(op, Nms)
    return op


def iou(a: list[float], b: list[float]) -> float:
    iw = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    ih = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - iw * ih
    return iw * ih / union if union > 0 else 0.0


def order(scores: list[float]) -> list[int]:
    return sorted(range(len(scores)), key=lambda i: (-scores[i], i))


def ref_hard(bx: list[list[float]], scores: list[float], classes: list[int], t: float, aware: bool) -> list[int]:
    kept: list[int] = []
    for i in order(scores):
        if all(iou(bx[i], bx[k]) <= t or (aware and classes[i] != classes[k]) for k in kept):
            kept.append(i)
    return kept


def ref_soft(
    bx: list[list[float]], scores: list[float], t: float, fn: str, sigma: float, min_score: float
) -> tuple[list[int], list[float]]:
    s = [float(v) for v in scores]
    alive = [i for i in range(len(s)) if s[i] >= min_score]
    kept, kept_s = [], []
    while alive:
        i = min(alive, key=lambda j: (-s[j], j))
        kept.append(i)
        kept_s.append(s[i])
        alive.remove(i)
        for j in alive:
            o = iou(bx[i], bx[j])
            s[j] *= (1 - o if o > t else 1.0) if fn == "linear" else math.exp(-o * o / sigma)
        alive = [j for j in alive if s[j] >= min_score]
    return kept, kept_s


def ref_weighted(bx: list[list[float]], scores: list[float], t: float) -> tuple[list[int], list[list[float]]]:
    remaining = order(scores)
    kept, out = [], []
    while remaining:
        i = remaining[0]
        members = [j for j in remaining if j == i or iou(bx[i], bx[j]) > t]
        total = sum(scores[j] for j in members)
        out.append([sum(bx[j][c] * scores[j] for j in members) / total for c in range(4)])
        kept.append(i)
        remaining = [j for j in remaining if j not in members]
    return kept, out


def random_case(seed: int, k: int = 60) -> tuple[list[list[float]], list[float], list[int]]:
    rng = np.random.default_rng(seed)
    xy = rng.uniform(0, 80, (k, 2))
    wh = rng.uniform(5, 40, (k, 2))
    bx = np.concatenate([xy, xy + wh], axis=1).astype(np.float32).astype(np.float64)
    scores = np.round(rng.uniform(0, 1, k), 2).astype(np.float32).astype(np.float64)  # rounded: ties happen
    return bx.tolist(), scores.tolist(), rng.integers(0, 3, k).tolist()


def run(op: Nms, bx: list[list[float]], scores: list[float], classes: list[int] | None = None) -> Boxes:
    out = op(detection_preds(boxes(bx, scores, classes)))
    assert out.detections is not None
    return out.detections[0]


def kept_rows(result: Boxes, bx: list[list[float]]) -> list[int]:
    return [bx.index(row) for row in result.boxes.astype(np.float64).tolist()]


# three boxes: A and B overlap with IoU 0.6, C is apart
A, B, C = [0.0, 0.0, 10.0, 10.0], [0.0, 2.5, 10.0, 12.5], [20.0, 20.0, 30.0, 30.0]  # iou(A, B) = 75 / 125 = 0.6


def test_hard_hand_cases() -> None:
    assert iou(A, B) == pytest.approx(0.6)
    assert kept_rows(run(nms(), [A, B, C], [0.9, 0.8, 0.7]), [A, B, C]) == [0, 2]
    assert kept_rows(run(nms(iou_threshold=0.6), [A, B, C], [0.9, 0.8, 0.7]), [A, B, C]) == [0, 1, 2]  # not > 0.6
    assert kept_rows(run(nms(), [A, B, C], [0.7, 0.8, 0.9]), [A, B, C]) == [2, 1]  # best first
    # equal scores: the lower index wins
    assert kept_rows(run(nms(), [B, A, C], [0.8, 0.8, 0.8]), [B, A, C]) == [0, 2]
    # class aware: different classes do not suppress each other
    aware = run(nms(class_aware=True), [A, B, C], [0.9, 0.8, 0.7], [1, 2, 1])
    assert kept_rows(aware, [A, B, C]) == [0, 1, 2] and aware.classes.tolist() == [1, 2, 1]
    assert kept_rows(run(nms(max_output=1), [A, B, C], [0.9, 0.8, 0.7]), [A, B, C]) == [0]


def test_soft_and_weighted_hand_cases() -> None:
    lin = run(nms(method="soft", soft_function="linear", min_score=0.1), [A, B, C], [0.9, 0.8, 0.7])
    assert kept_rows(lin, [A, B, C]) == [0, 2, 1]
    np.testing.assert_allclose(lin.scores, [0.9, 0.7, 0.8 * 0.4], rtol=1e-6)  # B decayed by 1 - 0.6
    gauss = run(nms(method="soft", soft_function="gaussian", sigma=0.5, min_score=0.3), [A, B, C], [0.9, 0.8, 0.7])
    assert kept_rows(gauss, [A, B, C]) == [0, 2, 1]
    np.testing.assert_allclose(gauss.scores, [0.9, 0.7, 0.8 * math.exp(-0.36 / 0.5)], rtol=1e-6)
    dropped = run(nms(method="soft", soft_function="linear", min_score=0.35), [A, B, C], [0.9, 0.8, 0.7])
    assert kept_rows(dropped, [A, B, C]) == [0, 2]  # 0.32 < 0.35
    w = run(nms(method="weighted"), [A, B, C], [0.6, 0.2, 0.7])
    np.testing.assert_allclose(w.boxes, [C, [0.0, 0.625, 10.0, 10.625]], rtol=1e-6)  # (0.6 A + 0.2 B) / 0.8
    np.testing.assert_allclose(w.scores, [0.7, 0.6], rtol=1e-6)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("aware", [False, True])
def test_hard_agrees_with_the_reference(seed: int, aware: bool) -> None:
    bx, scores, classes = random_case(seed)
    for t in (0.0, 0.3, 0.5, 0.7):
        got = run(nms(iou_threshold=t, class_aware=aware), bx, scores, classes)
        assert kept_rows(got, bx) == ref_hard(bx, scores, classes, t, aware)


@pytest.mark.parametrize("seed", range(4))
def test_soft_and_weighted_agree_with_the_references(seed: int) -> None:
    bx, scores, _ = random_case(seed, 40)
    for fn, sigma in (("linear", None), ("gaussian", 0.5)):
        got = run(nms(method="soft", iou_threshold=0.3, soft_function=fn, sigma=sigma, min_score=0.05), bx, scores)
        kept, kept_s = ref_soft(bx, scores, 0.3, fn, sigma or 0.0, 0.05)
        assert kept_rows(got, bx) == kept
        np.testing.assert_allclose(got.scores, kept_s, rtol=1e-6)
    got = run(nms(method="weighted", iou_threshold=0.3), bx, scores)
    kept, blended = ref_weighted(bx, scores, 0.3)
    np.testing.assert_allclose(got.scores, [scores[i] for i in kept], rtol=1e-7)
    np.testing.assert_allclose(got.boxes, blended, rtol=1e-6, atol=1e-5)


def test_normalised_yxyx_boxes_give_the_same_kept_set_and_keep_their_format() -> None:
    bx, scores, _ = random_case(11)
    arr = np.asarray(bx)
    yxyx = (arr[:, [1, 0, 3, 2]] / [150.0, 120.0, 150.0, 120.0]).tolist()
    fmt = BoxFormat("yxyx", normalized=True)
    out = nms()(
        detection_preds(
            Boxes(np.asarray(yxyx, np.float32), np.asarray(scores, np.float32), np.zeros(len(bx), np.int64), fmt)
        )
    )
    assert out.detections is not None and out.detections[0].format == fmt
    assert len(out.detections[0].boxes) == len(ref_hard(bx, scores, [0] * len(bx), 0.5, False))


@pytest.mark.parametrize(
    ("changes", "key"),
    [
        ({"method": "soft"}, "soft_function"),
        ({"method": "soft", "soft_function": "gaussian", "min_score": 0.1}, "sigma"),
        ({"method": "soft", "soft_function": "linear", "min_score": 0.1, "sigma": 0.5}, "sigma"),
        ({"sigma": 0.5}, "sigma"),
        ({"min_score": 0.5}, "min_score"),
        ({"iou_threshold": 1.5}, "iou_threshold"),
        ({"method": "greedy"}, "method"),
    ],
)
def test_bad_params_name_the_field(changes: dict[str, Any], key: str) -> None:
    with pytest.raises(OpSpecError) as exc:
        nms(**changes)
    assert exc.value.key == key
