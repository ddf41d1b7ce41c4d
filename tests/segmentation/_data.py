"""A tiny VOC-style segmentation folder written on demand: 64x64 images of red / green rectangles aligned to the
2x2 grid (the colour segmenter is exact on them), palette PNG masks with a void border ring, a class map."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

GREY = (128, 128, 128)
RECTS = {  # stem -> [(class id, y1, x1, y2, x2)] on a 64 x 64 image (exclusive ends, even coordinates)
    "a": [(1, 4, 6, 20, 30), (2, 30, 32, 60, 60)],
    "b": [(1, 10, 10, 50, 50)],
    "c": [(2, 0, 0, 64, 16), (1, 40, 40, 58, 62)],
    "d": [],
}
COLOURS = {1: (255, 0, 0), 2: (0, 255, 0)}


def label_map(stem: str, size: int = 64) -> np.ndarray:
    out = np.zeros((size, size), np.uint8)
    for cls, y1, x1, y2, x2 in RECTS[stem]:
        out[y1:y2, x1:x2] = cls
    return out


def write_voc(root: Path, *, void_ring: bool = True, class_map: bool = True) -> Path:
    """The folder: JPEGImages/*.png-encoded-as-.jpg names (lossless PNG bytes), SegmentationClass/*.png (palette),
    class_map.txt (0 background, 1 red, 2 green)."""
    (root / "JPEGImages").mkdir(parents=True)
    (root / "SegmentationClass").mkdir()
    for stem in RECTS:
        labels = label_map(stem)
        rgb = np.full((64, 64, 3), GREY, np.uint8)
        for cls, colour in COLOURS.items():
            rgb[labels == cls] = colour
        Image.fromarray(rgb).save(root / "JPEGImages" / f"{stem}.jpg", format="PNG")  # lossless; PIL sniffs it
        mask = labels.copy()
        if void_ring:
            mask[0, :] = 255  # one void row: never scored
        im = Image.fromarray(mask, mode="P")
        im.putpalette([0, 0, 0, 128, 0, 0, 0, 128, 0] + [0, 0, 0] * 252 + [224, 224, 192])
        im.save(root / "SegmentationClass" / f"{stem}.png")
    if class_map:
        (root / "class_map.txt").write_text("0 background\n1 red\n2 green\n")
    return root
