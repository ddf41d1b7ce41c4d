"""Tasks and metrics sit below the evaluation (issue 33 item 4): a task's paired statistics come from
``repliscope.metrics`` (``paired``, ``detection_paired``, ``box_matching``), not from the pitfalls or the units
packages above it. Checked by import-linter's contract in ``pyproject.toml`` and, here, in a fresh process that
computes both tasks' paired statistics and loads nothing of the layers above; the old module paths hand on the
very same functions."""

from __future__ import annotations

import json
import subprocess
import sys

import repliscope.metrics.box_matching as box_matching
import repliscope.metrics.detection_paired as detection_paired
import repliscope.metrics.paired as paired
import repliscope.pitfalls.result as pitfall_result
import repliscope.pitfalls.stats as pitfall_stats
import repliscope.units as units
import repliscope.units.matching as units_matching
import repliscope.units.paired as units_paired

ABOVE = ("evaluation", "pitfalls", "units", "diff", "bench", "store", "report", "cli", "service", "stacks")

_PAIRED = """
import json, sys
from repliscope.records.evaluation import Detection, SamplePrediction as S
from repliscope.tasks.base import TASKS

def top(i, label, top1):
    return S(sample_id=f"s{i}", label=label, topk_indices=[top1, 9], topk_probs=[0.75, 0.25])

ref = [top(0, 1, 1), top(1, 2, 2), top(2, 3, 3), S(sample_id="s3", label=4, error="decode failed")]
var = [top(0, 1, 1), top(1, 2, 7), top(2, 3, 3), top(3, 4, 4)]
cls = TASKS.get("image_classification")().paired(ref, var)

def det(i, x):
    return S(sample_id=f"d{i}", label=None, detections=[Detection(box=[x, 0, x + 10, 10], score=0.9, class_id=1)])

det_out = TASKS.get("object_detection")().paired([det(0, 0), det(1, 0)], [det(0, 0), det(1, 5)], None)
loaded = sorted(m for m in sys.modules if m.startswith("repliscope."))
print(json.dumps({"classification": cls, "detection": det_out, "loaded": loaded}))
"""


def test_a_tasks_paired_statistics_load_nothing_above_the_metrics() -> None:
    out = json.loads(subprocess.run([sys.executable, "-c", _PAIRED], capture_output=True, text=True, check=True).stdout)
    cls, det = out["classification"], out["detection"]
    assert (cls["n"], cls["agreement"], cls["flipped"], cls["b"], cls["c"]) == (3, 2 / 3, 1, 1, 0)
    assert (cls["failed_only_reference"], cls["failed_only_variant"], cls["max_abs_top1_prob_diff"]) == (1, 0, 0.0)
    assert cls["delta_top1"] == -1 / 3 and "mean_kl" not in cls
    # d1 moved by 5 px: IoU 5/15 < 0.5, so the variant's box matches nothing there
    assert det["n_samples"] == 2 and det["matched_fraction"] == 0.5 and det["mean_iou"] == 1.0
    assert det["flipped_images"] == 1 and det["flipped_ids"] == ["d1"]
    assert "repliscope.metrics.paired" in out["loaded"] and "repliscope.metrics.detection_paired" in out["loaded"]
    above = [m for m in out["loaded"] if m.split(".")[1] in ABOVE]
    assert above == []


def test_the_old_paths_hand_on_the_same_functions() -> None:
    assert pitfall_stats.paired_predictions is paired.paired_predictions
    assert pitfall_stats.paired_stats is paired.paired_stats
    assert pitfall_stats.kl_divergence is paired.kl_divergence
    assert pitfall_result.PairedStats is paired.PairedStats
    assert units.detection_paired is units_paired.detection_paired is detection_paired.detection_paired
    for name in units_matching.__all__:
        assert getattr(units_matching, name) is getattr(box_matching, name), name
