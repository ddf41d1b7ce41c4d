"""repliscope's numpy port of Darknet's detection augmentation ops (the ones :mod:`repliscope.backends.darknet.augment`
runs in libdarknet), written from ``src/image.c`` / ``src/data.c``: a candidate that reproduces the original, and
the template of the candidate contract (:mod:`repliscope.diff.augment.contract`).

Images: float32 ``(H, W, 3)`` RGB in [0, 1]; boxes: float32 ``(K, 5)`` rows ``(cx, cy, w, h, class)`` normalised.
All arithmetic is float32 in the C code's order.
"""

from __future__ import annotations

import numpy as np

f32 = np.float32
MAX_BOXES = 90


def place(image: np.ndarray, *, nw: float, nh: float, dx: float, dy: float, out_w: int, out_h: int) -> np.ndarray:
    """A 0.5-grey ``out_h`` x ``out_w`` canvas with the image resized bilinearly to ``(int)nw`` x ``(int)nh``
    (source coordinate ``x / w * im.w``, no half-pixel offset, zero outside the source) at ``((int)dx, (int)dy)``."""
    w, h, ox, oy = int(f32(nw)), int(f32(nh)), int(f32(dx)), int(f32(dy))
    src = np.asarray(image, dtype=np.float32)
    ih, iw = src.shape[:2]
    canvas = np.full((out_h, out_w, 3), f32(0.5), dtype=np.float32)
    # ((float)x / w) * im.w, as -Ofast builds it: x * (1 / w) * im.w
    rx = np.arange(w, dtype=np.float32) * f32(f32(iw) / f32(w))
    ry = np.arange(h, dtype=np.float32) * f32(f32(ih) / f32(h))
    ix = np.floor(rx).astype(np.int64)
    iy = np.floor(ry).astype(np.int64)
    fx = (rx - ix.astype(np.float32)).astype(np.float32)[None, :, None]
    fy = (ry - iy.astype(np.float32)).astype(np.float32)[:, None, None]
    padded = np.zeros((ih + 1, iw + 1, 3), np.float32)
    padded[:ih, :iw] = src

    def at(yy: np.ndarray, xx: np.ndarray) -> np.ndarray:
        return padded[np.clip(yy, 0, ih)[:, None], np.clip(xx, 0, iw)[None, :]]

    one = f32(1)
    val = (
        (one - fy) * (one - fx) * at(iy, ix)
        + fy * (one - fx) * at(iy + 1, ix)
        + (one - fy) * fx * at(iy, ix + 1)
        + fy * fx * at(iy + 1, ix + 1)
    )
    y0, x0 = max(oy, 0), max(ox, 0)
    y1, x1 = min(oy + h, out_h), min(ox + w, out_w)
    if y1 > y0 and x1 > x0:
        canvas[y0:y1, x0:x1] = val[y0 - oy : y1 - oy, x0 - ox : x1 - ox]
    return canvas


def rgb_to_hsv(rgb: np.ndarray) -> np.ndarray:
    """Darknet's ``rgb_to_hsv``: H in [0, 1) (sixths of the hue circle / 6), S = delta / max, V = max."""
    r, g, b = (rgb[..., i].astype(np.float32) for i in range(3))
    mx = np.maximum(np.maximum(r, g), b)
    mn = np.minimum(np.minimum(r, g), b)
    delta = mx - mn
    with np.errstate(divide="ignore", invalid="ignore"):
        s = np.where(mx == 0, f32(0), delta / mx)
        h = np.where(r == mx, (g - b) / delta, np.where(g == mx, f32(2) + (b - r) / delta, f32(4) + (r - g) / delta))
    h = np.where(h < 0, h + f32(6), h)
    h = np.where(mx == 0, f32(0), h / f32(6))
    return np.stack([h, s, mx], axis=-1).astype(np.float32)


