"""Helpers for the detection op tests: building post ops and hand-made detection predictions."""

from __future__ import annotations

from typing import Any

import numpy as np

from repliscope.ops import BuildContext, PostOp, Predictions, build_op
from repliscope.ops.base import Boxes, BoxFormat, Geometry

CTX = BuildContext()
XYXY_PX = {"kind": "xyxy", "normalized": False, "one_based": False, "space": "input"}
XYXY_NORM = {"kind": "xyxy", "normalized": True, "one_based": False, "space": "input"}


def post(**spec: Any) -> PostOp:
    op = build_op(spec, "post", CTX)
    assert isinstance(op, PostOp)
    return op


def boxes(
    rows: list[list[float]],
    scores: list[float] | None = None,
    classes: list[int] | None = None,
    fmt: BoxFormat | None = None,
) -> Boxes:
    arr = np.asarray(rows, np.float32).reshape(-1, 4)
    k = len(arr)
    return Boxes(
        arr,
        np.asarray(scores if scores is not None else [0.5] * k, np.float32),
        np.asarray(classes if classes is not None else [0] * k, np.int64),
        fmt or BoxFormat("xyxy", normalized=False),
    )


def detection_preds(*rows: Boxes, geometry: list[Geometry | None] | None = None) -> Predictions:
    n = len(rows)
    return Predictions(
        scores=np.zeros((n, 1), np.float32),
        detections=list(rows),
        geometry=list(geometry) if geometry is not None else [None] * n,
    )


def output_preds(**outputs: np.ndarray) -> Predictions:
    n = len(next(iter(outputs.values())))
    return Predictions(scores=np.zeros((n, 1), np.float32), outputs=dict(outputs), geometry=[None] * n)
