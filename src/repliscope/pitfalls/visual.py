"""Visual testing (MLModelScope Figs. 6-7): each variant's model input next to the reference, and a heatmap."""

from __future__ import annotations

import base64
import io

import numpy as np
from PIL import Image

from repliscope.pitfalls.result import VisualEntry


def _to_hwc(data: np.ndarray, layout: str) -> np.ndarray:
    return data.transpose(1, 2, 0) if layout == "CHW" else data


def input_png(data: np.ndarray, layout: str) -> str:
    """A model input (HWC or CHW, any dtype) as a base64 PNG, min-max scaled to 0..255, channels as stored."""
    hwc = _to_hwc(data, layout).astype(np.float64)
    lo, hi = float(hwc.min()), float(hwc.max())
    scaled = np.zeros_like(hwc) if hi <= lo else (hwc - lo) / (hi - lo) * 255.0
    img = np.clip(np.round(scaled), 0, 255).astype(np.uint8)
    if img.shape[2] == 1:
        img = img[:, :, 0]
    return _png(img)


def diff_heatmap_png(
    ref: np.ndarray, ref_layout: str, var: np.ndarray, var_layout: str, scale: float
) -> tuple[str | None, float | None, float | None]:
    """Heatmap of mean |variant - reference| over channels, as a base64 PNG (black = equal, yellow = ``scale``
    or more), plus max and mean absolute difference; (None, None, None) when the shapes differ."""
    a = _to_hwc(ref, ref_layout).astype(np.float64)
    b = _to_hwc(var, var_layout).astype(np.float64)
    if a.shape != b.shape:
        return None, None, None
    diff = np.abs(a - b)
    per_pixel = diff.mean(axis=2)
    t = np.clip(per_pixel / heat_scale(scale), 0.0, 1.0)
    return _png((heat_rgb(t) * 255).round().astype(np.uint8)), float(diff.max()), float(diff.mean())


def heat_scale(scale: float) -> float:
    """The difference drawn at full colour: ``scale``, or 1.0 when it is not positive."""
    return scale if scale > 0 else 1.0


def heat_rgb(t: np.ndarray) -> np.ndarray:
    """The heatmap's colour ramp: ``t`` in [0, 1], any shape -> float RGB in [0, 1] with a trailing axis of 3;
    black (0) -> red (0.5) -> yellow (1), readable and colour-blind tolerant enough for a difference map."""
    return np.stack([np.clip(2 * t, 0, 1), np.clip(2 * t - 1, 0, 1), np.zeros_like(t)], axis=-1)


def visual_entry(
    name: str,
    ref: tuple[np.ndarray, str] | None,
    var: tuple[np.ndarray, str] | None,
    error: str | None = None,
    prediction: tuple[int, float] | None = None,
) -> VisualEntry:
    """One panel cell; ``ref`` / ``var``: (model input, layout) or None when that sample failed;
    ``prediction``: the variant's (top-1 class, probability) for this sample, when it has one."""
    top1, prob = prediction if prediction is not None else (None, None)
    if var is None:
        blank = _png(np.zeros((8, 8), dtype=np.uint8))
        return VisualEntry(variant=name, image_png=blank, note=f"sample failed: {error}", top1=top1, top1_prob=prob)
    image = input_png(*var)
    if ref is None or name == "reference":
        return VisualEntry(variant=name, image_png=image, top1=top1, top1_prob=prob)
    ref_data = _to_hwc(*ref)
    scale = heat_scale(float(ref_data.max() - ref_data.min()) / 4.0)
    heat, mx, mean = diff_heatmap_png(ref[0], ref[1], var[0], var[1], scale)
    note = None if heat is not None else f"shape {var[0].shape} differs from the reference {ref[0].shape}"
    return VisualEntry(
        variant=name,
        image_png=image,
        diff_png=heat,
        max_abs_diff=mx,
        mean_abs_diff=mean,
        note=note,
        diff_scale=scale if heat is not None else None,
        top1=top1,
        top1_prob=prob,
    )


def _png(img: np.ndarray) -> str:
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format="PNG", optimize=True)
    return base64.b64encode(buf.getvalue()).decode("ascii")
