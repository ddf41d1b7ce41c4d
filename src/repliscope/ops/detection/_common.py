"""Helpers shared by the detection ops: box-format specs, kind conversions, IoU, refusing other predictions.

Box coordinates are continuous pixel EDGES (COCO's convention: the image spans [0, W] x [0, H], a box's
width is ``x2 - x1``, no ``+ 1``). Conversions compute in float64 and store float32.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, get_args

import numpy as np

from repliscope.errors import OpSpecError, RepliscopeError
from repliscope.ops.base import Boxes, BoxFormat, BoxKind, BoxSpace, Op, Predictions

KINDS: tuple[str, ...] = get_args(BoxKind)
SPACES: tuple[str, ...] = get_args(BoxSpace)
FORMAT_KEYS = ("kind", "normalized", "one_based", "space")
"""A box-format spec in a manifest: a mapping with exactly these keys (every convention stated)."""


def parse_format(key: str, raw: Mapping[str, Any]) -> BoxFormat:
    """A :class:`BoxFormat` from a manifest mapping; OpSpecError naming ``key.<field>`` and the allowed values."""
    for k in raw:
        if k not in FORMAT_KEYS:
            raise OpSpecError(f"{key}.{k}", "unknown box-format key", allowed=FORMAT_KEYS)
    for k in FORMAT_KEYS:
        if k not in raw:
            raise OpSpecError(
                f"{key}.{k}",
                "required box-format key missing (kind, normalized, one_based and space are all stated)",
                allowed=FORMAT_KEYS,
            )
    if raw["kind"] not in KINDS:
        raise OpSpecError(f"{key}.kind", f"invalid value {raw['kind']!r}", allowed=KINDS)
    if raw["space"] not in SPACES:
        raise OpSpecError(f"{key}.space", f"invalid value {raw['space']!r}", allowed=SPACES)
    for k in ("normalized", "one_based"):
        if not isinstance(raw[k], bool):
            raise OpSpecError(f"{key}.{k}", f"expected true or false, got {raw[k]!r}", allowed=["false", "true"])
    if raw["normalized"] and raw["one_based"]:
        raise OpSpecError(
            f"{key}.one_based",
            "normalised coordinates have no pixel index base; set one_based: false",
            allowed=["false"],
        )
    return BoxFormat(raw["kind"], raw["normalized"], raw["one_based"], raw["space"])


def format_dict(fmt: BoxFormat) -> dict[str, Any]:
    """The manifest mapping of ``fmt`` (inverse of :func:`parse_format`)."""
    return {"kind": fmt.kind, "normalized": fmt.normalized, "one_based": fmt.one_based, "space": fmt.space}


def to_xyxy(boxes: np.ndarray, kind: str) -> np.ndarray:
    """(K, 4) boxes of ``kind`` -> (K, 4) float64 xyxy (same units)."""
    b = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    if kind == "xyxy":
        return b.copy()
    if kind == "yxyx":
        return b[:, [1, 0, 3, 2]]
    if kind == "xywh":
        return np.stack([b[:, 0], b[:, 1], b[:, 0] + b[:, 2], b[:, 1] + b[:, 3]], axis=1)
    if kind == "cxcywh":
        hw, hh = b[:, 2] / 2.0, b[:, 3] / 2.0
        return np.stack([b[:, 0] - hw, b[:, 1] - hh, b[:, 0] + hw, b[:, 1] + hh], axis=1)
    raise ValueError(f"unknown box kind {kind!r}")


def from_xyxy(xyxy: np.ndarray, kind: str) -> np.ndarray:
    """(K, 4) float64 xyxy -> (K, 4) float64 boxes of ``kind`` (inverse of :func:`to_xyxy`)."""
    b = np.asarray(xyxy, dtype=np.float64).reshape(-1, 4)
    if kind == "xyxy":
        return b.copy()
    if kind == "yxyx":
        return b[:, [1, 0, 3, 2]]
    if kind == "xywh":
        return np.stack([b[:, 0], b[:, 1], b[:, 2] - b[:, 0], b[:, 3] - b[:, 1]], axis=1)
    if kind == "cxcywh":
        return np.stack(
            [(b[:, 0] + b[:, 2]) / 2.0, (b[:, 1] + b[:, 3]) / 2.0, b[:, 2] - b[:, 0], b[:, 3] - b[:, 1]], axis=1
        )
    raise ValueError(f"unknown box kind {kind!r}")


def position_columns(kind: str) -> list[int]:
    """Columns of a ``kind`` box that are positions (shifted by a change of pixel base), not sizes."""
    return [0, 1] if kind in ("xywh", "cxcywh") else [0, 1, 2, 3]


def iou_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(Ka, Kb) float64 IoU of xyxy boxes (pixel edges: area = (x2 - x1) * (y2 - y1)); 0 when the union is 0.

    IoU is unchanged by a per-axis scaling, so normalised and pixel boxes of one image give the same values.
    """
    a = np.asarray(a, dtype=np.float64).reshape(-1, 4)
    b = np.asarray(b, dtype=np.float64).reshape(-1, 4)
    area_a = np.clip(a[:, 2] - a[:, 0], 0, None) * np.clip(a[:, 3] - a[:, 1], 0, None)
    area_b = np.clip(b[:, 2] - b[:, 0], 0, None) * np.clip(b[:, 3] - b[:, 1], 0, None)
    iw = np.clip(np.minimum(a[:, None, 2], b[None, :, 2]) - np.maximum(a[:, None, 0], b[None, :, 0]), 0, None)
    ih = np.clip(np.minimum(a[:, None, 3], b[None, :, 3]) - np.maximum(a[:, None, 1], b[None, :, 1]), 0, None)
    inter = iw * ih
    union = area_a[:, None] + area_b[None, :] - inter
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(union > 0, inter / np.where(union > 0, union, 1.0), 0.0)


