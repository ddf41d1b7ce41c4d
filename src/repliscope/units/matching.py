"""Pair each detection of a run with a ground-truth box or with a reference run's detection.

Defined in :mod:`repliscope.metrics.box_matching` (the detection task's paired statistics match boxes too);
handed on here for unit evaluation.
"""

from repliscope.metrics.box_matching import (
    ImageBoxes,
    Pair,
    collect_pairs,
    from_prediction,
    from_truth,
    iou_matrix,
    match_detections,
    pair_by_rank,
)

__all__ = [
    "ImageBoxes",
    "Pair",
    "collect_pairs",
    "from_prediction",
    "from_truth",
    "iou_matrix",
    "match_detections",
    "pair_by_rank",
]
