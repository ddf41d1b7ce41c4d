"""Hand-written pre-processing with the mistakes of issue 35, the way a porter writes it (OpenCV / numpy): YOLOv3's
Darknet pre-processing (OpenCV decode, RGB, x / 255, ``letterbox_image`` to 416 x 416 with 0.5 borders) and
EfficientNet-Lite0's. Darknet's own ``resize_image`` comes from :func:`repliscope.ops.darknet.letterbox.resize_image`
(pinned bit for bit against libdarknet in tests/pitfalls/test_yolo_letterbox_variants.py); the letterbox geometry,
the border and every mistake are written out here."""

from __future__ import annotations

import cv2
import numpy as np

from repliscope.ops.darknet.letterbox import resize_image
from tests.diff.pipeline_candidates import MEAN, STD, crop, finish, resized

NET = 416


def _rgb01(path: str) -> np.ndarray:
    bgr = cv2.imread(path, cv2.IMREAD_COLOR)
    assert bgr is not None
    return (cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB).astype(np.float32) / np.float32(255.0)).transpose(2, 0, 1)


def _size(h: int, w: int) -> tuple[int, int]:
    """letterbox_image's (new_w, new_h): the float comparison, then integer division."""
    if np.float32(NET) / np.float32(w) < np.float32(NET) / np.float32(h):
        return NET, (h * NET) // w
    return (w * NET) // h, NET


def _letterbox(chw: np.ndarray, fill: float, resize: str = "darknet") -> np.ndarray:
    _, h, w = chw.shape
    new_w, new_h = _size(h, w)
    if resize == "darknet":
        inner = resize_image(chw, new_w, new_h)
    else:  # the usual port: cv2.resize, INTER_LINEAR, on the float HWC image
        inner = cv2.resize(np.ascontiguousarray(chw.transpose(1, 2, 0)), (new_w, new_h)).transpose(2, 0, 1)
    out = np.full((3, NET, NET), np.float32(fill), np.float32)
    top, left = (NET - new_h) // 2, (NET - new_w) // 2
    out[:, top : top + new_h, left : left + new_w] = inner
    return out


def yolo(path: str) -> np.ndarray:
    """Darknet's detector valid pre-processing (correct)."""
    return _letterbox(_rgb01(path), 0.5)


def yolo_black_border(path: str) -> np.ndarray:
    """Border 0 (np.zeros canvas) instead of 0.5."""
    return _letterbox(_rgb01(path), 0.0)


def yolo_grey_114(path: str) -> np.ndarray:
    """The Model Garden's / Ultralytics' grey 114/255."""
    return _letterbox(_rgb01(path), 114 / 255)


def yolo_cv2_resize(path: str) -> np.ndarray:
    """cv2.resize instead of Darknet's resize_image."""
    return _letterbox(_rgb01(path), 0.5, resize="cv2")


def yolo_border_025(path: str) -> np.ndarray:
    """A border no registered grey has (0.25): the error is confined to the padding band."""
    return _letterbox(_rgb01(path), 0.25)


def lite0_mean_in_uint8(path: str) -> np.ndarray:
    """The mean subtracted on the uint8 bytes (wrapping), then the cast, then the division in float."""
    u8 = crop(resized(path))
    wrapped = (u8.astype(np.int64) - 127) % 256
    return (wrapped.astype(np.float32) / STD).transpose(2, 0, 1)


def lite0_bgr_crop_down(path: str) -> np.ndarray:
    """Two mistakes: BGR, and the crop window one row lower."""
    a = resized(path)
    top, left = round((a.shape[0] - 224) / 2.0) + 1, round((a.shape[1] - 224) / 2.0)
    return finish(a[top : top + 224, left : left + 224][:, :, ::-1])


def lite0_noisy(path: str) -> np.ndarray:
    """Noise that no registered mistake makes (a seeded +-0.3 after the normalisation)."""
    x = ((crop(resized(path)).astype(np.float32) - MEAN) / STD).transpose(2, 0, 1)
    return x + np.random.default_rng(0).uniform(-0.3, 0.3, x.shape).astype(np.float32)


def lite0_bgr_mean_in_uint8(path: str) -> np.ndarray:
    """Two mistakes, one with a degree: BGR, and the mean subtracted on the bytes before the cast."""
    u8 = crop(resized(path))[:, :, ::-1]
    return (((u8.astype(np.int64) - 127) % 256).astype(np.float32) / STD).transpose(2, 0, 1)
