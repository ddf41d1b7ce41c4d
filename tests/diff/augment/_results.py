"""Two stored-diff-ready augmentation results the report and page tests share (computed once per session):
``flip_always`` on shared draws, and a port that never flips on its own draws, named ``<own_never_flips>`` (a name
a page must escape)."""

from __future__ import annotations

import functools

from repliscope.diff.augment.contract import as_candidate
from repliscope.diff.augment.darknet_pipeline import DarknetDetection
from repliscope.diff.augment.driver import AugmentDiffResult, run_diff
from tests.diff.augment import candidates
from tests.diff.augment.test_darknet_augment import _items
from tests.yolo._assets import cfg_path, need_darknet

OWN_NAME = "<own_never_flips>"


@functools.cache
def _cached() -> tuple[AugmentDiffResult, AugmentDiffResult]:
    pipeline = DarknetDetection.from_model_config(cfg_path())
    items = _items(2)
    shared = run_diff(
        pipeline, as_candidate("flip_always", candidates.flip_always, pipeline), items, [1, 2],
        draws="shared", manifest="yolov3-tiny", dataset="coco",
    )  # fmt: skip
    own = run_diff(
        pipeline, as_candidate(OWN_NAME, candidates.own_never_flips, pipeline), items, list(range(1, 41)),
        draws="own", manifest="yolov3-tiny", dataset="coco",
    )  # fmt: skip
    return shared, own


def flip_results() -> tuple[AugmentDiffResult, AugmentDiffResult]:
    """(shared draws, own draws); skips without darknet like every darknet test."""
    need_darknet()
    return _cached()
