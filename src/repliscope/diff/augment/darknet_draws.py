"""The random draws of Darknet's detection augmentation, replayed from the C library's ``rand()`` stream.

``load_data_detection`` (pjreddie darknet ``src/data.c``) reads ``rand()`` in a fixed order per image:
``get_random_paths`` (``rand() % m``), the jitter (``rand_uniform(-dw, dw)``, ``rand_uniform(-dh, dh)``), the
placement (``rand_uniform(0, w - nw)``, ``rand_uniform(0, h - nh)``), the HSV distortion
(``rand_uniform(-hue, hue)``, ``rand_scale(saturation)``, ``rand_scale(exposure)``: each ``rand_uniform(1, s)``
then ``rand() % 2`` for s or 1/s), the flip (``rand() % 2``) and ``randomize_boxes`` (``rand() % n`` per box).
:func:`darknet_draws` replays that order with float32 arithmetic as the C code does it, turning a stream of
``rand()`` integers into explicit :class:`DarknetDraws`, the parameters every side of an augmentation diff gets.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

RAND_MAX = 2147483647
"""glibc's RAND_MAX (libdarknet reads glibc's ``rand()``)."""

f32 = np.float32


@dataclass(frozen=True)
class AugmentConfig:
    """The augmentation settings of a Darknet cfg: ``[net] width/height/hue/saturation/exposure`` and the LAST
    layer's ``jitter`` (``train_detector`` reads ``net->layers[net->n - 1].jitter``)."""

    width: int
    height: int
    jitter: float
    hue: float
    saturation: float
    exposure: float


@dataclass(frozen=True)
class DarknetDraws:
    """One image's draws, as the ops receive them: placement (``nw``, ``nh``, ``dx``, ``dy`` in network pixels,
    float: ``place_image`` truncates them to int, the boxes use them as they are), HSV distortion (``hue`` shift,
    ``saturation`` and ``exposure`` factors), ``flip`` and the box order ``randomize_boxes`` leaves
    (``box_order[i]``: the label-file row at position i)."""

    nw: float
    nh: float
    dx: float
    dy: float
    hue: float
    saturation: float
    exposure: float
    flip: bool
    box_order: tuple[int, ...]

    def params(self) -> dict[str, Any]:
        return asdict(self)


def _uniform(rand: Callable[[], int], lo: float, hi: float) -> np.float32:
    """``rand_uniform`` (utils.c): ``((float)rand()/RAND_MAX * (max - min)) + min`` in float32, bounds swapped
    when max < min."""
    a, b = f32(lo), f32(hi)
    if b < a:
        a, b = b, a
    return f32(f32(f32(rand()) / f32(RAND_MAX)) * f32(b - a)) + a


def _scale(rand: Callable[[], int], s: float) -> np.float32:
    """``rand_scale``: ``rand_uniform(1, s)``, kept when ``rand() % 2`` else its reciprocal (1./scale in double,
    returned as float)."""
    scale = _uniform(rand, 1.0, s)
    if rand() % 2:
        return scale
    return f32(1.0 / float(scale))


def darknet_draws(
    rand: Callable[[], int], cfg: AugmentConfig, orig_w: int, orig_h: int, n_boxes: int, paths: int = 1
) -> DarknetDraws:
    """Replay one image's draws from ``rand`` (the next ``rand()`` integer each call) for an ``orig_w`` x
    ``orig_h`` image with ``n_boxes`` label rows, ``paths`` being the list ``get_random_paths`` picks from."""
    rand() % paths  # get_random_paths: the image index (one image here)
    dw = f32(f32(cfg.jitter) * f32(orig_w))
    dh = f32(f32(cfg.jitter) * f32(orig_h))
    num = f32(f32(orig_w) + _uniform(rand, float(-dw), float(dw)))
    den = f32(f32(orig_h) + _uniform(rand, float(-dh), float(dh)))
    new_ar = f32(num / den)
    scale = f32(1.0)
    if new_ar < 1:
        nh = f32(scale * f32(cfg.height))
        nw = f32(nh * new_ar)
    else:
        nw = f32(scale * f32(cfg.width))
        nh = f32(nw / new_ar)
    dx = _uniform(rand, 0.0, float(f32(f32(cfg.width) - nw)))
    dy = _uniform(rand, 0.0, float(f32(f32(cfg.height) - nh)))
    dhue = _uniform(rand, -cfg.hue, cfg.hue)
    dsat = _scale(rand, cfg.saturation)
    dexp = _scale(rand, cfg.exposure)
    flip = bool(rand() % 2)
    order = list(range(n_boxes))
    for i in range(n_boxes):  # randomize_boxes: swap i with rand() % n
        j = rand() % n_boxes
        order[i], order[j] = order[j], order[i]
    return DarknetDraws(
        nw=float(nw),
        nh=float(nh),
        dx=float(dx),
        dy=float(dy),
        hue=float(dhue),
        saturation=float(dsat),
        exposure=float(dexp),
        flip=flip,
        box_order=tuple(order),
    )


class GlibcRand:
    """glibc's ``rand()`` after ``srand(seed)`` (the TYPE_3 additive feedback generator of ``random_r.c``), in
    Python: the stream libdarknet reads, reproducible on any machine (pinned against the C library in the tests).
    Call the instance for the next integer in [0, RAND_MAX]."""

    def __init__(self, seed: int) -> None:
        seed = seed & 0xFFFFFFFF or 1
        r = [0] * 34
        r[0] = seed - 2**32 if seed >= 2**31 else seed  # srandom_r keeps ``int32_t word = seed``
        for i in range(1, 31):
            hi = abs(r[i - 1]) // 127773 * (1 if r[i - 1] >= 0 else -1)  # C division truncates toward zero
            lo = r[i - 1] - 127773 * hi
            word = 16807 * lo - 2836 * hi
            r[i] = word + 2147483647 if word < 0 else word
        for i in range(31, 34):
            r[i] = r[i - 31]
        self._r = [x & 0xFFFFFFFF for x in r]
        for _ in range(310):  # glibc discards the first 310 outputs
            self._next()

    def _next(self) -> int:
        r = self._r
        value = (r[-31] + r[-3]) & 0xFFFFFFFF
        r.append(value)
        del r[0]
        return value >> 1

    def __call__(self) -> int:
        return self._next()
