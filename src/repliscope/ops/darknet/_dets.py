"""Darknet's ``detection`` array between the darknet post ops: boxes + objectness + a probability per class."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from repliscope.errors import RepliscopeError
from repliscope.ops.base import Boxes, Op, Predictions


@dataclass
class DarknetDetections(Boxes):
    """Darknet's ``detection[]`` of one image, in Darknet's array order: ``boxes`` float32 (K, 4) cx, cy, w, h
    (Darknet's ``box``), ``scores`` = ``objectness`` float32 (K,), ``probs`` float32 (K, C) = objectness x class
    probability where above the threshold else 0 (NMS zeroes entries), ``classes`` -1 (one box, all classes)."""

    probs: np.ndarray
    objectness: np.ndarray


def require_darknet(op: Op, preds: Predictions) -> list[DarknetDetections]:
    dets = preds.detections
    if dets is None or not all(isinstance(d, DarknetDetections) for d in dets):
        raise RepliscopeError(f"'{op.name}' works on Darknet's detections: put 'yolo_decode' before it")
    return [d for d in dets if isinstance(d, DarknetDetections)]


def box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Darknet ``box_iou`` in float32, same operations: ``a`` (4,) cx,cy,w,h against ``b`` (K, 4) -> (K,)."""
    f = np.float32
    two = f(2)

    def overlap(x1: np.float32, w1: np.float32, x2: np.ndarray, w2: np.ndarray) -> np.ndarray:
        left = np.maximum(x1 - w1 / two, x2 - w2 / two)
        right = np.minimum(x1 + w1 / two, x2 + w2 / two)
        return (right - left).astype(np.float32)

    a = a.astype(np.float32)
    b = b.astype(np.float32)
    w = overlap(a[0], a[2], b[:, 0], b[:, 2])
    h = overlap(a[1], a[3], b[:, 1], b[:, 3])
    inter = np.where((w < 0) | (h < 0), f(0), w * h).astype(np.float32)
    union = (a[2] * a[3] + b[:, 2] * b[:, 3] - inter).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        return (inter / union).astype(np.float32)
