"""``synthetic_detection``: small generated images with coloured rectangles of known classes and exact boxes.

Deterministic from ``seed`` (numpy ``default_rng``): each image is H x W (each side 64..128 px) of mid grey
(128, 128, 128) holding 1..3 non-overlapping filled rectangles. The class is the colour: 1 ``red`` (255, 0, 0),
2 ``green`` (0, 255, 0), 3 ``blue`` (0, 0, 255). A rectangle filling the pixel columns ``x1 .. x2 - 1`` and rows
``y1 .. y2 - 1`` has the box ``(x1, y1, x2, y2)`` (continuous pixel edges, integers). Images are PNG-encoded
in memory; no file is written or read.
"""

from __future__ import annotations

import io
from functools import partial

import numpy as np
from PIL import Image

from repliscope.datasets.base import BoxAnnotation, Dataset, Sample
from repliscope.errors import DatasetError

CATEGORIES = {1: "red", 2: "green", 3: "blue"}
COLOURS = {1: (255, 0, 0), 2: (0, 255, 0), 3: (0, 0, 255)}
BACKGROUND = (128, 128, 128)


def _overlaps(box: tuple[int, int, int, int], others: list[tuple[int, int, int, int]]) -> bool:
    x1, y1, x2, y2 = box
    return any(x1 < b[2] and b[0] < x2 and y1 < b[3] and b[1] < y2 for b in others)


def synthetic_image(rng: np.random.Generator) -> tuple[np.ndarray, list[tuple[tuple[int, int, int, int], int]]]:
    """One image (H, W, 3) uint8 RGB and its [(box x1 y1 x2 y2, class id)]."""
    h, w = (int(v) for v in rng.integers(64, 129, size=2))
    img = np.empty((h, w, 3), np.uint8)
    img[:] = BACKGROUND
    objects: list[tuple[tuple[int, int, int, int], int]] = []
    wanted = int(rng.integers(1, 4))
    for _ in range(50):  # rejection sampling of non-overlapping rectangles
        if len(objects) == wanted:
            break
        bw, bh = int(rng.integers(12, w // 2 + 1)), int(rng.integers(12, h // 2 + 1))
        x1, y1 = int(rng.integers(0, w - bw + 1)), int(rng.integers(0, h - bh + 1))
        box = (x1, y1, x1 + bw, y1 + bh)
        if _overlaps(box, [b for b, _ in objects]):
            continue
        cls = int(rng.integers(1, 4))
        img[y1 : y1 + bh, x1 : x1 + bw] = COLOURS[cls]
        objects.append((box, cls))
    return img, objects


def _png(img: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format="PNG")
    return buf.getvalue()


def load_synthetic_detection(
    *, seed: int = 0, num_images: int = 16, name: str | None = None, limit: int | None = None
) -> Dataset:
    """``num_images`` generated images (ids ``synthetic_000.png`` ...), image ids 1..N, categories red/green/blue."""
    if num_images < 1:
        raise DatasetError(f"num_images must be a positive integer, got {num_images}")
    if limit is not None and limit < 1:
        raise DatasetError(f"limit must be a positive integer, got {limit}")
    rng = np.random.default_rng(seed)
    samples = []
    for i in range(num_images):
        img, objects = synthetic_image(rng)
        boxes = tuple(
            BoxAnnotation(
                box=(float(x1), float(y1), float(x2), float(y2)), class_id=cls, area=float((x2 - x1) * (y2 - y1))
            )
            for (x1, y1, x2, y2), cls in objects
        )
        samples.append(
            Sample(
                id=f"synthetic_{i:03d}.png",
                label=None,
                read=partial(bytes, _png(img)),
                location=f"generated (seed {seed}, image {i})",
                objects=boxes,
                image_id=i + 1,
                size_hw=(img.shape[0], img.shape[1]),
            )
        )
    kept = samples[:limit] if limit is not None else samples
    n_boxes = sum(len(s.objects or ()) for s in kept)
    return Dataset(
        name=name or "synthetic_detection",
        samples=kept,
        license="generated (no third-party content)",
        label_rule="generated boxes",
        origin=f"repliscope synthetic_detection seed={seed}",
        description=f"{len(kept)} generated images (64-128 px), {n_boxes} coloured rectangles, "
        f"classes {', '.join(CATEGORIES.values())}; seed {seed}",
        categories=dict(CATEGORIES),
    )
