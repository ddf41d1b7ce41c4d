"""``darknet_detection``: Darknet's detection training augmentation (``load_data_detection``) as four ordered ops,
its draws replayed from glibc's ``rand()`` (:mod:`.darknet_draws`) and its ops run by libdarknet itself
(:mod:`repliscope.backends.darknet.augment`).

Ops: ``place`` (jitter + aspect placement on a 0.5 canvas, bilinear), ``distort`` (HSV), ``flip`` (image) and
``truth`` (the label rows: ``randomize_boxes`` order, ``correct_boxes`` scale/shift/mirror/clip, tiny boxes
dropped). Tolerances (absolute, values in [0, 1]): ``place`` 2 * eps32 * max(image side) (libdarknet is built with
``-Ofast``, which computes the sample coordinate ``x / w * im.w`` in an order Python cannot see: one rounding step of
a coordinate moves a value by at most that step times the local slope, <= 1); ``distort`` and ``flip`` 4 * eps32;
``truth`` 4 * eps32 (a box edge).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from repliscope.convert.darknet_cfg import DarknetFormatError, load_network_cfg, read_cfg
from repliscope.diff.augment.contract import AUGMENTATIONS, AugmentOp, AugmentPipeline, Drawn
from repliscope.diff.augment.darknet_draws import AugmentConfig, GlibcRand, darknet_draws

EPS32 = float(np.finfo(np.float32).eps)
_ORIGIN = "libdarknet load_data_detection (src/data.c), Debian darknet 0.0.0+git20180914"

OPS = (
    AugmentOp("place", "image", ("nw", "nh", "dx", "dy", "out_w", "out_h"), "place_image (src/image.c)",
              "jitter + aspect: resize to (int)nw x (int)nh, bilinear, at ((int)dx, (int)dy) on a 0.5 canvas"),
    AugmentOp("distort", "image", ("hue", "saturation", "exposure"), "distort_image (src/image.c)",
              "RGB -> HSV, S *= saturation, V *= exposure, H += hue (wrapped), HSV -> RGB, clip [0, 1]"),
    AugmentOp("flip", "image", ("flip",), "flip_image (src/image.c)", "mirror left-right when flip"),
    AugmentOp("truth", "boxes", ("box_order", "nw", "nh", "dx", "dy", "flip", "out_w", "out_h"),
              "fill_truth_detection -> randomize_boxes, correct_boxes (src/data.c)",
              "rows reordered, scaled, shifted, mirrored, clipped; boxes < 0.001 wide/high dropped; 90 kept"),
)  # fmt: skip


def _number(sections: list[Any], index: int, key: str, default: float, where: Path) -> float:
    raw = sections[index].options.get(key)
    if raw is None:
        return default
    try:
        return float(raw)
    except ValueError:
        raise DarknetFormatError(
            f"{where}:{sections[index].option_lines.get(key, sections[index].line)}: {key}={raw!r} is not a number"
        ) from None


def augment_config(cfg: Path) -> AugmentConfig:
    """The cfg's augmentation settings as ``train_detector`` reads them: ``[net]`` width, height, hue (default 0),
    saturation and exposure (default 1), and the LAST layer's jitter (yolo default .2)."""
    net = load_network_cfg(cfg)  # validates the whole cfg as libdarknet would parse it
    sections = read_cfg(cfg)
    return AugmentConfig(
        width=net.width,
        height=net.height,
        jitter=_number(sections, len(sections) - 1, "jitter", 0.2, cfg),
        hue=_number(sections, 0, "hue", 0.0, cfg),
        saturation=_number(sections, 0, "saturation", 1.0, cfg),
        exposure=_number(sections, 0, "exposure", 1.0, cfg),
    )


@AUGMENTATIONS.register("darknet_detection")
class DarknetDetection(AugmentPipeline):
    name = "darknet_detection"
    ops = OPS
    origin = _ORIGIN
    pin = "every op pinned against libdarknet's whole load_data_detection (tests/diff/augment)"

    def __init__(self, config: AugmentConfig) -> None:
        self.config = config

    @classmethod
    def from_model_config(cls, config_path: Path) -> DarknetDetection:
        return cls(augment_config(config_path))

    def decode(self, data: bytes, suffix: str) -> np.ndarray:
        from repliscope.backends.darknet.augment import load_image

        return load_image(data, suffix)

    def draw(self, image: np.ndarray, boxes: np.ndarray, seed: int, sample: str) -> Drawn:
        h, w = image.shape[:2]
        d = darknet_draws(GlibcRand(seed), self.config, w, h, len(boxes))
        out = {"out_w": self.config.width, "out_h": self.config.height}
        place = {"nw": d.nw, "nh": d.nh, "dx": d.dx, "dy": d.dy}
        return Drawn(
            sample=sample,
            seed=seed,
            image=image,
            boxes=boxes,
            params={
                "place": {**place, **out},
                "distort": {"hue": d.hue, "saturation": d.saturation, "exposure": d.exposure},
                "flip": {"flip": d.flip},
                "truth": {"box_order": d.box_order, **place, "flip": d.flip, **out},
            },
        )

    def original(self, op: str) -> Callable[..., np.ndarray]:
        from repliscope.backends.darknet import augment

        fns: dict[str, Callable[..., np.ndarray]] = {
            "place": augment.place,
            "distort": augment.distort,
            "flip": augment.flip,
            "truth": augment.truth,
        }
        return fns[op]

    def tolerance(self, op: AugmentOp, image: np.ndarray) -> float:
        if op.name == "place":
            return 2 * EPS32 * max(image.shape[:2])
        return 4 * EPS32

    def describe(self) -> dict[str, Any]:
        return {"pipeline": self.name, "origin": self.origin, "config": vars(self.config)}
