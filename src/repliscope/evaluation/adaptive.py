"""A run that calibrates on its own first samples and checks its choice as it goes.

:func:`run_adaptive` evaluates the dataset in segments, in order, each a :func:`run_loop` of one plan:

1. without a cached calibration, :data:`~repliscope.evaluation.calibration.TRIAL_ROUNDS` interleaved rounds
   of trials (A/B/A/B, :func:`~repliscope.evaluation.calibration.interleaved_trials`) on the next samples of the
   dataset, then the noise rule (:func:`~repliscope.evaluation.calibration.pick`); the choice is cached;
2. the online check: the chosen (or cached) plan runs :func:`check_size` samples, and when its rate is clearly
   below the best alternative's prediction (:func:`~repliscope.evaluation.calibration.clearly_below`) the cache
   entry is removed and step 1 runs again on the next samples (once per run), which may switch the plan (with
   too few samples left for trials, the run switches to the predicted alternative and caches nothing);
3. the rest of the dataset in one loop of the final plan.

Before step 1, every runner the run may need (each candidate's, or the cached plan's) loads on a thread while
this thread reads and pre-processes the samples after the trials and the check
(:func:`~repliscope.evaluation.warm_start.warm_start`): the seconds of an ONNX export or a model build are spent
beside the reading, and the measured segments (trials, check) still read their own samples.

Every sample is evaluated exactly once, by whichever plan ran its segment: the trials are real work. Results do
not depend on the plan (a sample's prediction does not depend on its batch or worker), so the result hash is
the one a single loop gives. The runners of each plan are made once and reused by its segments (warm-up on
the first); the timings add the segments' loops, each runner's load once, and the warm-ups.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from repliscope.datasets.base import Sample
from repliscope.evaluation import calibration
from repliscope.evaluation.calibration import (
    Plan,
    Planning,
    chosen_plan,
    clearly_below,
    interleaved_trials,
    invalidate,
    pick,
    plan_runners,
    trial_size,
    write_cached,
)
from repliscope.evaluation.engine import LoopOptions, LoopResult, ProgressCallback, run_loop
from repliscope.evaluation.warm_start import Prefetched, warm_start
from repliscope.ops.pipeline import Pipeline
from repliscope.runtimes.base import Runner
from repliscope.tracing.tracer import current_tracer

if TYPE_CHECKING:
    from repliscope.tasks.base import Task


def check_size(cands: Sequence[Plan]) -> int:
    """Samples of the online check: two trials' worth."""
    return 2 * trial_size(cands)


def trials_size(cands: Sequence[Plan]) -> int:
    """Samples of one in-run calibration: every round's trials."""
    return calibration.TRIAL_ROUNDS * len(cands) * trial_size(cands)


def fits_in_run(n_samples: int, cands: Sequence[Plan]) -> bool:
    """Do the trials and the check fit in at most half of the run (else :func:`calibrate` runs before it)?"""
    return trials_size(cands) + check_size(cands) <= n_samples // 2


@dataclass
class SegmentedRun:
    """The dataset run in consecutive segments of one plan each, the results concatenated in order."""

    pipeline: Pipeline
    base: Runner
    samples: Sequence[Sample]
    expected_shape: tuple[int, ...] | None
    options: LoopOptions
    """Template: fail_fast and keep_outputs are taken from it; batch, workers and schedule from each plan."""
    on_progress: ProgressCallback | None = None
    task: Task | None = None
    position: int = 0
    segments: list[dict[str, Any]] = field(default_factory=list)
    ahead: Prefetched | None = None
    """Samples read ahead while the runners loaded (:meth:`warm_start`), taken by the segments that run them."""
    _pool: dict[int, list[Runner]] = field(default_factory=dict)
    _warmed: set[str] = field(default_factory=set)
    _start: float = field(default_factory=time.perf_counter)

    def __post_init__(self) -> None:
        self._base_loaded_before = self.base.loaded
        self.result = LoopResult(predictions=[], fingerprints=[], outputs={} if self.options.keep_outputs else None)

    @property
    def remaining(self) -> int:
        return len(self.samples) - self.position

    def runners(self, plan: Plan) -> list[Runner]:
        """The runners of ``plan`` (one per ``data_parallel`` worker), made once per thread count."""
        return plan_runners(self._pool, self.base, plan)

    def run(self, plan: Plan, n: int | None = None, role: str = "run") -> float:
        """Evaluate the next ``n`` samples (default: all the rest) with ``plan`` -> its rate (samples/s)."""
        chunk = self.samples[self.position : None if n is None else self.position + n]
        if not chunk:
            return 0.0
        runners = self.runners(plan)
        options = replace(
            self.options,
            batch_size=plan.batch_size,
            prep_workers=plan.workers,
            schedule=plan.schedule,
            warmup=plan.key not in self._warmed,
        )
        self._warmed.add(plan.key)
        loop = run_loop(
            self.pipeline,
            runners[0],
            chunk,
            options,
            self.expected_shape,
            self.on_progress,
            self.task,
            replicas=runners[1:],
            ahead=self.ahead,
        )
        self.position += len(chunk)
        r = self.result
        assert r.fingerprints is not None and loop.fingerprints is not None
        r.predictions.extend(loop.predictions)
        r.fingerprints.extend(loop.fingerprints)
        r.batch_latencies.extend(loop.batch_latencies)
        r.inference_seconds += loop.inference_seconds
        r.warmup_seconds += loop.warmup_seconds
        r.loop_seconds += loop.loop_seconds
        r.ahead += loop.ahead
        r.ahead_seconds += loop.ahead_seconds
        r.ahead_share += loop.ahead_share
        if r.outputs is not None and loop.outputs is not None:
            r.outputs.update(loop.outputs)
        rate = len(chunk) / max(loop.rate_seconds, 1e-9)  # samples read ahead: their preparation counted in
        segment = {"plan": plan.key, "role": role, "samples": len(chunk), "samples_per_second": round(rate, 2)}
        if loop.ahead:
            segment["read_ahead"] = loop.ahead  # read while the model loaded
            segment["read_ahead_cpu_seconds"] = round(loop.ahead_seconds, 4)
        self.segments.append(segment)
        return rate

    def warm_start(self, plans: Sequence[Plan], skip: int) -> None:
        """Load the runners of ``plans`` while reading ahead the samples after the first ``skip`` (those of the
        measured segments); untraced runs only (a traced run's spans cover every sample's reading)."""
        if current_tracer().rank:
            return
        runners = [r for plan in plans for r in self.runners(plan)]
        self.ahead = warm_start(runners, self.pipeline, self.samples[self.position + skip :], self.expected_shape)

    def finish(self) -> LoopResult:
        """The concatenated result: load = each distinct runner's load once (the base runner's too when it
        was loaded, e.g. by an ONNX export), total = wall time since the start plus the base runner's load when
        that happened before."""
        runners = {id(r): r for rs in self._pool.values() for r in rs}
        runners.setdefault(id(self.base), self.base)
        self.result.load_seconds = sum(r.load_seconds for r in runners.values() if r.loaded)
        earlier = self.base.load_seconds if self._base_loaded_before else 0.0
        self.result.total_seconds = time.perf_counter() - self._start + earlier
        return self.result


