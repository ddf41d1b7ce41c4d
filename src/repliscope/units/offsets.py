"""Per-pair offsets of an observed box against its reference box (both xyxy, source pixels).

``dx_w = (cx' - cx) / w`` and ``dy_h = (cy' - cy) / h`` (centre offsets normalised by the REFERENCE box's width
and height), ``log_w = log(w' / w)``, ``log_h = log(h' / h)``, ``iou``. A reference box of zero width or height
gives NaN offsets (left out of the statistics).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from repliscope.units.matching import Pair

OFFSETS = ("dx_w", "dy_h", "log_w", "log_h")


def offsets(pairs: Sequence[Pair]) -> dict[str, np.ndarray]:
    """``{"iou", "dx_w", "dy_h", "log_w", "log_h", "image"}`` as (N,) arrays, one entry per pair."""
    box = np.array([p.box for p in pairs], float).reshape(-1, 4)
    ref = np.array([p.ref_box for p in pairs], float).reshape(-1, 4)
    w, h = ref[:, 2] - ref[:, 0], ref[:, 3] - ref[:, 1]
    w2, h2 = box[:, 2] - box[:, 0], box[:, 3] - box[:, 1]
    with np.errstate(divide="ignore", invalid="ignore"):
        dx = ((box[:, 0] + box[:, 2]) - (ref[:, 0] + ref[:, 2])) / 2 / w
        dy = ((box[:, 1] + box[:, 3]) - (ref[:, 1] + ref[:, 3])) / 2 / h
        log_w = np.log(w2 / w)
        log_h = np.log(h2 / h)
    clean = {
        k: np.where(np.isfinite(v), v, np.nan)
        for k, v in (("dx_w", dx), ("dy_h", dy), ("log_w", log_w), ("log_h", log_h))
    }
    return {
        "iou": np.array([p.iou for p in pairs], float),
        **clean,
        "image": np.array([p.image for p in pairs], np.int64),
    }
