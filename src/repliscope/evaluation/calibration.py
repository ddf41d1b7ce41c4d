"""Choose how a run uses the cores: batch size, schedule and threads, from a short measured calibration.

The loop has two schedules (see :mod:`repliscope.evaluation.engine`). Which one is faster, and at which batch
size, depends on the model, the runtime and the machine, so it is measured, not guessed:

1. ``t_prep``: decode + pre-processing per image on one thread (the first :data:`PROBE_SAMPLES` samples that
   pre-process without error);
2. ``t_infer(b)``: warm per-image inference cost with one intra-op thread for every b in :data:`BATCH_SIZES`;
   the batch size is the smallest within :data:`BATCH_TOLERANCE` of the cheapest (small batches keep memory and
   the last, partial batch small);
3. a trial of each candidate schedule (``data_parallel``: one worker with a one-thread runner per core;
   ``pipelined``: the runtime with every core as intra-op threads, pre-processing threads beside it) on
   ``cores * batch * 4`` samples cycled from the probe (at least 64), timed like the real loop (load and
   warm-up excluded), :data:`TRIAL_ROUNDS` alternating rounds; the faster one (best round) wins.

The result is cached (JSON under ``<cache>/calibration/``) by everything it depends on: runtime and its version,
model sha256, input shape, the resolved pre-processing, CPU model, usable cores, repliscope version. Values the
user gave (``--batch-size``, ``--threads``, ``--schedule``) are kept and only the rest is chosen. A dataset
smaller than a calibration (:data:`MIN_SAMPLES_TO_CALIBRATE`) without a cached calibration runs the documented
:data:`FALLBACK` schedule instead, and the record says so.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

import repliscope
from repliscope.datasets.base import Sample, read_sample
from repliscope.errors import RepliscopeError
from repliscope.evaluation.engine import SCHEDULES, LoopOptions, Schedule, prepare_read, run_loop
from repliscope.evaluation.provenance import cpu_model, usable_cores
from repliscope.ops.pipeline import Pipeline
from repliscope.runtimes.base import Runner

BATCH_SIZES = (1, 2, 4, 8, 16, 32)
BATCH_TOLERANCE = 1.03
PROBE_SAMPLES = 16
MIN_SAMPLES_TO_CALIBRATE = 200
_MIN_TIMED_IMAGES = 32
TRIAL_ROUNDS = 2


@dataclass(frozen=True)
class Plan:
    """How one run uses the machine: ``workers`` is pre-processing threads (``pipelined``) or workers with a
    runner each (``data_parallel``); ``threads`` is each runner's intra-op threads."""

    schedule: Schedule
    batch_size: int
    workers: int
    threads: int
    source: str
    """``given`` (every value from the user), ``calibrated``, ``calibrated (cached)``, or ``fallback: <why>``."""
    calibration: dict[str, Any] = field(default_factory=dict)
    """The measurements behind a calibrated plan (``t_prep_ms``, ``t_infer_ms_by_batch``, ``trials``, ...)."""

    def loop_options(self, fail_fast: bool) -> LoopOptions:
        return LoopOptions(
            batch_size=self.batch_size, prep_workers=self.workers, schedule=self.schedule, fail_fast=fail_fast
        )

    def describe(self) -> dict[str, Any]:
        return asdict(self)


FALLBACK_BATCH = 8


def fallback_plan(
    cores: int, why: str, batch_size: int | None = None, threads: int | None = None, schedule: str | None = None
) -> Plan:
    """``data_parallel``, a one-thread runner per core, batch :data:`FALLBACK_BATCH`; given values are kept."""
    chosen: Schedule = "pipelined" if schedule == "pipelined" else "data_parallel"
    t = threads or 1
    return Plan(chosen, batch_size or FALLBACK_BATCH, _workers(chosen, cores, t), t, f"fallback: {why}")


def plan_run(
    runner: Runner,
    pipeline: Pipeline,
    samples: Sequence[Sample],
    expected_shape: tuple[int, ...],
    *,
    batch_size: int | None,
    threads: int | None,
    schedule: str | None,
    cache_dir: Path,
    cores: int | None = None,
) -> Plan:
    """The plan of a run: the user's values where given, the rest from the (cached) calibration."""
    cores = cores or usable_cores()
    if schedule is not None and schedule not in SCHEDULES:
        raise RepliscopeError(f"unknown schedule '{schedule}' (allowed: {', '.join(SCHEDULES)})")
    if batch_size is not None and threads is not None and schedule is not None:
        given: Schedule = "data_parallel" if schedule == "data_parallel" else "pipelined"
        return Plan(given, batch_size, _workers(given, cores, threads), threads, "given")
    key = calibration_key(runner, pipeline, expected_shape, cores, batch_size, threads, schedule)
    path = cache_dir / "calibration" / f"{key}.json"
    cached = _read_cached(path)
    if cached is not None:
        return replace(cached, source="calibrated (cached)")
    if len(samples) < MIN_SAMPLES_TO_CALIBRATE:
        return fallback_plan(
            cores,
            f"{len(samples)} samples are fewer than {MIN_SAMPLES_TO_CALIBRATE}, too few "
            "to pay for a calibration (none cached for this model, runtime and machine)",
            batch_size,
            threads,
            schedule,
        )
    plan = calibrate(
        runner,
        pipeline,
        samples,
        expected_shape,
        cores=cores,
        batch_size=batch_size,
        threads=threads,
        schedule=schedule,
    )
    if plan.source != "calibrated":  # a fallback depends on this dataset: never cached
        return plan
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.part")
    tmp.write_text(json.dumps(plan.describe(), indent=1))
    tmp.replace(path)
    return plan