def calibrate_in_run(run: SegmentedRun, cands: Sequence[Plan], source: str) -> Plan:
    """Interleaved trials on the run's next samples, then the noise rule -> the calibrated plan. Its ``seconds``
    are the trials' loops (the real work they did), not the loads and warm-ups of the runners they made first
    (e.g. an ONNX export, counted in the run's load time)."""
    before = run.result.loop_seconds
    n = trial_size(cands)
    chosen, measured = pick(cands, interleaved_trials(cands, lambda plan, _r: run.run(plan, n, "trial")))
    return chosen_plan(chosen, measured, source, run.result.loop_seconds - before, n)


def recalibrate(run: SegmentedRun, cands: Sequence[Plan], previous: Plan, why: str, cache_path: Path | None) -> Plan:
    """After a failed online check: new trials on the next samples when they fit in half of the rest (the
    result is cached), else the best alternative of the prediction for the rest (nothing cached: the next run
    calibrates)."""
    if trials_size(cands) <= run.remaining // 2:
        plan = calibrate_in_run(run, cands, "re-calibrated in the run")
        if cache_path is not None:
            write_cached(cache_path, plan)
    else:
        predicted = previous.calibration["predicted_samples_per_second"]
        best = max((c for c in cands if c.key != previous.key), key=lambda c: predicted.get(c.key, 0.0))
        plan = replace(best, source="switched in the run", calibration=dict(previous.calibration))
    kept = f"kept {plan.key}" if plan.key == previous.key else f"switched from {previous.key} to {plan.key}"
    calibration = {**plan.calibration, "recalibrated_because": why}
    return replace(plan, source=f"{plan.source} ({why}; {kept})", calibration=calibration)


def run_adaptive(
    planning: Planning,
    pipeline: Pipeline,
    base: Runner,
    samples: Sequence[Sample],
    options: LoopOptions,
    expected_shape: tuple[int, ...] | None,
    on_progress: ProgressCallback | None = None,
    task: Task | None = None,
) -> tuple[LoopResult, Plan]:
    """Run ``samples`` as the module docstring says -> (the result in dataset order, the final plan with the
    segments that ran in ``calibration["segments"]``). ``planning`` holds a cached plan or the candidates."""
    run = SegmentedRun(pipeline, base, samples, expected_shape, options, on_progress, task)
    cands = planning.candidates
    plan = planning.plan
    if plan is None and len(cands) == 1:
        plan = replace(cands[0], source="given (the only candidate: nothing to calibrate)")
    checked = bool(plan is None or plan.calibration.get("predicted_samples_per_second"))
    measured = (trials_size(cands) if plan is None else 0) + (check_size(cands) if checked else 0)
    run.warm_start([plan] if plan is not None else cands, measured)
    if plan is None:
        plan = calibrate_in_run(run, cands, "calibrated in the run")
        if planning.cache_path is not None:
            write_cached(planning.cache_path, plan)
    predicted = bool(plan.calibration.get("predicted_samples_per_second"))
    rate = run.run(plan, check_size(cands), "check") if predicted else 0.0
    why = clearly_below(plan, rate) if predicted and run.remaining else None
    if why is not None:
        invalidate(planning.cache_path)
        plan = recalibrate(run, cands, plan, why, planning.cache_path)
    run.run(plan)
    result = run.finish()
    return result, replace(plan, calibration={**plan.calibration, "segments": run.segments})