def hsv_to_rgb(hsv: np.ndarray) -> np.ndarray:
    """Darknet's ``hsv_to_rgb`` (sector by ``floor(6 h)``; S == 0 is grey)."""
    h = f32(6) * hsv[..., 0]
    s, v = hsv[..., 1], hsv[..., 2]
    index = np.floor(np.nan_to_num(h)).astype(np.int64)  # NaN hue (0/0 on a grey pixel): only used where S > 0
    f = h - index.astype(np.float32)
    p = v * (f32(1) - s)
    q = v * (f32(1) - s * f)
    t = v * (f32(1) - s * (f32(1) - f))
    choices_r = [v, q, p, p, t]
    choices_g = [t, v, v, q, p]
    choices_b = [p, p, t, v, v]
    conds = [index == k for k in range(5)]
    r = np.select(conds, choices_r, default=v)
    g = np.select(conds, choices_g, default=p)
    b = np.select(conds, choices_b, default=q)
    grey = s == 0
    out = np.stack([np.where(grey, v, r), np.where(grey, v, g), np.where(grey, v, b)], axis=-1)
    return out.astype(np.float32)


def distort(image: np.ndarray, *, hue: float, saturation: float, exposure: float) -> np.ndarray:
    """HSV distortion: S *= saturation, V *= exposure, H += hue wrapped into [0, 1], back to RGB, clipped."""
    hsv = rgb_to_hsv(np.asarray(image, dtype=np.float32))
    hsv[..., 1] *= f32(saturation)
    hsv[..., 2] *= f32(exposure)
    hh = hsv[..., 0] + f32(hue)
    hh = np.where(hh > 1, hh - f32(1), hh)
    hsv[..., 0] = np.where(hh < 0, hh + f32(1), hh)
    return np.clip(hsv_to_rgb(hsv), 0, 1).astype(np.float32)


def flip(image: np.ndarray, *, flip: bool) -> np.ndarray:
    """The image mirrored left-right when ``flip``."""
    arr = np.asarray(image, dtype=np.float32)
    return np.ascontiguousarray(arr[:, ::-1]) if flip else arr.copy()


def truth(
    boxes: np.ndarray,
    *,
    box_order: tuple[int, ...],
    nw: float,
    nh: float,
    dx: float,
    dy: float,
    flip: bool,
    out_w: int,
    out_h: int,
) -> np.ndarray:
    """The label rows reordered, scaled by (nw/w, nh/h), shifted by (dx/w, dy/h), mirrored when ``flip``,
    clipped to [0, 1], boxes under 0.001 wide or high dropped, at most 90 kept (divisions by w, h as
    multiplications by the reciprocal, as Darknet's -Ofast build computes them)."""
    rows = np.asarray(boxes, dtype=np.float32).reshape(-1, 5)[list(box_order)]
    x, y, w, h, cls = (rows[:, i] for i in range(5))
    rw, rh = f32(f32(1) / f32(out_w)), f32(f32(1) / f32(out_h))
    sx, sy, ddx, ddy = f32(f32(nw) * rw), f32(f32(nh) * rh), f32(-f32(dx) * rw), f32(-f32(dy) * rh)
    two = f32(2)
    left, right = x - w / two, x + w / two
    top, bottom = y - h / two, y + h / two
    left, right = left * sx - ddx, right * sx - ddx
    top, bottom = top * sy - ddy, bottom * sy - ddy
    if flip:
        left, right = f32(1) - right, f32(1) - left
    left, right, top, bottom = (np.clip(v, 0, 1).astype(np.float32) for v in (left, right, top, bottom))
    out = np.stack(
        [(left + right) / two, (top + bottom) / two, np.clip(right - left, 0, 1), np.clip(bottom - top, 0, 1), cls],
        axis=1,
    ).astype(np.float32)
    out[(x == 0) & (y == 0), :4] = f32(999999)  # correct_boxes' marker for an all-zero row, kept as Darknet keeps it
    out = out[:MAX_BOXES]
    return out[(out[:, 2] >= f32(0.001)) & (out[:, 3] >= f32(0.001))]
