"""Heatmap panels of a pipeline diff's worst samples: per sample the manifest's model input, the candidate's, and
|candidate - manifest| (max over channels) with its colour scale. Inputs are shown min-max scaled per image."""

from __future__ import annotations

import io
from collections.abc import Sequence

import numpy as np


def _display(x: np.ndarray, chw: bool) -> np.ndarray:
    img = x.transpose(1, 2, 0) if chw and x.ndim == 3 else x
    img = img.astype(np.float64)
    lo, hi = float(img.min()), float(img.max())
    img = (img - lo) / (hi - lo) if hi > lo else np.zeros_like(img)
    return img[..., 0] if img.ndim == 3 and img.shape[-1] == 1 else img


def heatmap_png(panels: Sequence[tuple[str, np.ndarray, np.ndarray]], layout: str) -> bytes:
    """PNG bytes: one row per ``(sample id, reference, candidate)`` (same shape, one sample, ``layout``)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    chw = layout.endswith("CHW")
    fig, axes = plt.subplots(len(panels), 3, figsize=(9.0, 3.0 * len(panels)), dpi=80, squeeze=False)
    for row, (sample_id, ref, cand) in zip(axes, panels, strict=True):
        err = np.abs(cand.astype(np.float64) - ref.astype(np.float64))
        if err.ndim == 3:
            err = err.max(axis=0 if chw else -1)
        row[0].imshow(_display(ref, chw))
        row[0].set_title(f"manifest: {sample_id}"[:40], fontsize=8)
        row[1].imshow(_display(cand, chw))
        row[1].set_title("candidate", fontsize=8)
        im = row[2].imshow(err, cmap="inferno")
        row[2].set_title(f"|error| (max {err.max():.3g})", fontsize=8)
        fig.colorbar(im, ax=row[2], fraction=0.046, pad=0.04)
        for ax in row:
            ax.set_axis_off()
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()
