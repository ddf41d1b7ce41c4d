"""The pre-processed training batches both sides get: Darknet's own network input (``letterbox_image`` of
``load_image_color``, no augmentation) and Darknet's truth rows (x, y, w, h relative to the network input after the
letterbox, the class as Darknet's 0..79 index), as ``load_data_detection`` would give them with jitter, flip and
HSV distortion switched off."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from repliscope.errors import RepliscopeError

MAX_BOXES = 90
"""Darknet's yolo layer reads at most ``max_boxes`` = 90 truth rows per image."""


@dataclass(frozen=True)
class Batch:
    """``x`` (B, C, H, W) float32, ``truth`` (B, boxes, 5), ``names`` one per image."""

    x: np.ndarray
    truth: np.ndarray
    names: tuple[str, ...]


def letterbox_truth(
    boxes_xyxy: np.ndarray, classes: np.ndarray, image_wh: tuple[int, int], net_wh: tuple[int, int]
) -> np.ndarray:
    """Boxes in source-image pixels (x0, y0, x1, y1) -> Darknet truth rows on the letterboxed input: the image is
    resized to ``new_w x new_h`` (aspect kept, as ``letterbox_image``) and embedded at ``((w - new_w) / 2, (h -
    new_h) / 2)`` (integer division, as ``embed_image`` is called). Boxes of zero width or height are dropped."""
    img_w, img_h = image_wh
    w, h = net_wh
    if img_w <= 0 or img_h <= 0:
        raise RepliscopeError(f"image size {img_w}x{img_h}")
    if w / img_w < h / img_h:
        new_w, new_h = w, img_h * w // img_w
    else:
        new_h, new_w = h, img_w * h // img_h
    dx, dy = (w - new_w) // 2, (h - new_h) // 2
    rows = []
    for (x0, y0, x1, y1), cls in zip(np.asarray(boxes_xyxy, np.float64), np.asarray(classes), strict=True):
        x0, x1 = np.clip([x0, x1], 0, img_w)
        y0, y1 = np.clip([y0, y1], 0, img_h)
        if x1 <= x0 or y1 <= y0:
            continue
        cx = ((x0 + x1) / 2 / img_w * new_w + dx) / w
        cy = ((y0 + y1) / 2 / img_h * new_h + dy) / h
        rows.append((cx, cy, (x1 - x0) / img_w * new_w / w, (y1 - y0) / img_h * new_h / h, int(cls)))
    return np.asarray(rows[:MAX_BOXES], np.float32).reshape(-1, 5)


def stack(items: list[tuple[str, np.ndarray, np.ndarray]]) -> Batch:
    """(name, x (C, H, W), truth (boxes, 5)) -> one :class:`Batch` (truth padded with zero rows)."""
    if not items:
        raise RepliscopeError("an empty training batch")
    most = max(1, max(len(t) for _, _, t in items))
    truth = np.zeros((len(items), most, 5), np.float32)
    for i, (_, _, t) in enumerate(items):
        truth[i, : len(t)] = t
    return Batch(np.stack([x for _, x, _ in items]).astype(np.float32), truth, tuple(n for n, _, _ in items))


def dataset_batches(dataset: str, batch: int, count: int, net_wh: tuple[int, int]) -> list[Batch]:
    """``count`` batches of ``batch`` images of a detection dataset (COCO category ids mapped to Darknet's 0..79
    with ``coco91_to_80``), each image letterboxed by libdarknet itself. Images without a box are skipped."""
    from repliscope.backends.darknet.reference import letterbox
    from repliscope.datasets import resolve_dataset
    from repliscope.ops.detection.class_map import COCO91_TO_80

    data = resolve_dataset(dataset)
    items: list[tuple[str, np.ndarray, np.ndarray]] = []
    need = batch * count
    for smp in data.samples:
        if len(items) == need:
            break
        if not smp.objects or smp.location is None:
            continue
        objs = [o for o in smp.objects if not o.iscrowd and o.class_id in COCO91_TO_80]
        if not objs:
            continue
        path = Path(smp.location)
        from PIL import Image

        with Image.open(path) as im:
            size = im.size
        truth = letterbox_truth(
            np.asarray([o.box for o in objs]), np.asarray([COCO91_TO_80[o.class_id] for o in objs]), size, net_wh
        )
        if len(truth):
            items.append((smp.id, letterbox(path, *net_wh), truth))
    if len(items) < need:
        raise RepliscopeError(
            f"dataset '{dataset}' has {len(items)} images with boxes; {count} batches of {batch} need {need}"
        )
    return [stack(items[i * batch : (i + 1) * batch]) for i in range(count)]
