"""``darknet_correct_boxes`` and ``darknet_nms``: Darknet's letterbox undo and its two NMS functions."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Literal

import numpy as np
from pydantic import Field

from repliscope.errors import RepliscopeError
from repliscope.ops.base import OPS, BoxFormat, OpParams, PostOp, Predictions
from repliscope.ops.darknet._dets import DarknetDetections, box_iou, require_darknet
from repliscope.ops.darknet.letterbox import letterbox_size
from repliscope.ops.detection._common import with_detections

PositiveInt = Annotated[int, Field(gt=0)]


class CorrectBoxesParams(OpParams):
    input_size: Annotated[list[PositiveInt], Field(min_length=2, max_length=2)]
    """[height, width] of the network input."""
    relative: bool
    """Darknet's ``relative``: true keeps fractions of the source image (``detector test``), false gives its
    pixels (``detector valid``, the Python example)."""
    letterbox: bool
    """True: undo ``letterbox_image`` (Darknet 2018); false: the boxes are fractions of a stretched image (the
    pitfall of undoing a letterbox that was never applied, or of a stretch read as letterbox)."""


@OPS.register("darknet_correct_boxes")
class DarknetCorrectBoxes(PostOp):
    """Darknet ``correct_yolo_boxes(dets, n, w, h, netw, neth, relative)`` with ``w, h`` the decoded source
    image's size (from each row's geometry). Same arithmetic: the offset ``(netw - new_w) / 2. / netw`` in double,
    the scale ``(float) new_w / netw`` in float; the result stored float32. Out: cx, cy, w, h of the source image
    (fractions or pixels)."""

    name = "darknet_correct_boxes"
    Params = CorrectBoxesParams
    params: CorrectBoxesParams

    def correct(self, d: DarknetDetections, source_hw: tuple[int, int]) -> DarknetDetections:
        h, w = source_hw
        neth, netw = self.params.input_size
        new_w, new_h = letterbox_size(w, h, netw, neth) if self.params.letterbox else (netw, neth)
        f = np.float32
        b = d.boxes.astype(np.float32)
        x = ((b[:, 0].astype(np.float64) - (netw - new_w) / 2.0 / netw) / np.float64(f(new_w) / f(netw))).astype(f)
        y = ((b[:, 1].astype(np.float64) - (neth - new_h) / 2.0 / neth) / np.float64(f(new_h) / f(neth))).astype(f)
        bw = b[:, 2] * (f(netw) / f(new_w))
        bh = b[:, 3] * (f(neth) / f(new_h))
        if not self.params.relative:
            x, bw = x * f(w), bw * f(w)
            y, bh = y * f(h), bh * f(h)
        boxes = np.stack([x, y, bw, bh], axis=1).astype(np.float32)
        fmt = BoxFormat("cxcywh", self.params.relative, False, "source")
        return dataclasses.replace(d, boxes=boxes, format=fmt)

    def __call__(self, preds: Predictions) -> Predictions:
        dets = require_darknet(self, preds)
        out = []
        for i, d in enumerate(dets):
            geo = preds.geometry[i] if i < len(preds.geometry) else None
            if geo is None:
                raise RepliscopeError("'darknet_correct_boxes' needs each image's source size (geometry from 'decode')")
            out.append(self.correct(d, geo.source_hw))
        return with_detections(preds, list(out))


class DarknetNmsParams(OpParams):
    method: Literal["sort", "obj", "agnostic"]
    """``sort``: ``do_nms_sort`` (``detector test`` / ``valid``): per class, sorted by that class's probability,
    suppresses that class only. ``obj``: ``do_nms_obj`` (the Python example ``darknet.py``): sorted by
    objectness, class-agnostic, a suppressed box loses every class. ``agnostic`` (not Darknet's): class-agnostic
    NMS on each box's best class probability, a suppressed box loses every class (the pitfall of a port that
    runs one NMS over all classes)."""
    iou_threshold: Annotated[float, Field(ge=0, le=1)]
    """Darknet's ``nms`` (0.45): a box is suppressed when ``box_iou > iou_threshold``."""


@OPS.register("darknet_nms")
class DarknetNms(PostOp):
    """Darknet's ``do_nms_sort`` / ``do_nms_obj`` exactly: the detection array is permuted as glibc's (stable,
    merge-sort) ``qsort`` with ``nms_comparator`` permutes it, class after class for ``sort``; IoU is Darknet's
    float32 ``box_iou`` on the boxes as they are (after ``darknet_correct_boxes``). Boxes with objectness 0 go
    last first (the swap loop; ``yolo_decode`` never makes them). Out: the same detections, permuted, with
    suppressed probabilities set to 0 (and objectness for ``obj``)."""

    name = "darknet_nms"
    Params = DarknetNmsParams
    params: DarknetNmsParams

    def apply(self, d: DarknetDetections) -> DarknetDetections:
        n = len(d.objectness)
        order = np.arange(n)
        probs = d.probs.copy()
        obj = d.objectness.copy()
        boxes = d.boxes
        # the swap loop moving objectness == 0 to the end (same permutation as Darknet's)
        k = n - 1
        i = 0
        while i <= k:
            if obj[order[i]] == 0:
                order[i], order[k] = order[k], order[i]
                k -= 1
                continue
            i += 1
        total = k + 1
        thresh = np.float32(self.params.iou_threshold)
        if self.params.method == "sort":
            for c in range(probs.shape[1]):
                head = order[:total]
                head = head[np.argsort(-probs[head, c], kind="stable")]
                order[:total] = head
                live = head[probs[head, c] > 0]
                for pos, a in enumerate(live):
                    if probs[a, c] == 0:
                        continue
                    rest = live[pos + 1 :]
                    if rest.size:
                        hit = rest[box_iou(boxes[a], boxes[rest]) > thresh]
                        probs[hit, c] = 0
        else:
            key = obj if self.params.method == "obj" else probs.max(axis=1, initial=0)
            head = order[:total]
            head = head[np.argsort(-key[head], kind="stable")]
            order[:total] = head
            for pos, a in enumerate(head):
                if obj[a] == 0:
                    continue
                rest = head[pos + 1 :]
                rest = rest[obj[rest] != 0]
                if rest.size:
                    hit = rest[box_iou(boxes[a], boxes[rest]) > thresh]
                    obj[hit] = 0
                    probs[hit, :] = 0
        return dataclasses.replace(
            d,
            boxes=boxes[order],
            scores=obj[order],
            classes=d.classes[order],
            probs=probs[order],
            objectness=obj[order],
        )

    def __call__(self, preds: Predictions) -> Predictions:
        return with_detections(preds, [self.apply(d) for d in require_darknet(self, preds)])
