"""Darknet's own pre- and post-processing through libdarknet, the reference the repliscope ops are pinned to:
``load_image_color`` + ``letterbox_image`` (the network input of ``detector test/valid``) and
``get_network_boxes`` + ``do_nms_sort`` / ``do_nms_obj`` (their detections)."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from repliscope.backends.darknet import lib as dn
from repliscope.backends.darknet.runner import DarknetRunner


def _image_array(img: dn.IMAGE) -> np.ndarray:
    return np.ctypeslib.as_array(img.data, shape=(img.c, img.h, img.w)).copy()


def load_image(path: Path) -> np.ndarray:
    """``load_image_color(path, 0, 0)``: float32 CHW RGB in [0, 1] as Darknet decodes it (OpenCV ``imread``)."""
    lib = dn.load_library()
    img = lib.load_image_color(str(path).encode(), 0, 0)
    try:
        return _image_array(img)
    finally:
        lib.free_image(img)


def letterbox(path: Path, width: int, height: int) -> np.ndarray:
    """``letterbox_image(load_image_color(path), w, h)``: the exact network input (3, h, w) float32."""
    lib = dn.load_library()
    img = lib.load_image_color(str(path).encode(), 0, 0)
    boxed = lib.letterbox_image(img, width, height)
    try:
        return _image_array(boxed)
    finally:
        lib.free_image(boxed)
        lib.free_image(img)


def letterbox_array(chw: np.ndarray, width: int, height: int) -> np.ndarray:
    """``letterbox_image`` of an image given as float32 CHW (any values): Darknet's resize + embed alone."""
    lib = dn.load_library()
    c, h, w = chw.shape
    data = np.ascontiguousarray(chw, dtype=np.float32)
    img = dn.IMAGE(w, h, c, data.ctypes.data_as(ctypes.POINTER(ctypes.c_float)))
    boxed = lib.letterbox_image(img, width, height)
    try:
        return _image_array(boxed)
    finally:
        lib.free_image(boxed)


@dataclass(frozen=True)
class DarknetDetection:
    """One (box, class) pair with a non-zero probability after NMS: ``box`` cx, cy, w, h as Darknet holds it
    (pixels of the source image when ``relative`` is 0), ``prob`` = objectness x class probability."""

    box: tuple[float, float, float, float]
    class_id: int
    prob: float
    objectness: float


def detect(
    runner: DarknetRunner,
    network_input: np.ndarray,
    image_hw: tuple[int, int],
    *,
    thresh: float,
    hier_thresh: float = 0.5,
    nms: float = 0.45,
    method: Literal["sort", "obj"] = "sort",
    relative: int = 0,
) -> list[DarknetDetection]:
    """Run ``network_input`` (3, H, W) and return Darknet's detections exactly as ``detector valid``
    (``method='sort'``) or the Python example (``'obj'``) get them, in Darknet's array order."""
    runner.load()
    lib = dn.load_library()
    runner._predict(network_input)
    num = ctypes.c_int(0)
    h, w = image_hw
    dets = lib.get_network_boxes(runner._net, w, h, thresh, hier_thresh, None, relative, ctypes.byref(num))
    try:
        n = num.value
        classes = dets[0].classes if n else 0
        if nms and n:
            (lib.do_nms_sort if method == "sort" else lib.do_nms_obj)(dets, n, classes, nms)
        out = []
        for i in range(n):
            d = dets[i]
            b = d.bbox
            for k in range(classes):
                if d.prob[k] > 0:
                    out.append(DarknetDetection((b.x, b.y, b.w, b.h), k, float(d.prob[k]), float(d.objectness)))
        return out
    finally:
        lib.free_detections(dets, num.value)
