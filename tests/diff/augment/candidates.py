"""Augmentation candidates for tests/diff/augment: repliscope's numpy port (passes) and ports that make exactly one
mistake each, as a user's re-implementation might."""

from __future__ import annotations

from typing import Any

import numpy as np

from repliscope.diff.augment import darknet_numpy as port
from repliscope.diff.augment.darknet_draws import AugmentConfig

CONFIG = AugmentConfig(width=416, height=416, jitter=0.3, hue=0.1, saturation=1.5, exposure=1.5)

good = {"place": port.place, "distort": port.distort, "flip": port.flip, "truth": port.truth}


def _place_black(image: np.ndarray, **p: Any) -> np.ndarray:
    out = port.place(image, **p)
    out[out == np.float32(0.5)] = 0.0  # letterbox fill 0 instead of Darknet's 0.5
    return out


def _distort_swapped(image: np.ndarray, *, hue: float, saturation: float, exposure: float) -> np.ndarray:
    return port.distort(image, hue=hue, saturation=exposure, exposure=saturation)  # scales swapped


def _flip_always(image: np.ndarray, *, flip: bool) -> np.ndarray:
    return port.flip(image, flip=True)  # the drawn flag ignored


def _truth_unordered(boxes: np.ndarray, *, box_order: tuple[int, ...], **p: Any) -> np.ndarray:
    return port.truth(boxes, box_order=tuple(range(len(boxes))), **p)  # randomize_boxes' order not applied


fill_black = {**good, "place": _place_black}
swapped_scales = {**good, "distort": _distort_swapped}
flip_always = {**good, "flip": _flip_always}
truth_unordered = {**good, "truth": _truth_unordered}
raises = {**good, "distort": lambda image, **p: (_ for _ in ()).throw(RuntimeError("boom"))}
nan_output = {**good, "flip": lambda image, **p: np.full_like(image, np.nan)}
wrong_shape = {**good, "place": lambda image, **p: np.zeros((10, 10, 3), np.float32)}
missing_op = {"place": port.place, "distort": port.distort}


def _own_draws(seed: int, image: np.ndarray, n_boxes: int, flip_p: float, jitter: float) -> dict[str, Any]:
    """Darknet's distributions drawn with numpy's generator (not glibc's rand)."""
    rng = np.random.default_rng(seed)
    h, w = image.shape[:2]
    dw, dh = jitter * w, jitter * h
    new_ar = (w + rng.uniform(-dw, dw)) / (h + rng.uniform(-dh, dh))
    if new_ar < 1:
        nw, nh = CONFIG.height * new_ar, float(CONFIG.height)
    else:
        nw, nh = float(CONFIG.width), CONFIG.width / new_ar
    dx, dy = rng.uniform(0, CONFIG.width - nw), rng.uniform(0, CONFIG.height - nh)

    def scale(s: float) -> float:
        v = rng.uniform(1, s)
        return v if rng.integers(2) else 1 / v

    hue, sat, exp = rng.uniform(-CONFIG.hue, CONFIG.hue), scale(CONFIG.saturation), scale(CONFIG.exposure)
    flip = bool(rng.random() < flip_p)
    order = tuple(int(i) for i in rng.permutation(n_boxes))
    return {"nw": nw, "nh": nh, "dx": dx, "dy": dy, "hue": hue, "sat": sat, "exp": exp, "flip": flip, "order": order}


def _augment(flip_p: float, jitter: float) -> Any:
    def augment(image: np.ndarray, boxes: np.ndarray, seed: int) -> dict[str, np.ndarray]:
        d = _own_draws(seed, image, len(boxes), flip_p, jitter)
        place = {"nw": d["nw"], "nh": d["nh"], "dx": d["dx"], "dy": d["dy"], "out_w": 416, "out_h": 416}
        a = port.place(image, **place)
        b = port.distort(a, hue=d["hue"], saturation=d["sat"], exposure=d["exp"])
        c = port.flip(b, flip=d["flip"])
        t = port.truth(boxes, box_order=d["order"], flip=d["flip"], **place)
        return {"place": a, "distort": b, "flip": c, "truth": t}

    return augment


own_good = {"augment": _augment(0.5, 0.3)}
own_never_flips = {"augment": _augment(0.0, 0.3)}
own_small_jitter = {"augment": _augment(0.5, 0.05)}
