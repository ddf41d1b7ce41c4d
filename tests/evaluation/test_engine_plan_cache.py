"""The candidates' default batch is part of what a cached calibration depends on: a plan calibrated among other
candidates (e.g. the batch-8 default before) is not reused, the run calibrates again."""

from __future__ import annotations

import pytest

from repliscope.evaluation import calibration
from repliscope.evaluation.calibration import calibration_key, candidates
from repliscope.evaluation.run import RunSettings, input_shape, prepare
from tests.conftest import LITE0


def test_candidates_default_to_batch_two_and_keep_a_given_batch() -> None:
    assert calibration.FALLBACK_BATCH == 2
    assert [(c.schedule, c.batch_size, c.workers, c.threads) for c in candidates(2, None, None, None)] == [
        ("data_parallel", 2, 2, 1),
        ("pipelined", 2, 2, 2),
    ]
    assert {c.batch_size for c in candidates(2, 16, None, None)} == {16}


def test_calibration_key_changes_with_the_default_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    prepared = prepare(LITE0, RunSettings(runtime="onnxruntime"))  # not loaded: the key needs no session

    def key() -> str:
        return calibration_key(prepared.runner, prepared.pipeline, input_shape(prepared), 2, None, None, None)

    now = key()
    assert now == key()  # deterministic
    monkeypatch.setattr(calibration, "FALLBACK_BATCH", 8)
    assert key() != now
