"""Paired statistics of two detection runs on the same samples (the detection task's ``paired``).

Defined in :mod:`repliscope.metrics.detection_paired` (the detection task computes them); handed on here for unit
evaluation.
"""

from repliscope.metrics.detection_paired import LISTED, PAIRED_REPLICATES, detection_paired

__all__ = ["LISTED", "PAIRED_REPLICATES", "detection_paired"]
