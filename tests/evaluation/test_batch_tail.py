"""The element-wise tail of a pipeline run once per batch (issue 37: less work per image in the loop) gives the
bytes each sample's own ops give, for Lite0's tail and for tails in other orders, layouts, dtypes and per-channel
values; anything it does not cover (another op, integer arithmetic, samples of different shapes) runs per sample."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from repliscope.evaluation.batch_tail import BatchTail
from repliscope.evaluation.engine import PreparedItem, Stage, finish_batch, finish_item
from repliscope.ops.base import Item
from repliscope.ops.pipeline import Pipeline

DECODED: list[dict[str, Any]] = [
    {"op": "decode", "library": "pillow", "channels": "RGB"},
    {"op": "center_crop", "size": 6},
]
LITE0_TAIL: list[dict[str, Any]] = [
    {"op": "to_float", "dtype": "float32"},
    {"op": "subtract_mean", "value": 127.0},
    {"op": "divide_std", "value": 128.0},
    {"op": "data_layout", "layout": "NCHW"},
]
IMAGENET_CHW64: list[dict[str, Any]] = [
    {"op": "to_float", "dtype": "float64"},
    {"op": "data_layout", "layout": "NCHW"},
    {"op": "divide_std", "value": 255.0},
    {"op": "subtract_mean", "value": [0.485, 0.456, 0.406]},
    {"op": "divide_std", "value": [0.229, 0.224, 0.225]},
]
NHWC_PER_CHANNEL: list[dict[str, Any]] = [
    {"op": "to_float", "dtype": "float32"},
    {"op": "subtract_mean", "value": [123.675, 116.28, 103.53]},
    {"op": "divide_std", "value": [58.395, 57.12, 57.375]},
    {"op": "data_layout", "layout": "NHWC"},
]


def _pipeline(tail: list[dict[str, Any]]) -> Pipeline:
    return Pipeline.from_specs(DECODED + tail, [])


def _crops(n: int, shape: tuple[int, int, int] = (6, 6, 3), seed: int = 0) -> list[Item]:
    rng = np.random.default_rng(seed)
    return [Item(rng.integers(0, 256, shape, dtype=np.uint8), "HWC", "RGB") for _ in range(n)]


@pytest.mark.parametrize("tail_specs", [LITE0_TAIL, IMAGENET_CHW64, NHWC_PER_CHANNEL], ids=["lite0", "chw64", "nhwc"])
def test_the_batched_tail_gives_each_samples_bytes(tail_specs: list[dict[str, Any]]) -> None:
    pipeline = _pipeline(tail_specs)
    tail = BatchTail.of(pipeline)
    assert tail is not None and tail.start == 2 and [op.name for op in tail.ops] == [s["op"] for s in tail_specs]
    crops = _crops(5)
    batched = tail.apply(crops)
    each = np.stack([finish_item(pipeline, c, 2, None).data for c in crops])  # type: ignore[misc]
    assert batched.dtype == each.dtype and batched.shape == each.shape and batched.flags.c_contiguous
    assert batched.tobytes() == each.tobytes()


def test_only_the_element_wise_tail_after_the_last_cast_is_batched() -> None:
    integer_first = [{"op": "subtract_mean", "value": 127.0}, *LITE0_TAIL]  # uint8 arithmetic: wraps, stays per sample
    tail = BatchTail.of(_pipeline(integer_first))
    assert tail is not None and tail.start == 3 and tail.ops[0].name == "to_float"
    assert BatchTail.of(_pipeline([*LITE0_TAIL[:3], {"op": "reshape_layout", "layout": "NCHW"}])) is None
    assert BatchTail.of(_pipeline([LITE0_TAIL[1], LITE0_TAIL[3]])) is None  # no cast: nothing batched


def test_a_batch_the_tail_does_not_fit_runs_per_sample() -> None:
    pipeline = _pipeline(LITE0_TAIL)
    tail = BatchTail.of(pipeline)
    assert tail is not None
    mixed = _crops(1) + _crops(1, (7, 6, 3), seed=1)  # two shapes: no stacking; the shape check fails the second
    states: list[PreparedItem | Stage] = [(c, 2) for c in mixed]
    prepared, stacked = finish_batch(pipeline, tail, states, (3, 6, 6))
    assert stacked is None and prepared[0].data is not None
    assert prepared[0].data.tobytes() == finish_item(pipeline, mixed[0], 2, (3, 6, 6)).data.tobytes()  # type: ignore[union-attr]
    assert prepared[1].error == "pre-processed shape (3, 7, 6) does not match the model input (3, 6, 6)"
    failed = PreparedItem(None, "unreadable: gone")
    prepared, stacked = finish_batch(pipeline, tail, [failed, (mixed[0], 2)], None)
    assert stacked is None and prepared[0] is failed and prepared[1].data is not None
    same, stacked = finish_batch(pipeline, tail, [(c, 2) for c in _crops(3)], (3, 7, 7))  # stacked, wrong shape
    assert stacked is None and {p.error for p in same} == {
        "pre-processed shape (3, 6, 6) does not match the model input (3, 7, 7)"
    }
