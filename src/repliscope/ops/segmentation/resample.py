"""Resampling a segmentation map (H, W, C) or label map (H, W) onto the decoded image's pixels.

Separable, axis by axis: every target pixel centre gets one continuous sample position per axis in the map's
pixel-centre coordinates (:func:`sample_positions`); bilinear reads the two neighbours (clamped at the edges,
like ``cv2.resize``'s replicate border), nearest the closest one (``floor(u + 0.5)``, clamped).
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from repliscope.ops.base import Geometry

Sampling = Literal["half_pixel", "corner_aligned"]


def stretch_positions(n_map: int, n_target: int, sampling: Sampling) -> np.ndarray:
    """Positions, in map pixel centres, of the ``n_target`` target pixels when the map covers the whole target:
    half-pixel ``(t + 0.5) * n_map / n_target - 0.5`` (``cv2.resize``, ``align_corners=False``) or
    corner-aligned ``t * (n_map - 1) / (n_target - 1)`` (``align_corners=True``; first and last centres meet)."""
    t = np.arange(n_target, dtype=np.float64)
    if sampling == "half_pixel":
        return (t + 0.5) * (n_map / n_target) - 0.5
    return t * ((n_map - 1) / (n_target - 1)) if n_target > 1 else np.zeros(1)


def geometry_positions(
    n_map: int, n_input: int, n_source: int, scale: float, offset: float, sampling: Sampling
) -> np.ndarray:
    """Positions, in map pixel centres, of the ``n_source`` source pixels: each source centre ``s + 0.5``
    (edges) goes to the model input by the pre-processing's geometry (``e * scale + offset``), then onto a map of
    ``n_map`` pixels covering the ``n_input`` input pixels: half-pixel (map cell ``i`` covers input edges
    ``[i, i + 1] * n_input / n_map``) or corner-aligned (map centre 0 on input centre 0, map centre
    ``n_map - 1`` on input centre ``n_input - 1``)."""
    edge = (np.arange(n_source, dtype=np.float64) + 0.5) * scale + offset
    if sampling == "half_pixel":
        return edge * (n_map / n_input) - 0.5
    return (edge - 0.5) * ((n_map - 1) / (n_input - 1)) if n_input > 1 else np.zeros(n_source)


def _bilinear_axis(data: np.ndarray, pos: np.ndarray, axis: int) -> np.ndarray:
    n = data.shape[axis]
    p = np.clip(pos, 0.0, n - 1.0)
    lo = np.floor(p).astype(np.int64)
    hi = np.minimum(lo + 1, n - 1)
    w = (p - lo).astype(np.float64)
    shape = [1] * data.ndim
    shape[axis] = len(pos)
    w = w.reshape(shape)
    a = np.take(data, lo, axis=axis).astype(np.float64)
    b = np.take(data, hi, axis=axis).astype(np.float64)
    return a + (b - a) * w


def _nearest_axis(data: np.ndarray, pos: np.ndarray, axis: int) -> np.ndarray:
    idx = np.clip(np.floor(pos + 0.5), 0, data.shape[axis] - 1).astype(np.int64)
    return np.take(data, idx, axis=axis)


def resample(
    data: np.ndarray, rows: np.ndarray, cols: np.ndarray, method: Literal["bilinear", "nearest"]
) -> np.ndarray:
    """``data`` (H, W[, C]) sampled at ``rows`` x ``cols`` (map pixel-centre positions) -> (len(rows),
    len(cols)[, C]); bilinear in float64, returned as float32; nearest keeps the dtype."""
    if method == "nearest":
        return _nearest_axis(_nearest_axis(data, rows, 0), cols, 1)
    return _bilinear_axis(_bilinear_axis(data, rows, 0), cols, 1).astype(np.float32)


def to_source_positions(
    map_hw: tuple[int, int], input_hw: tuple[int, int], geometry: Geometry, sampling: Sampling
) -> tuple[np.ndarray, np.ndarray]:
    """(rows, cols) positions of every source pixel in a map of ``map_hw`` covering a model input of
    ``input_hw``, through ``geometry`` (the exact inverse of the pre-processing: resize, crop, letterbox)."""
    (sh, sw), (sy, sx), (oy, ox) = geometry.source_hw, geometry.scale, geometry.offset
    return (
        geometry_positions(map_hw[0], input_hw[0], sh, sy, oy, sampling),
        geometry_positions(map_hw[1], input_hw[1], sw, sx, ox, sampling),
    )
