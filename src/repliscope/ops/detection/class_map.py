"""``class_map``: model class indices -> dataset category ids (background, offset, COCO 80 <-> 91 ids)."""

from __future__ import annotations

from typing import Literal

import numpy as np

from repliscope.errors import RepliscopeError
from repliscope.ops.base import OPS, Boxes, OpParams, PostOp, Predictions
from repliscope.ops.detection._common import require_detections, select, with_detections

COCO80_TO_91: tuple[int, ...] = (
    1,
    2,
    3,
    4,
    5,
    6,
    7,
    8,
    9,
    10,
    11,
    13,
    14,
    15,
    16,
    17,
    18,
    19,
    20,
    21,
    22,
    23,
    24,
    25,
    27,
    28,
    31,
    32,
    33,
    34,
    35,
    36,
    37,
    38,
    39,
    40,
    41,
    42,
    43,
    44,
    46,
    47,
    48,
    49,
    50,
    51,
    52,
    53,
    54,
    55,
    56,
    57,
    58,
    59,
    60,
    61,
    62,
    63,
    64,
    65,
    67,
    70,
    72,
    73,
    74,
    75,
    76,
    77,
    78,
    79,
    80,
    81,
    82,
    84,
    85,
    86,
    87,
    88,
    89,
    90,
)
"""COCO's 80 contiguous classes (index 0..79, the order of the instances JSON) -> the 2017 category ids."""
COCO91_TO_80: dict[int, int] = {cid: i for i, cid in enumerate(COCO80_TO_91)}


class ClassMapParams(OpParams):
    background: int | None
    """A model class index meaning "no object": its detections are dropped (before the offset); null: none."""
    offset: int
    """Added to every class index (e.g. 1: 0-based model classes to 1-based ids)."""
    table: Literal["coco80_to_91", "coco91_to_80", "none"]
    """Applied after the offset: ``coco80_to_91`` reads 0..79 and gives COCO category ids, ``coco91_to_80`` the
    inverse; an id outside the table is an error (never silently dropped)."""


@OPS.register("class_map")
class ClassMap(PostOp):
    """Map each detection's class: drop ``background``, add ``offset``, then look up ``table``, in that order.

    In/out: ``detections``; boxes, scores and order of the kept rows unchanged.
    """

    name = "class_map"
    Params = ClassMapParams
    params: ClassMapParams

    def map_classes(self, classes: np.ndarray) -> np.ndarray:
        """int64 class ids after the offset and the table (background already dropped)."""
        out = np.asarray(classes, dtype=np.int64) + self.params.offset
        if self.params.table == "none":
            return out
        if self.params.table == "coco80_to_91":
            bad = (out < 0) | (out >= len(COCO80_TO_91))
            if np.any(bad):
                raise RepliscopeError(
                    f"'class_map' table coco80_to_91 reads classes 0..79, got {int(out[bad][0])} "
                    f"(after offset {self.params.offset})"
                )
            return np.asarray(COCO80_TO_91, np.int64)[out]
        lookup = np.full(max(COCO80_TO_91) + 1, -1, np.int64)
        lookup[list(COCO91_TO_80)] = list(COCO91_TO_80.values())
        inside = (out >= 0) & (out < lookup.size)
        mapped = np.where(inside, lookup[np.where(inside, out, 0)], -1)
        if np.any(mapped < 0):
            raise RepliscopeError(
                f"'class_map' table coco91_to_80: {int(out[mapped < 0][0])} (after offset "
                f"{self.params.offset}) is not a COCO category id"
            )
        return mapped

    def __call__(self, preds: Predictions) -> Predictions:
        dets = require_detections(self, preds)
        out = []
        for b in dets:
            kept = b if self.params.background is None else select(b, b.classes != self.params.background)
            out.append(Boxes(kept.boxes, kept.scores, self.map_classes(kept.classes), kept.format))
        return with_detections(preds, out)
