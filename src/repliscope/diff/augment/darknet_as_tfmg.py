"""Darknet's detection augmentation written in the Model Garden's op contract (``tfmg_yolo_input``): the candidate
that asks "does the Model Garden's ``yolo_input`` augment as Darknet does?" (``--augment-pipeline tfmg_yolo_input
--augment repliscope.diff.augment.darknet_as_tfmg:YOLOV3_TINY``).

Shared draws (op by op, where the parametrisation is the same): each op is Darknet's own arithmetic
(:mod:`.darknet_numpy`, pinned bit for bit against libdarknet) given the Model Garden's draws:

- ``flip``: ``flip_image``;
- ``jitter``: the Model Garden's crop/pad rectangle drawn as Darknet would place it: the whole image resized to
  ``out_w * W / (W - pleft - pright)`` x ``out_h * H / (H - ptop - pbottom)`` and put at ``(-pleft, -ptop)`` scaled
  the same way (``place_image``: bilinear without the half-pixel offset, truncated integer placement, 0.5 canvas);
- ``affine``: Darknet has no affine warp: the identity, valid only for the degenerate draws the Darknet-style
  parser makes (no angle, no perspective, scale 1, translation 0.5); other draws are refused;
- ``boxes``: the flip, then ``correct_boxes`` on that placement, Darknet's filter (boxes under 0.001 wide or high
  dropped, 90 kept) instead of the Model Garden's ``area_thresh``;
- ``hsv``: ``distort_image`` with hue, saturation and exposure = the Model Garden's hue, saturation, brightness.

Own draws (``augment``, the distribution comparison): Darknet's own draws (glibc's ``rand()`` after
``srand(seed)``, :mod:`.darknet_draws`) with yolov3-tiny.cfg's settings, its ops reported in the Model Garden's
order (its flip first: the flip commutes with the placement's distribution and with the HSV distortion).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from repliscope.diff.augment import darknet_numpy as dn
from repliscope.diff.augment.darknet_draws import AugmentConfig, GlibcRand, darknet_draws
from repliscope.errors import RepliscopeError


def _placement(
    width: int, height: int, pleft: float, pright: float, ptop: float, pbottom: float, out_w: int, out_h: int
) -> dict[str, float]:
    sw, sh = width - pleft - pright, height - ptop - pbottom
    return {
        "nw": out_w * width / sw,
        "nh": out_h * height / sh,
        "dx": -pleft * out_w / sw,
        "dy": -ptop * out_h / sh,
    }


class DarknetInModelGardenOps:
    """The candidate object (module doc); ``config``: the Darknet cfg's augmentation settings (own draws)."""

    def __init__(self, config: AugmentConfig) -> None:
        self.config = config

    @staticmethod
    def flip(image: np.ndarray, *, flip: bool) -> np.ndarray:
        return dn.flip(image, flip=flip)

    @staticmethod
    def jitter(
        image: np.ndarray, *, pleft: float, pright: float, ptop: float, pbottom: float, out_w: int, out_h: int
    ) -> np.ndarray:
        h, w = image.shape[:2]
        return dn.place(image, **_placement(w, h, pleft, pright, ptop, pbottom, out_w, out_h), out_w=out_w, out_h=out_h)

    @staticmethod
    def affine(
        image: np.ndarray, *, angle: float, px: float, py: float, scale: float, tx: float, ty: float, **_: Any
    ) -> np.ndarray:
        if (angle, px, py, scale, tx, ty) != (0.0, 0.0, 0.0, 1.0, 0.5, 0.5):
            raise RepliscopeError(
                f"Darknet has no affine warp: only the identity draws (angle 0, perspective 0, scale 1, translation "
                f"0.5) map to it, got angle={angle}, px={px}, py={py}, scale={scale}, tx={tx}, ty={ty}"
            )
        return image

    @staticmethod
    def boxes(
        boxes: np.ndarray,
        *,
        flip: bool,
        pleft: float,
        pright: float,
        ptop: float,
        pbottom: float,
        width: int,
        height: int,
        out_w: int,
        out_h: int,
        **_: Any,
    ) -> np.ndarray:
        rows = np.asarray(boxes, np.float32).reshape(-1, 5).copy()
        if flip:
            rows[:, 0] = 1 - rows[:, 0]
        place = _placement(width, height, pleft, pright, ptop, pbottom, out_w, out_h)
        return dn.truth(rows, box_order=tuple(range(len(rows))), **place, flip=False, out_w=out_w, out_h=out_h)

    @staticmethod
    def hsv(image: np.ndarray, *, hue: float, saturation: float, brightness: float) -> np.ndarray:
        return dn.distort(image, hue=hue, saturation=saturation, exposure=brightness)

    def augment(self, image: np.ndarray, boxes: np.ndarray, seed: int) -> dict[str, np.ndarray]:
        h, w = image.shape[:2]
        d = darknet_draws(GlibcRand(seed), self.config, w, h, len(boxes))
        flipped = dn.flip(image, flip=d.flip)
        rows = np.asarray(boxes, np.float32).reshape(-1, 5).copy()
        if d.flip:
            rows[:, 0] = 1 - rows[:, 0]
        ow, oh = self.config.width, self.config.height
        placed = dn.place(flipped, nw=d.nw, nh=d.nh, dx=d.dx, dy=d.dy, out_w=ow, out_h=oh)
        boxes_out = dn.truth(
            rows, box_order=d.box_order, nw=d.nw, nh=d.nh, dx=d.dx, dy=d.dy, flip=False, out_w=ow, out_h=oh
        )
        return {
            "flip": flipped,
            "jitter": placed,
            "affine": placed,
            "boxes": boxes_out,
            "hsv": dn.distort(placed, hue=d.hue, saturation=d.saturation, exposure=d.exposure),
        }


YOLOV3_TINY = DarknetInModelGardenOps(
    AugmentConfig(width=416, height=416, jitter=0.3, hue=0.1, saturation=1.5, exposure=1.5)
)
"""yolov3-tiny.cfg's settings ([net] 416 x 416, hue .1, saturation 1.5, exposure 1.5; the last yolo layer's jitter
.3)."""
