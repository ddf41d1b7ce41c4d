"""Schedules and the measured calibration: both schedules give the same predictions in dataset order, the plan
keeps what the user gave, a calibration is cached and reused, small datasets use the documented fallback."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from repliscope.datasets import resolve_dataset
from repliscope.datasets.base import Dataset, Sample
from repliscope.errors import RepliscopeError
from repliscope.evaluation import calibration
from repliscope.evaluation.calibration import FALLBACK_BATCH, Plan, calibrate, plan_run
from repliscope.evaluation.engine import LoopOptions, run_loop
from repliscope.evaluation.run import PreparedRun, RunSettings, evaluate, prepare
from repliscope.runtimes.base import ModelArtifact, Runner
from tests.conftest import FOOLBOX_LABELS, LITE0, LITE0_FOOLBOX_TOP1

SHAPE = (3, 224, 224)


class CountingRunner(Runner):
    """Predicts class (sum of the input's first 10 values, as int) % 1000; sleeps ``delay`` per sample;
    records which thread ran each batch (``threads_seen``) and refuses concurrent use of one instance."""

    name = "counting"
    delay = 0.002

    def __init__(self, artifact: ModelArtifact, *, threads: int, cache_dir: Path) -> None:
        super().__init__(artifact, threads=threads, cache_dir=cache_dir)
        self.threads_seen: set[str] = set()
        self._busy = threading.Lock()

    def framework(self) -> tuple[str, str]:
        return "counting", "1.0"

    def _load(self) -> None:
        pass

    def _infer(self, batch: np.ndarray) -> np.ndarray:
        if not self._busy.acquire(blocking=False):
            raise AssertionError("one runner used by two threads at once")
        try:
            self.threads_seen.add(threading.current_thread().name)
            time.sleep(self.delay * len(batch))
            scores = np.zeros((len(batch), 1000), dtype=np.float32)
            for i, x in enumerate(batch):
                scores[i, int(abs(x.reshape(-1)[:10].sum() * 1000)) % 1000] = 10.0
            return scores
        finally:
            self._busy.release()


@pytest.fixture(scope="module")
def lite0() -> PreparedRun:
    return prepare(LITE0, RunSettings(runtime="onnxruntime", threads=1, batch_size=4))


@pytest.fixture(scope="module")
def foolbox() -> Dataset:
    return resolve_dataset("foolbox_imagenet")


def _counting(lite0: PreparedRun, tmp_path: Path) -> CountingRunner:
    return CountingRunner(lite0.artifact, threads=1, cache_dir=tmp_path)


def test_both_schedules_give_the_same_predictions_in_order(
    lite0: PreparedRun, foolbox: Dataset, tmp_path: Path
) -> None:
    results = {}
    for schedule in ("pipelined", "data_parallel"):
        runner = _counting(lite0, tmp_path)
        loop = run_loop(
            lite0.pipeline, runner, foolbox.samples, LoopOptions(batch_size=3, prep_workers=2, schedule=schedule), SHAPE
        )
        results[schedule] = loop
        assert [p.sample_id for p in loop.predictions] == [s.id for s in foolbox.samples]
        assert len(loop.batch_latencies) == 7  # 20 samples in batches of 3
    a, b = results["pipelined"], results["data_parallel"]
    assert [p.topk_indices for p in a.predictions] == [p.topk_indices for p in b.predictions]
    assert a.fingerprints == b.fingerprints and len(set(a.fingerprints or [])) == 20


def test_data_parallel_gives_each_worker_its_own_runner(
    lite0: PreparedRun, foolbox: Dataset, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[Runner] = []
    original = Runner.replica

    def spy(self: Runner, threads: int | None = None) -> Runner:
        r = original(self, threads)
        made.append(r)
        return r

    monkeypatch.setattr(Runner, "replica", spy)
    runner = _counting(lite0, tmp_path)
    loop = run_loop(
        lite0.pipeline,
        runner,
        foolbox.samples,
        LoopOptions(batch_size=2, prep_workers=2, schedule="data_parallel"),
        SHAPE,
    )
    assert len(made) == 1 and isinstance(made[0], CountingRunner) and made[0].loaded
    assert len(loop.predictions) == 20 and not any(p.error for p in loop.predictions)
    # the CountingRunner would have raised had two workers shared one instance


def test_unknown_schedule_is_refused(lite0: PreparedRun, tmp_path: Path) -> None:
    with pytest.raises(RepliscopeError, match=r"unknown schedule 'fast' \(allowed: pipelined, data_parallel\)"):
        run_loop(lite0.pipeline, _counting(lite0, tmp_path), [], LoopOptions(1, 1, schedule="fast"), SHAPE)  # type: ignore[arg-type]
    with pytest.raises(RepliscopeError, match="unknown schedule 'fast'"):
        plan_run(
            lite0.runner, lite0.pipeline, [], SHAPE, batch_size=None, threads=None, schedule="fast", cache_dir=tmp_path
        )


def test_data_parallel_evaluation_is_golden_on_onnxruntime(lite0: PreparedRun, foolbox: Dataset) -> None:
    prepared = replace(
        lite0, settings=RunSettings(runtime="onnxruntime", threads=1, batch_size=3, schedule="data_parallel")
    )
    rec = evaluate(prepared, foolbox)
    assert [s.top1 for s in rec.samples] == LITE0_FOOLBOX_TOP1
    assert [s.label for s in rec.samples] == FOOLBOX_LABELS
    assert rec.options["schedule"] == "data_parallel" and rec.options["prep_workers"] == calibration.usable_cores()
    assert rec.options["plan"]["source"] == "given"


def test_threads_and_batch_without_schedule_run_pipelined_as_given(lite0: PreparedRun, foolbox: Dataset) -> None:
    rec = evaluate(lite0, foolbox)
    plan = rec.options["plan"]
    assert (plan["schedule"], plan["batch_size"], plan["threads"], plan["workers"]) == ("pipelined", 4, 1, 1)
    assert plan["source"].startswith("given")


def test_small_dataset_without_a_cached_calibration_uses_the_fallback(
    lite0: PreparedRun, foolbox: Dataset, tmp_path: Path
) -> None:
    plan = plan_run(
        lite0.runner,
        lite0.pipeline,
        foolbox.samples,
        SHAPE,
        batch_size=None,
        threads=None,
        schedule=None,
        cache_dir=tmp_path,
        cores=2,
    )
    assert (plan.schedule, plan.batch_size, plan.workers, plan.threads) == ("data_parallel", FALLBACK_BATCH, 2, 1)
    assert plan.source.startswith("fallback: 20 samples are fewer than 200")
    given = plan_run(
        lite0.runner,
        lite0.pipeline,
        foolbox.samples,
        SHAPE,
        batch_size=5,
        threads=None,
        schedule="pipelined",
        cache_dir=tmp_path,
        cores=2,
    )
    assert (given.schedule, given.batch_size, given.workers, given.threads) == ("pipelined", 5, 2, 1)


def _many(foolbox: Dataset, n: int) -> list[Sample]:
    return [replace(foolbox.samples[i % 20], id=f"{i}") for i in range(n)]


def test_calibration_measures_chooses_and_is_cached(
    lite0: PreparedRun, foolbox: Dataset, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(calibration, "TRIAL_ROUNDS", 2)
    monkeypatch.setattr(calibration.os, "getloadavg", lambda: (1.5, 1.25, 0.75))
    runner = _counting(lite0, tmp_path)
    samples = _many(foolbox, 250)
    plan = plan_run(
        runner,
        lite0.pipeline,
        samples,
        SHAPE,
        batch_size=None,
        threads=None,
        schedule=None,
        cache_dir=tmp_path,
        cores=2,
    )
    c = plan.calibration
    assert plan.source == "calibrated" and plan.batch_size == FALLBACK_BATCH
    assert c["default"] == "data_parallel threads=1"
    trials = c["trials_samples_per_second"]
    assert list(trials) == ["data_parallel threads=1", "pipelined threads=2"]
    assert all(len(rates) == 2 and min(rates) > 0 for rates in trials.values())
    assert set(c["predicted_samples_per_second"]) == set(trials)
    gain, noise = c["gain_over_default"]["pipelined threads=2"], c["noise"]["pipelined threads=2"]
    # the noise rule: pipelined only when its gain over the default is larger than the noise
    assert (plan.key == "pipelined threads=2") == (gain > noise)
    # 16: the minimum of a calibration before the loop (2 waves of 2 workers x batch 2 are 8)
    assert c["probe_samples"] == 16 and c["trial_samples"] == 16 and c["cores"] == calibration.usable_cores()
    assert c["load_average"] == [1.5, 1.25, 0.75] and c["rounds"] == 2
    files = list((tmp_path / "calibration").glob("*.json"))
    assert len(files) == 1
    entry = json.loads(files[0].read_text())
    assert entry["batch_size"] == plan.batch_size and entry["calibration"]["load_average"] == [1.5, 1.25, 0.75]

    monkeypatch.setattr(calibration, "calibrate", lambda *a, **k: pytest.fail("calibrated twice"))
    again = plan_run(
        runner,
        lite0.pipeline,
        samples,
        SHAPE,
        batch_size=None,
        threads=None,
        schedule=None,
        cache_dir=tmp_path,
        cores=2,
    )
    assert again.source == "calibrated (cached)" and replace(again, source="calibrated") == plan
    # a cached calibration also serves a small dataset
    small = plan_run(
        runner,
        lite0.pipeline,
        samples[:20],
        SHAPE,
        batch_size=None,
        threads=None,
        schedule=None,
        cache_dir=tmp_path,
        cores=2,
    )
    assert small.source == "calibrated (cached)"


def test_calibration_keeps_given_values(
    lite0: PreparedRun, foolbox: Dataset, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(calibration, "TRIAL_ROUNDS", 2)
    plan = calibrate(
        _counting(lite0, tmp_path),
        lite0.pipeline,
        _many(foolbox, 40),
        SHAPE,
        cores=2,
        batch_size=4,
        threads=1,
    )
    assert (plan.schedule, plan.batch_size, plan.threads) in {("data_parallel", 4, 1), ("pipelined", 4, 1)}
    assert plan.workers == 2
    assert list(plan.calibration["trials_samples_per_second"]) == ["data_parallel threads=1", "pipelined threads=1"]
    assert plan.calibration["trial_samples"] == 16  # 2 waves of 2 workers x batch 4 (and at least 16 samples)
    # one schedule given: the only candidate, nothing to measure
    only = calibrate(
        _counting(lite0, tmp_path), lite0.pipeline, _many(foolbox, 40), SHAPE, cores=2, schedule="data_parallel"
    )
    assert (only.schedule, only.batch_size, only.threads, only.workers) == ("data_parallel", FALLBACK_BATCH, 1, 2)
    assert only.calibration["trial_samples"] == 16 and "trials_samples_per_second" not in only.calibration


def test_calibration_without_usable_samples_falls_back_keeps_given_values_and_caches_nothing(
    lite0: PreparedRun, tmp_path: Path
) -> None:
    broken = [Sample(id=f"{i}", label=None, read=lambda: b"not an image") for i in range(250)]
    plan = plan_run(
        _counting(lite0, tmp_path),
        lite0.pipeline,
        broken,
        SHAPE,
        batch_size=4,
        threads=None,
        schedule="pipelined",
        cache_dir=tmp_path,
        cores=2,
    )
    assert isinstance(plan, Plan) and plan.source.startswith("fallback: none of the first 64 samples")
    assert (plan.schedule, plan.batch_size, plan.threads, plan.workers) == ("pipelined", 4, 1, 2)
    assert not (tmp_path / "calibration").exists()
