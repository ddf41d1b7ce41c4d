"""Choose how a run uses the cores (schedule and threads) from interleaved, repeated trials; keep checking it.

The loop has two schedules (see :mod:`repliscope.evaluation.engine`). Which one is faster depends on the model,
the runtime and the machine (and on what else the machine runs), so it is measured, not guessed, and a choice
is only made when the measurement is clearly better than the noise:

1. Candidates (:func:`candidates`), the documented default first (:func:`fallback_plan`): ``data_parallel``, one
   worker with a one-thread runner per core, batch :data:`FALLBACK_BATCH`; then ``pipelined``, the runtime with
   every core as intra-op threads and one pre-processing thread per core beside it. Values the user gave
   (``--batch-size``, ``--threads``, ``--schedule``) are kept in every candidate.
2. Trials (:func:`interleaved_trials`): :data:`TRIAL_ROUNDS` rounds, each running every candidate once, in the
   same order (A/B/A/B...), so that a change of machine load hits both candidates alike. A trial is a loop over
   :func:`trial_size` samples timed like the real loop (load and warm-up excluded). In ``evaluate`` the trials
   are the run's own first samples: their predictions are kept, nothing is thrown away
   (:mod:`repliscope.evaluation.adaptive`). A caller that needs the plan before its loop (a pitfall sweep, a
   traced run) runs them with :func:`calibrate` on the first samples that pre-process, cycled. An alternative
   slower than :data:`DROP_BELOW` x the default in a round runs no further rounds (it cannot be picked).
3. The noise rule (:func:`pick`): per round, the log ratio of an alternative's rate to the default's (paired,
   since the two ran side by side); its mean ``m`` over the rounds and standard error ``se``. The alternative is
   picked only when ``m > max(t * se, log(1 + MIN_GAIN))`` (``t``: the one-sided 95 % Student t quantile for the
   number of rounds, :data:`T95`); otherwise the default runs. Both the gain and the noise are recorded.
4. The online check (:func:`clearly_below`): the run times its first samples after the choice and compares the
   rate with the calibration's prediction for the best alternative. Clearly below it (by more than
   ``max(noise, CLEARLY)``), the cache entry is removed and the run re-calibrates on its next samples (once per
   run), switching plan when the new trials say so.

A calibration is cached (JSON under ``<cache>/calibration/``) by everything it depends on: runtime and its
version, model sha256, input shape, the resolved pre-processing, CPU model, usable cores, repliscope version,
the values the user fixed and the candidates' default batch (:data:`FALLBACK_BATCH`); each entry records the
machine load (:func:`os.getloadavg`) and the time it was made.
A dataset smaller than :data:`MIN_SAMPLES_TO_CALIBRATE` without a cached calibration runs the default plan
(``fallback: ...``), and the record says so.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import repliscope
from repliscope.datasets.base import Sample, read_sample
from repliscope.errors import RepliscopeError
from repliscope.evaluation.engine import SCHEDULES, LoopOptions, Schedule, prepare_read, run_loop
from repliscope.evaluation.provenance import cpu_model, usable_cores
from repliscope.ops.pipeline import Pipeline
from repliscope.runtimes.base import Runner

FALLBACK_BATCH = 2
"""The default plan's batch size (and every candidate's, unless ``--batch-size`` is given). Small: a
one-thread runtime's cost per image grows with the batch (Lite0 on ONNX Runtime, 1 thread: 4.28 / 4.46 / 4.63 /
5.07 ms an image at batch 1 / 2 / 4 / 8), a ``data_parallel`` worker alternates reading and inference at a finer
grain, and a segment's last wave leaves a core idle for less time; batch 1 pays the per-batch Python once per
image (``benchmarks/bench_evaluate.py`` prints the per-batch figures)."""
PROBE_SAMPLES = 16
""":func:`calibrate` (the plan before the loop): the trials cycle the first this many samples that pre-process."""
MIN_SAMPLES_TO_CALIBRATE = 200
TRIAL_ROUNDS = 3
"""A/B rounds: three paired ratios give a noise estimate (two degrees of freedom)."""
MIN_TRIAL_SAMPLES = 32
"""Samples of one trial in the run (:func:`trial_size`); :func:`calibrate` uses half (its samples are extra work)."""
MIN_GAIN = 0.03
"""An alternative must beat the default by at least 3 % (and by more than the noise) to be picked."""
DROP_BELOW = 0.67
"""An alternative slower than this fraction of the default in a round runs no further trials."""
CLEARLY = 0.10
"""The online check: a measured rate at least 10 % (or the calibration's noise, if larger) under the best
alternative's prediction is clearly below it."""
T95 = {1: 6.314, 2: 2.920, 3: 2.353, 4: 2.132, 5: 2.015, 6: 1.943, 7: 1.895, 8: 1.860, 9: 1.833}
"""One-sided 95 % quantiles of Student's t by degrees of freedom (rounds - 1); 1.645 beyond."""

TrialFunction = Callable[["Plan", int], float]
"""``trial(plan, round) -> samples/s``: run one trial of ``plan`` (its ``round``-th) and return its rate."""


@dataclass(frozen=True)
class Plan:
    """How one run uses the machine: ``workers`` is pre-processing threads (``pipelined``) or workers with a
    runner each (``data_parallel``); ``threads`` is each runner's intra-op threads."""

    schedule: Schedule
    batch_size: int
    workers: int
    threads: int
    source: str
    """``given`` (every value from the user), ``calibrated`` (before the loop), ``calibrated in the run``,
    ``calibrated (cached)``, ``candidate``, or ``fallback: <why>``; a switch made by the online check says so."""
    calibration: dict[str, Any] = field(default_factory=dict)
    """The measurements behind a calibrated plan (``trials_samples_per_second`` per round,
    ``predicted_samples_per_second``, ``gain_over_default``, ``noise``, ``load_average``, ...)."""

    @property
    def key(self) -> str:
        """The candidate's name in the trials, e.g. ``data_parallel threads=1``."""
        return f"{self.schedule} threads={self.threads}"

    def loop_options(self, fail_fast: bool, keep_outputs: bool = False) -> LoopOptions:
        """The loop's options of this plan (``fail_fast`` and ``keep_outputs``: the run's)."""
        return LoopOptions(
            batch_size=self.batch_size,
            prep_workers=self.workers,
            schedule=self.schedule,
            fail_fast=fail_fast,
            keep_outputs=keep_outputs,
        )

    def describe(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Planning:
    """What :func:`planning` resolved: a ``plan`` (given, cached or fallback) or None (calibrate among
    ``candidates``, the default first); ``cache_path`` is where a calibration of this run is cached (None:
    never, e.g. every value was given)."""

    plan: Plan | None
    candidates: tuple[Plan, ...] = ()
    cache_path: Path | None = None


def fallback_plan(
    cores: int, why: str, batch_size: int | None = None, threads: int | None = None, schedule: str | None = None
) -> Plan:
    """The documented default: ``data_parallel``, a one-thread runner per core, batch :data:`FALLBACK_BATCH`;
    given values are kept."""
    chosen: Schedule = "pipelined" if schedule == "pipelined" else "data_parallel"
    t = threads or 1
    return Plan(chosen, batch_size or FALLBACK_BATCH, _workers(chosen, cores, t), t, f"fallback: {why}")


def candidates(cores: int, batch_size: int | None, threads: int | None, schedule: str | None) -> tuple[Plan, ...]:
    """The plans a calibration compares, the default (``data_parallel``) first; given values kept."""
    batch = batch_size or FALLBACK_BATCH
    out = []
    for sched in ("data_parallel", "pipelined"):
        if schedule in (None, sched):
            t = threads or (1 if sched == "data_parallel" else cores)
            out.append(Plan(sched, batch, _workers(sched, cores, t), t, "candidate"))
    return tuple(out)


def _workers(schedule: str, cores: int, threads: int) -> int:
    """``data_parallel``: as many workers as fit their intra-op threads on the cores; ``pipelined``: one
    pre-processing thread per core (they release the GIL while the runtime computes)."""
    return max(1, cores // threads) if schedule == "data_parallel" else cores


def trial_size(cands: Sequence[Plan], minimum: int | None = None) -> int:
    """Samples of one trial: at least ``minimum`` (default :data:`MIN_TRIAL_SAMPLES`) and two full waves of
    every candidate's workers, rounded up to whole waves (a trial ending on a partial wave would time idle
    cores)."""
    wave = max(c.workers * c.batch_size for c in cands) if cands else 1
    n = max(MIN_TRIAL_SAMPLES if minimum is None else minimum, 2 * wave)
    return -(-n // wave) * wave


def interleaved_trials(
    cands: Sequence[Plan], trial: TrialFunction, rounds: int | None = None
) -> dict[str, list[float]]:
    """A/B/A/B...: ``rounds`` (default :data:`TRIAL_ROUNDS`) rounds, each calling ``trial`` once per candidate
    in order -> rates by plan key (one per round, in order). An alternative slower than :data:`DROP_BELOW` x the
    default in a round runs no further rounds (it cannot be picked; the trials are real work of the run, and a
    far slower plan would cost it)."""
    rates: dict[str, list[float]] = {c.key: [] for c in cands}
    running = list(cands)
    for r in range(TRIAL_ROUNDS if rounds is None else rounds):
        for c in running:
            rates[c.key].append(trial(c, r))
        base = rates[cands[0].key][-1]
        running = [c for i, c in enumerate(running) if i == 0 or rates[c.key][-1] >= DROP_BELOW * base]
    return rates


def pick(cands: Sequence[Plan], rates: dict[str, list[float]]) -> tuple[Plan, dict[str, Any]]:
    """The noise rule (module docstring, 3.): the alternative with the largest mean paired log ratio over the
    default (``cands[0]``) when it exceeds the noise, else the default -> (plan, measurements). An alternative
    dropped before the last round (:func:`interleaved_trials`) is not picked; its noise is None."""
    default = cands[0]
    base = [max(r, 1e-9) for r in rates[default.key]]
    chosen, chosen_gain = default, 0.0
    gains: dict[str, float] = {}
    noise: dict[str, float | None] = {}
    for c in cands[1:]:
        logs = [math.log(max(a, 1e-9) / b) for a, b in zip(rates[c.key], base, strict=False)]
        n = len(logs)
        mean = statistics.fmean(logs)
        se = statistics.stdev(logs) / math.sqrt(n) if n > 1 else math.inf
        threshold = max(T95.get(n - 1, 1.645) * se, math.log1p(MIN_GAIN))
        gains[c.key] = round(math.expm1(mean), 4)
        noise[c.key] = round(math.expm1(threshold), 4) if math.isfinite(threshold) else None
        if n == len(base) and mean > threshold and mean > chosen_gain:
            chosen, chosen_gain = c, mean
    measured = {
        "default": default.key,
        "trials_samples_per_second": {k: [round(v, 2) for v in vs] for k, vs in rates.items()},
        "predicted_samples_per_second": {k: round(statistics.median(vs), 2) for k, vs in rates.items()},
        "gain_over_default": gains,
        "noise": noise,
        "rounds": len(base),
    }
    return chosen, measured


def clearly_below(plan: Plan, measured: float) -> str | None:
    """The online check: why ``measured`` (samples/s of ``plan`` in this run) is clearly below the best
    alternative's prediction in ``plan.calibration``, or None when it is not (or nothing was predicted)."""
    predicted = plan.calibration.get("predicted_samples_per_second") or {}
    others = {k: v for k, v in predicted.items() if k != plan.key}
    if not others:
        return None
    alt, rate = max(others.items(), key=lambda kv: kv[1])
    noise = [v for v in (plan.calibration.get("noise") or {}).values() if v is not None and math.isfinite(v)]
    margin = max([CLEARLY, *noise])
    if measured * (1 + margin) < rate:
        return (
            f"{plan.key} ran {measured:.1f} samples/s, clearly below the {rate:.1f} predicted for {alt} "
            f"(margin {100 * margin:.0f} %)"
        )
    return None


def machine_load() -> list[float] | None:
    """The 1, 5 and 15 minute load averages (:func:`os.getloadavg`), None where the system has none."""
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except (OSError, AttributeError):
        return None


def chosen_plan(chosen: Plan, measured: dict[str, Any], source: str, seconds: float, trial_samples: int) -> Plan:
    """The calibrated plan with its measurements, the machine load and the time of the calibration."""
    measured = {
        **measured,
        "trial_samples": trial_samples,
        "seconds": round(seconds, 2),
        "load_average": machine_load(),
        "cores": usable_cores(),
        "calibrated_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    return replace(chosen, source=source, calibration=measured)


def planning(
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
) -> Planning:
    """The user's values where given; else the cached calibration, or the candidates to calibrate, or (too few
    samples and nothing cached) the default plan."""
    cores = cores or usable_cores()
    if schedule is not None and schedule not in SCHEDULES:
        raise RepliscopeError(f"unknown schedule '{schedule}' (allowed: {', '.join(SCHEDULES)})")
    if batch_size is not None and threads is not None and schedule is not None:
        given: Schedule = "data_parallel" if schedule == "data_parallel" else "pipelined"
        return Planning(Plan(given, batch_size, _workers(given, cores, threads), threads, "given"))
    cands = candidates(cores, batch_size, threads, schedule)
    key = calibration_key(runner, pipeline, expected_shape, cores, batch_size, threads, schedule)
    path = cache_dir / "calibration" / f"{key}.json"
    cached = _read_cached(path)
    if cached is not None:
        return Planning(replace(cached, source="calibrated (cached)"), cands, path)
    if len(samples) < MIN_SAMPLES_TO_CALIBRATE:
        why = (
            f"{len(samples)} samples are fewer than {MIN_SAMPLES_TO_CALIBRATE}, too few "
            "to pay for a calibration (none cached for this model, runtime and machine)"
        )
        return Planning(fallback_plan(cores, why, batch_size, threads, schedule))
    return Planning(None, cands, path)


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
    """The plan before the loop: :func:`planning`, calibrating with :func:`calibrate` (and caching) when
    nothing is cached."""
    cores = cores or usable_cores()
    p = planning(
        runner,
        pipeline,
        samples,
        expected_shape,
        batch_size=batch_size,
        threads=threads,
        schedule=schedule,
        cache_dir=cache_dir,
        cores=cores,
    )
    if p.plan is not None:
        return p.plan
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
    if plan.source == "calibrated" and p.cache_path is not None:  # a fallback depends on this dataset
        write_cached(p.cache_path, plan)
    return plan


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
        "default_batch": FALLBACK_BATCH,  # a plan calibrated among other candidates is not reused
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:24]


def _read_cached(path: Path) -> Plan | None:
    try:
        data = json.loads(path.read_text())
        return Plan(**data)
    except (OSError, ValueError, TypeError):
        return None


def write_cached(path: Path, plan: Plan) -> None:
    """Write the cache entry atomically (a concurrent reader sees the old entry or the new one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.part")
    tmp.write_text(json.dumps(replace(plan, source="calibrated").describe(), indent=1))
    tmp.replace(path)


def invalidate(path: Path | None) -> None:
    """Remove a cache entry the run found wrong (the online check)."""
    if path is not None:
        path.unlink(missing_ok=True)


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
    """The plan before the loop: interleaved trials on the first :data:`PROBE_SAMPLES` samples that
    pre-process (cycled, held in memory; this work is extra), then the noise rule."""
    runner.load()  # an ONNX export or model build belongs to the run's load time, not to the calibration
    start = time.perf_counter()
    cands = candidates(cores, batch_size, threads, schedule)
    probe = _probe(pipeline, samples, expected_shape)
    if not probe:
        why = f"none of the first {PROBE_SAMPLES * 4} samples could be pre-processed"
        return fallback_plan(cores, why, batch_size, threads, schedule)
    n = trial_size(cands, MIN_TRIAL_SAMPLES // 2)
    trial_samples = [probe[i % len(probe)] for i in range(n)]
    pool: dict[int, list[Runner]] = {}
    warmed: set[str] = set()

    def trial(plan: Plan, _round: int) -> float:
        runners = plan_runners(pool, runner, plan)
        options = LoopOptions(plan.batch_size, plan.workers, plan.schedule, warmup=plan.key not in warmed)
        warmed.add(plan.key)
        loop = run_loop(pipeline, runners[0], trial_samples, options, expected_shape, replicas=runners[1:])
        return len(trial_samples) / max(loop.loop_seconds, 1e-9)

    rates = interleaved_trials(cands, trial) if len(cands) > 1 else {}
    chosen, measured = pick(cands, rates) if rates else (cands[0], {})
    measured["probe_samples"] = len(probe)
    return chosen_plan(chosen, measured, "calibrated", time.perf_counter() - start, n)


def plan_runners(pool: dict[int, list[Runner]], base: Runner, plan: Plan) -> list[Runner]:
    """The runners of ``plan`` (one per ``data_parallel`` worker), made once per thread count and reused."""
    have = pool.setdefault(plan.threads, [base if base.threads == plan.threads else base.replica(plan.threads)])
    need = plan.workers if plan.schedule == "data_parallel" else 1
    while len(have) < need:
        have.append(have[0].replica())
    return have[:need]


def _probe(pipeline: Pipeline, samples: Sequence[Sample], expected_shape: tuple[int, ...]) -> list[Sample]:
    """Up to PROBE_SAMPLES of the first PROBE_SAMPLES * 4 samples that pre-process, their bytes in memory."""
    probe: list[Sample] = []
    for s in samples[: PROBE_SAMPLES * 4]:
        read = read_sample(s)
        if read.data is None:
            continue
        x, error = prepare_read(pipeline, read, expected_shape)
        if x is None or error:
            continue
        data = read.data
        probe.append(Sample(id=s.id, label=s.label, read=lambda data=data: data, location=s.location))  # type: ignore[misc]
        if len(probe) == PROBE_SAMPLES:
            break
    return probe
