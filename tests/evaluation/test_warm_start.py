"""The model loads while the run reads its first samples (issue 37): loading starts before any sample is read,
samples are read while it loads, the loop takes them instead of reading them again and gives the same records,
what is held is bounded, a load error still stops the run, and the calibration's measured samples are read in
their own segments. Nothing here is timed: the overlap is checked by the order of events."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from repliscope.datasets import Dataset
from repliscope.datasets.base import Sample
from repliscope.evaluation import calibration
from repliscope.evaluation.adaptive import run_adaptive, trials_size
from repliscope.evaluation.calibration import Planning, candidates
from repliscope.evaluation.engine import LoopOptions, PreparedItem, prepare_sample, run_loop
from repliscope.evaluation.record_builder import build_record
from repliscope.evaluation.run import PreparedRun
from repliscope.evaluation.warm_start import READ_AHEAD_NICE, StagedPrefetch, warm_start
from repliscope.runtimes.errors import ModelLoadError
from tests.evaluation.test_calibration import SHAPE, CountingRunner, _many, foolbox, lite0

__all__ = ["foolbox", "lite0"]  # the fixtures, shared with test_calibration


def _logged(samples: list[Sample], log: list[str], on_read: Callable[[str], object] | None = None) -> list[Sample]:
    """The samples, each logging ``file <id>`` when its bytes are read (then calling ``on_read(id)``)."""

    def reader(s: Sample) -> Callable[[], bytes]:
        def read() -> bytes:
            log.append(f"file {s.id}")
            data = s.read()
            if on_read is not None:
                on_read(s.id)
            return data

        return read

    return [replace(s, read=reader(s)) for s in samples]


class GatedRunner(CountingRunner):
    """Its load logs ``loading`` and finishes only when ``gate`` is set (a long ONNX export)."""

    gate: threading.Event
    log: list[str]

    def _load(self) -> None:
        self.log.append("loading")
        if not self.gate.wait(10):
            raise AssertionError("the samples were not read while the model loaded")


def test_loading_starts_before_the_first_read_and_reading_stops_when_it_ends(
    lite0: PreparedRun, foolbox: Dataset, tmp_path: Path
) -> None:
    log: list[str] = []
    loaded = threading.Event()

    def third_read(sample_id: str) -> None:  # the third read lets the load finish, and returns once it has
        if sample_id == foolbox.samples[2].id:
            runner.gate.set()
            assert loaded.wait(10)

    samples = _logged(list(foolbox.samples[:8]), log, on_read=third_read)
    runner = GatedRunner(lite0.artifact, threads=1, cache_dir=tmp_path)
    runner.gate, runner.log = threading.Event(), log

    def event(what: str) -> None:
        log.append(what)
        if what == "load finished":
            loaded.set()

    held = warm_start([runner], lite0.pipeline, samples, SHAPE, on_event=event)
    assert runner.loaded
    assert log[0] == "load started"
    assert log.index("loading") < log.index(f"file {samples[1].id}")  # the load began before the reading went on
    reads = [e for e in log if e.startswith("read ")]
    assert reads == [f"read {s.id}" for s in samples[:3]]  # read while loading, none after it finished
    assert log[-2:] == ["load finished", "stopped: loaded"] and len(held) == 3


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="thread priorities: Linux only")
def test_the_reading_runs_at_a_lower_priority_than_the_load(
    lite0: PreparedRun, foolbox: Dataset, tmp_path: Path
) -> None:
    def nice() -> int:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    seen: dict[str, int] = {}

    class Noting(CountingRunner):
        def _load(self) -> None:
            seen["load"] = nice()
            assert read.wait(10)

    read = threading.Event()

    def reading(_sample_id: str) -> None:
        seen["read"] = nice()
        read.set()

    runner = Noting(lite0.artifact, threads=1, cache_dir=tmp_path)
    warm_start([runner], lite0.pipeline, _logged(list(foolbox.samples[:4]), [], on_read=reading), SHAPE)
    assert seen["read"] == min(19, seen["load"] + READ_AHEAD_NICE) and seen["load"] == nice()


def test_the_loop_takes_held_samples_and_gives_the_same_records(
    lite0: PreparedRun, foolbox: Dataset, tmp_path: Path
) -> None:
    samples = list(foolbox.samples[:10])
    runner = CountingRunner(lite0.artifact, threads=1, cache_dir=tmp_path)
    staged = StagedPrefetch(lite0.pipeline, SHAPE)
    for s in samples[4:]:
        staged.add(s)
    # the first sample chose the stage: after center_crop, a 224 x 224 x 3 uint8 crop (not the float32 input)
    assert [op.name for op in lite0.pipeline.pre_ops][: staged.keep][-1] == "center_crop"
    state = staged.store.held[id(samples[5])][1]
    assert not isinstance(state, PreparedItem) and state[0].data.nbytes == 224 * 224 * 3
    options = LoopOptions(batch_size=2, prep_workers=2, schedule="data_parallel")
    plain = run_loop(lite0.pipeline, runner, samples, options, SHAPE)
    ahead = run_loop(lite0.pipeline, runner, samples, options, SHAPE, ahead=staged.store)
    assert (plain.ahead, ahead.ahead, len(staged.store)) == (0, 6, 0)  # each held sample taken once
    assert ahead.predictions == plain.predictions and ahead.fingerprints == plain.fingerprints
    assert len({p.topk_indices[0] for p in plain.predictions if p.topk_indices}) > 1  # the inputs matter
    assert staged.store.take(samples[5]) is None  # taken: a second loop reads the file again


def test_reading_ahead_stops_at_the_budget(lite0: PreparedRun, foolbox: Dataset, tmp_path: Path) -> None:
    runner = GatedRunner(lite0.artifact, threads=1, cache_dir=tmp_path)
    runner.gate, runner.log = threading.Event(), []
    log: list[str] = []
    # the first sample is held whole (the float32 input, 602,112 bytes), the others at their 150,528-byte crop
    budget = 224 * 224 * 3 * 4 + 224 * 224 * 3 + 1

    def event(what: str) -> None:
        log.append(what)
        if what.startswith("stopped"):  # the load goes on until the reading stopped
            runner.gate.set()

    held = warm_start([runner], lite0.pipeline, foolbox.samples, SHAPE, budget=budget, on_event=event)
    assert "stopped: budget" in log and len(held) == 3 and held.nbytes == budget - 1 + 224 * 224 * 3


def test_a_load_error_stops_the_run_after_the_reading(lite0: PreparedRun, foolbox: Dataset, tmp_path: Path) -> None:
    class Broken(CountingRunner):
        def _load(self) -> None:
            raise ModelLoadError("'model.onnx' cannot be loaded: broken on purpose")

    with pytest.raises(ModelLoadError, match="broken on purpose"):
        warm_start([Broken(lite0.artifact, threads=1, cache_dir=tmp_path)], lite0.pipeline, foolbox.samples, SHAPE)


def test_loaded_runners_read_nothing_ahead(lite0: PreparedRun, foolbox: Dataset, tmp_path: Path) -> None:
    runner = CountingRunner(lite0.artifact, threads=1, cache_dir=tmp_path)
    runner.load()
    assert len(warm_start([runner], lite0.pipeline, foolbox.samples, SHAPE)) == 0


def test_an_in_run_calibration_reads_its_measured_samples_itself(
    lite0: PreparedRun, foolbox: Dataset, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(calibration, "MIN_TRIAL_SAMPLES", 4)
    monkeypatch.setattr(calibration, "DROP_BELOW", 0.0)  # every round runs, however slow a trial on a busy machine
    monkeypatch.setattr(CountingRunner, "delay", 0.0)
    log: list[str] = []
    cands = candidates(2, 1, None, None)  # batch 1, two workers: a trial is 4 samples, the check 8
    measured = trials_size(cands) + 8
    ahead_read = threading.Event()

    def first_ahead(sample_id: str) -> None:
        if sample_id == str(measured):
            ahead_read.set()

    samples = _logged(_many(foolbox, 48), log, on_read=first_ahead)

    class Logging(CountingRunner):
        def _load(self) -> None:
            log.append("loading")
            assert ahead_read.wait(10), "nothing was read while the model loaded"

    runner = Logging(lite0.artifact, threads=1, cache_dir=tmp_path)
    loop, plan = run_adaptive(Planning(None, cands), lite0.pipeline, runner, samples, LoopOptions(1, 1), SHAPE)
    reads = [e for e in log if e.startswith("file ")]
    assert log[0] == "loading" and reads[0] == f"file {measured}"  # read ahead: the first sample after the check
    assert sorted(reads) == sorted(f"file {i}" for i in range(48))  # every file read once
    segments = plan.calibration["segments"]
    assert [s["role"] for s in segments].count("trial") == 6
    assert all("read_ahead" not in s for s in segments if s["role"] != "run")  # trials, check: their own reads
    assert segments[-1]["role"] == "run" and segments[-1]["read_ahead"] >= 1
    assert [p.sample_id for p in loop.predictions] == [s.id for s in samples]  # every sample once, in order


def test_a_sample_that_fails_ahead_fails_with_the_loops_reason(lite0: PreparedRun) -> None:
    garbage = Sample(id="bad", label=1, read=lambda: b"not an image")
    staged = StagedPrefetch(lite0.pipeline, SHAPE)
    staged.add(garbage)
    held = staged.store.take(garbage)
    assert held is not None and isinstance(held[0], PreparedItem)
    assert held[0].data is None and held[0].error == prepare_sample(lite0.pipeline, garbage, SHAPE)[1]
    assert staged.keep is None  # a failed sample does not choose the stage


def test_the_records_rate_counts_the_preparation_done_ahead(
    lite0: PreparedRun, foolbox: Dataset, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 37: samples read while the model loaded enter the loop ready; the record's throughput must still be
    a rate of the whole work. Each read burns ``slow`` CPU seconds (inference is free), so two workers on at most
    two cores' worth of CPU cannot do better than 2 / slow samples/s whoever did the reading (the rate over the
    loop alone, the bug, was 7-8 times that). True by construction (the read-ahead's CPU is charged at the
    loop's own wall seconds per CPU second), not a timing; 0.16 CPU seconds."""
    monkeypatch.setattr(CountingRunner, "delay", 0.0)
    slow, n, ahead_until = 0.02, 8, 8
    enough = threading.Event()

    def sleepy(s: Sample, i: int) -> Sample:
        def read() -> bytes:
            end = time.thread_time() + slow
            while time.thread_time() < end:  # CPU work, whatever the machine's load
                pass
            if i == ahead_until - 1:
                enough.set()
            return s.read()

        return replace(s, id=f"{i}", read=read)

    samples = [sleepy(foolbox.samples[i % 20], i) for i in range(n)]

    class SlowLoad(CountingRunner):  # a long export: loaded once half the samples were read ahead
        def _load(self) -> None:
            assert enough.wait(10), "nothing was read while the model loaded"

    runner = SlowLoad(lite0.artifact, threads=1, cache_dir=tmp_path)
    plan = calibration.Plan("data_parallel", 2, 2, 1, "given")
    loop, ran = run_adaptive(Planning(plan, (plan,)), lite0.pipeline, runner, samples, LoopOptions(1, 1), SHAPE)
    rec = build_record(
        replace(lite0, runner=runner),
        replace(foolbox, samples=samples),
        loop,
        lite0.pipeline,
        ran.loop_options(False),
        runner,
        ran,
    )
    t = rec.timings
    assert rec.counts["evaluated"] == n and t.loop_seconds is not None and t.throughput_seconds is not None
    assert ahead_until <= t.read_ahead_samples <= n and t.read_ahead_cpu_seconds >= t.read_ahead_samples * slow
    assert t.throughput_seconds > t.loop_seconds
    assert t.throughput_samples_per_second == pytest.approx(n / t.throughput_seconds)
    assert t.throughput_samples_per_second <= 2 / slow
    assert ran.calibration["segments"][-1]["read_ahead"] == t.read_ahead_samples
