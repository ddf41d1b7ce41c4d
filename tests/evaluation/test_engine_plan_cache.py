"""The candidates' default batch is part of what a cached calibration depends on: a plan calibrated among other
candidates (e.g. the batch-8 default before) is not reused, the run calibrates again. An in-run calibration's
seconds are its trials' loops, not the loads of the runners it made."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from repliscope.datasets import resolve_dataset
from repliscope.evaluation import calibration
from repliscope.evaluation.adaptive import run_adaptive
from repliscope.evaluation.calibration import Planning, calibration_key, candidates
from repliscope.evaluation.engine import LoopOptions
from repliscope.evaluation.run import RunSettings, input_shape, prepare
from tests.conftest import LITE0
from tests.evaluation.test_calibration import SHAPE, CountingRunner, _many


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


class SlowLoadingRunner(CountingRunner):
    """A CountingRunner whose load takes ``LOAD`` seconds (an ONNX export, a session): every runner of a plan
    loads once, inside the first trial of its plan."""

    LOAD = 0.4

    def _load(self) -> None:
        time.sleep(self.LOAD)


def test_in_run_calibration_seconds_are_its_trials_loops_not_the_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(calibration, "MIN_TRIAL_SAMPLES", 8)
    monkeypatch.setattr(CountingRunner, "delay", 0.0005)
    prepared = prepare(LITE0, RunSettings(runtime="onnxruntime"))
    foolbox = resolve_dataset("foolbox_imagenet")
    cands = candidates(2, 2, None, None)  # batch 2: a trial is 8 samples
    runner = SlowLoadingRunner(prepared.artifact, threads=1, cache_dir=tmp_path)
    samples = _many(foolbox, 60)
    loop, plan = run_adaptive(Planning(None, cands), prepared.pipeline, runner, samples, LoopOptions(1, 1), SHAPE)
    trials = [s for s in plan.calibration["segments"] if s["role"] == "trial"]
    assert {s["plan"] for s in trials} == {c.key for c in cands} and {s["samples"] for s in trials} == {8}
    # three runners loaded (two data_parallel workers, one two-thread pipelined runner): 1.2 s of loads
    assert loop.load_seconds >= 3 * SlowLoadingRunner.LOAD
    trial_loops = sum(s["samples"] / s["samples_per_second"] for s in trials)
    assert plan.calibration["seconds"] == pytest.approx(trial_loops, abs=0.02)  # rounded to 10 ms
    assert plan.calibration["seconds"] <= loop.loop_seconds
    assert [p.sample_id for p in loop.predictions] == [s.id for s in samples]  # every sample once, in order
