"""Same picture, other units: a candidate array that is the manifest's up to a per-channel scale and offset.

A pipeline port often holds the right image in other units — 0–255 where the manifest has 0–1, [-1, 1] where it
has [0, 1], or already mean/std normalised — and often ALSO differs in content (another decoder, another resize).
Compared value by value that reads "max |err| 254". :func:`find_units` fits, per channel, ``candidate = a *
manifest + b`` by least squares and calls it a units difference when the map is not the identity (some ``|a - 1|
> SCALE_MARGIN``), every ``a`` is positive, and the map explains the error (the mean |residual| after it is at most
:data:`EXPLAINED` of the mean |error| before). It names the scale (:func:`describe`) and measures the content error
left once the map is undone, in the manifest's units.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SCALE_MARGIN = 0.05
"""A scale further than 5 % from 1 on some channel is another unit, not a rounding or content difference."""
EXPLAINED = 0.1
"""The map explains the difference when the mean |error| left after it is at most 10 % of the mean |error|."""
SNAP = 0.02
"""A fitted scale / offset within 2 % of a named one (255, 1/255, 2 and -1, ...) is named after it."""
NAMED: tuple[tuple[float, float, str], ...] = (
    (255.0, 0.0, "0–255 where the manifest has 0–1 (yours = 255 x the manifest's)"),
    (1 / 255, 0.0, "0–1 where the manifest has 0–255 (yours = the manifest's / 255)"),
    (2.0, -1.0, "[-1, 1] where the manifest has [0, 1] (yours = 2 x the manifest's - 1)"),
    (0.5, 0.5, "[0, 1] where the manifest has [-1, 1] (yours = (the manifest's + 1) / 2)"),
    (2 / 255, -1.0, "[-1, 1] where the manifest has 0–255 (yours = the manifest's / 127.5 - 1)"),
    (127.5, 127.5, "0–255 where the manifest has [-1, 1] (yours = 127.5 x (the manifest's + 1))"),
)
"""Units conversions found in ports, as (scale, offset, words)."""


@dataclass(frozen=True)
class Units:
    """``candidate ~= scale * manifest + offset`` per channel (channel axis first)."""

    scale: np.ndarray
    offset: np.ndarray
    description: str
    content_max_abs_error: float
    """max |undo(candidate) - manifest|: what differs once the units are undone, in the manifest's units."""
    raw_max_abs_error: float


def _channels_first(a: np.ndarray, chw: bool) -> np.ndarray:
    """(C, N) float64 view of an image (CHW, HWC) or of any other array as one channel."""
    x = np.asarray(a, dtype=np.float64)
    if x.ndim == 3:
        x = x if chw else x.transpose(2, 0, 1)
        return x.reshape(x.shape[0], -1)
    return x.reshape(1, -1)


def undo(candidate: np.ndarray, units: Units, chw: bool) -> np.ndarray:
    """``candidate`` in the manifest's units: ``(candidate - offset) / scale`` per channel, in the input's shape."""
    c = np.asarray(candidate, dtype=np.float64)
    if c.ndim == 3:
        shape = (-1, 1, 1) if chw else (1, 1, -1)
        return (c - units.offset.reshape(shape)) / units.scale.reshape(shape)
    return (c - float(units.offset[0])) / float(units.scale[0])


def find_units(reference: np.ndarray, candidate: np.ndarray, chw: bool) -> Units | None:
    """The per-channel map from ``reference`` (the manifest's array) to ``candidate`` (same shape) when it is a
    units difference (see the module docstring), else None."""
    if np.shape(reference) != np.shape(candidate) or np.size(reference) < 2:
        return None
    r, c = _channels_first(reference, chw), _channels_first(candidate, chw)
    if not (np.all(np.isfinite(r)) and np.all(np.isfinite(c))):
        return None
    scales, offsets = [], []
    for rr, cc in zip(r, c, strict=True):
        if float(rr.std()) == 0.0:
            return None
        a, b = np.polyfit(rr, cc, 1)
        scales.append(float(a))
        offsets.append(float(b))
    scale, offset = np.array(scales), np.array(offsets)
    if np.any(scale <= 0) or np.all(np.abs(scale - 1.0) <= SCALE_MARGIN):
        return None
    before = float(np.mean(np.abs(c - r)))
    left = float(np.mean(np.abs(c - (scale[:, None] * r + offset[:, None]))))
    if before == 0.0 or left > EXPLAINED * before:
        return None
    span = float(np.ptp(r))
    named = _named(scale, offset, span)
    if named is not None:  # undo the named conversion exactly (the fit carries the content difference too)
        scale, offset = np.full_like(scale, named[0]), np.full_like(offset, named[1])
    restored = (c - offset[:, None]) / scale[:, None]
    return Units(
        scale=scale,
        offset=offset,
        description=describe(np.array(scales), np.array(offsets), span),
        content_max_abs_error=float(np.max(np.abs(restored - r))),
        raw_max_abs_error=float(np.max(np.abs(c - r))),
    )


def describe(scale: np.ndarray, offset: np.ndarray, span: float) -> str:
    """Words for ``candidate = scale * manifest + offset``: a named conversion when every channel's fit is within
    :data:`SNAP` of it, else the fitted constants, read as mean/std when they differ per channel."""
    named = _named(scale, offset, span)
    if named is not None:
        return f"values in other units: {named[2]}; fitted scale {_fmt(scale)}, offset {_fmt(offset)}"
    if np.allclose(scale, scale[0], rtol=1e-3) and np.allclose(offset, offset[0], rtol=1e-3, atol=1e-6 * span):
        return (
            f"values in other units: yours = {scale[0]:.4g} x the manifest's {'+' if offset[0] >= 0 else '-'} "
            f"{abs(offset[0]):.4g}"
        )
    mean, std = -offset / scale, 1.0 / scale
    return (
        f"values in other units, per channel: scale {_fmt(scale)}, offset {_fmt(offset)} — mean/std normalised "
        f"(yours = (manifest - mean) / std with mean {_fmt(mean)}, std {_fmt(std)} in the manifest's units)"
    )


def _named(scale: np.ndarray, offset: np.ndarray, span: float) -> tuple[float, float, str] | None:
    """The entry of :data:`NAMED` every channel's fit is within :data:`SNAP` of (the offset judged against the
    candidate's span), or None."""
    for a, b, words in NAMED:
        near_a = np.all(np.abs(scale / a - 1.0) <= SNAP)
        near_b = np.all(np.abs(offset - b) <= SNAP * max(abs(a) * span, 1e-12))
        if near_a and near_b:
            return a, b, words
    return None


def _fmt(v: np.ndarray) -> str:
    return "[" + ", ".join(f"{x:.4g}" for x in v) + "]"