def refuse_classification(op: Op, preds: Predictions) -> None:
    """RepliscopeError when ``preds`` went through classification ops (``topk``/``labels``)."""
    if preds.topk_indices is not None or preds.topk_labels is not None:
        raise RepliscopeError(
            f"'{op.name}' is a detection op but these are classification predictions (after "
            "'topk'); a manifest uses either classification or detection post-processing"
        )


def require_detections(op: Op, preds: Predictions) -> list[Boxes]:
    """The per-row :class:`Boxes` of ``preds``; RepliscopeError naming the missing step otherwise."""
    refuse_classification(op, preds)
    if preds.detections is None:
        raise RepliscopeError(
            f"'{op.name}' needs detections: put 'detections_from_outputs' or 'anchor_decode' before it"
        )
    return preds.detections


def require_output(op: Op, preds: Predictions, name: str) -> np.ndarray:
    """Model output ``name`` (batch first); RepliscopeError listing the outputs there are."""
    refuse_classification(op, preds)
    if name not in preds.outputs:
        have = ", ".join(sorted(preds.outputs)) or "none"
        raise RepliscopeError(
            f"'{op.name}' reads model output {name!r}, which the model does not have (outputs: {have})"
        )
    return preds.outputs[name]


def select(boxes: Boxes, keep: np.ndarray) -> Boxes:
    """``boxes`` restricted to the rows ``keep`` (a boolean mask or an index array), format unchanged."""
    return Boxes(boxes.boxes[keep], boxes.scores[keep], boxes.classes[keep], boxes.format)


def with_detections(preds: Predictions, detections: list[Boxes]) -> Predictions:
    return dataclasses.replace(preds, detections=detections)


def empty_boxes(fmt: BoxFormat) -> Boxes:
    return Boxes(np.zeros((0, 4), np.float32), np.zeros(0, np.float32), np.zeros(0, np.int64), fmt)
