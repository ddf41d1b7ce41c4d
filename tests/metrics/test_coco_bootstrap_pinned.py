"""Every bootstrap replicate's 12 deltas (``bootstrap_deltas``) pinned bit for bit (SHA-256 of the float64 bytes)
as the code computed them before replicates skipped the detections of undrawn images: synthetic ground truth with
jittered detections, class-aware and class-agnostic, and the hard matching cases of test_coco_vectorised.py."""

import hashlib

import numpy as np
import pytest

from repliscope.datasets import resolve_dataset
from repliscope.metrics.bootstrap import CocoResampler, bootstrap_deltas
from repliscope.metrics.coco import coco_inputs
from tests.metrics.test_coco import jittered
from tests.metrics.test_coco_vectorised import _hard_dataset

PINNED = {
    ("synthetic", True): "181079c6b39c664e2d88bf0355689be7931cab4a5209669d0519ca0aaa245f93",
    ("synthetic", False): "054ae9f66e07323f37b4c11aefabeadefcace3c0547c50a24b838f4d76775060",
    ("hard", True): "169b982357476f44ca844313a6ab9b286b697dd952b586f1d58350dfbd75f6ab",
    ("hard", False): "d34dba8ea0c85b32f1e8f5a80bcefb7d0e2f13b735f7761edfe9f4872e8b076d",
}


def _deltas(case: str, class_aware: bool) -> np.ndarray:
    if case == "synthetic":
        ds = resolve_dataset("synthetic_detection", seed=4, num_images=40)
        preds = jittered(ds, 1)
    else:
        ds, preds = _hard_dataset()
    inputs = coco_inputs(preds, ds, class_aware=class_aware)
    resampler = CocoResampler(inputs.truths, inputs.detections, sorted(inputs.categories))
    return bootstrap_deltas(resampler, 40, seed=11)


@pytest.mark.parametrize(("case", "class_aware"), list(PINNED))
def test_bootstrap_deltas_pinned(case: str, class_aware: bool) -> None:
    deltas = _deltas(case, class_aware)
    assert deltas.shape == (40, 12)
    assert np.isfinite(deltas[:, 0]).all()
    assert hashlib.sha256(np.ascontiguousarray(deltas).tobytes()).hexdigest() == PINNED[(case, class_aware)]