def _workers(schedule: str, cores: int, threads: int) -> int:
    """``data_parallel``: as many workers as fit their intra-op threads on the cores; ``pipelined``: one
    pre-processing thread per core (they release the GIL while the runtime computes)."""
    return max(1, cores // threads) if schedule == "data_parallel" else cores


def calibration_key(
    runner: Runner,
    pipeline: Pipeline,
    expected_shape: tuple[int, ...],
    cores: int,
    batch_size: int | None,
    threads: int | None,
    schedule: str | None,
) -> str:
    """24 hex digits over everything a calibration depends on (see the module docstring)."""
    framework, version = runner.framework()
    payload = {
        "runtime": runner.name,
        "framework": framework,
        "framework_version": version,
        "model_sha256": runner.artifact.sha256,
        "notes_precision": runner.notes.get("precision"),
        "input_shape": list(expected_shape),
        "input_dtype": runner.artifact.input_dtype,
        "preprocess": pipeline.describe()["preprocess"],
        "cpu": cpu_model(),
        "cores": cores,
        "repliscope": repliscope.__version__,
        "fixed": [batch_size, threads, schedule],
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:24]


def _read_cached(path: Path) -> Plan | None:
    try:
        data = json.loads(path.read_text())
        return Plan(**data)
    except (OSError, ValueError, TypeError):
        return None


def calibrate(
    runner: Runner,
    pipeline: Pipeline,
    samples: Sequence[Sample],
    expected_shape: tuple[int, ...],
    *,
    cores: int,
    batch_size: int | None = None,
    threads: int | None = None,
    schedule: str | None = None,
) -> Plan:
    """Measure (see the module docstring) and return the fastest plan consistent with the given values."""
    runner.load()  # an ONNX export or model build belongs to the run's load time, not to the calibration
    start = time.perf_counter()
    probe, inputs, t_prep = _probe(pipeline, samples, expected_shape)
    if not probe:
        return fallback_plan(
            cores,
            f"none of the first {PROBE_SAMPLES * 4} samples could be pre-processed",
            batch_size,
            threads,
            schedule,
        )
    one = runner.replica(threads=1)
    one.load()
    costs = {b: _infer_cost(one, inputs, b) for b in ((batch_size,) if batch_size else BATCH_SIZES)}
    best = min(costs.values())
    batch = min(b for b, c in costs.items() if c <= best * BATCH_TOLERANCE)
    candidates: list[tuple[Schedule, int]] = [
        (sched, threads or (1 if sched == "data_parallel" else cores))
        for sched in SCHEDULES
        if schedule in (None, sched)
    ]
    trial_samples = [probe[i % len(probe)] for i in range(max(64, cores * batch * 4))]
    trials: dict[str, float] = {}
    trial_runners = {t: one if t == 1 else runner.replica(threads=t) for _, t in candidates}
    for _ in range(TRIAL_ROUNDS):  # alternate the candidates: a burst of noise hits one round, not one candidate
        for sched, t in candidates:
            options = LoopOptions(batch_size=batch, prep_workers=_workers(sched, cores, t), schedule=sched)
            loop = run_loop(pipeline, trial_runners[t], trial_samples, options, expected_shape)
            name = f"{sched} threads={t}"
            trials[name] = max(trials.get(name, 0.0), len(trial_samples) / loop.loop_seconds)
    (sched, t) = max(candidates, key=lambda c: trials[f"{c[0]} threads={c[1]}"])
    measured = {
        "t_prep_ms": round(1000 * t_prep, 3),
        "t_infer_ms_by_batch": {str(b): round(1000 * c, 3) for b, c in costs.items()},
        "trials_samples_per_second": {k: round(v, 1) for k, v in trials.items()},
        "core_bound_samples_per_second": round(cores / (t_prep + best), 1),
        "cores": cores,
        "probe_samples": len(probe),
        "trial_samples": len(trial_samples),
        "seconds": round(time.perf_counter() - start, 2),
    }
    return Plan(sched, batch, _workers(sched, cores, t), t, "calibrated", measured)


def _probe(
    pipeline: Pipeline, samples: Sequence[Sample], expected_shape: tuple[int, ...]
) -> tuple[list[Sample], list[np.ndarray], float]:
    """Up to PROBE_SAMPLES samples that pre-process, held in memory; their inputs; t_prep (s/image)."""
    probe: list[Sample] = []
    inputs: list[np.ndarray] = []
    elapsed = 0.0
    for s in samples[: PROBE_SAMPLES * 4]:
        read = read_sample(s)
        if read.data is None:
            continue
        t0 = time.perf_counter()
        x, error = prepare_read(pipeline, read, expected_shape)
        elapsed += time.perf_counter() - t0
        if x is None or error:
            continue
        data = read.data
        probe.append(Sample(id=s.id, label=s.label, read=lambda data=data: data, location=s.location))  # type: ignore[misc]
        inputs.append(x)
        if len(probe) == PROBE_SAMPLES:
            break
    return probe, inputs, elapsed / max(1, len(probe))


def _infer_cost(runner: Runner, inputs: list[np.ndarray], batch: int) -> float:
    """Warm per-image seconds of ``runner`` at ``batch`` (inputs cycled), best of the timed repetitions."""
    x = np.stack([inputs[i % len(inputs)] for i in range(batch)])
    runner.infer(x)  # warm-up for this shape
    reps = max(2, -(-_MIN_TIMED_IMAGES // batch))
    best = float("inf")
    for _ in range(reps):
        runner.infer(x)
        best = min(best, runner.last_inference_seconds)
    return best / batch
