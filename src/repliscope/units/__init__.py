"""Unit evaluation of detection runs: per-detection matches, offsets, their statistics and a diagnosis."""

from repliscope.units.diagnosis import Candidate, Diagnosis, diagnose
from repliscope.units.matching import ImageBoxes, Pair, collect_pairs, match_detections, pair_by_rank
from repliscope.units.offsets import offsets
from repliscope.units.paired import detection_paired
from repliscope.units.stats import UnitReport, UnitStat, unit_report

__all__ = [
    "Candidate",
    "Diagnosis",
    "ImageBoxes",
    "Pair",
    "UnitReport",
    "UnitStat",
    "collect_pairs",
    "detection_paired",
    "diagnose",
    "match_detections",
    "offsets",
    "pair_by_rank",
    "unit_report",
]
