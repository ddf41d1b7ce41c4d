"""Benchmark one prepared manifest on one runtime and thread count: issue a scenario's load, build the record.

manifest -> :func:`repliscope.evaluation.run.prepare` (runner, pipeline) -> query sample library (pre-processed
before timing) -> scenario issue loop (:mod:`repliscope.bench.scenarios`) -> statistics
(:mod:`repliscope.bench.stats`) -> :class:`BenchmarkRecord` (with claim verdicts and the no-op overhead).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from typing import Any

import numpy as np

import repliscope
from repliscope.bench.clock import Clock, RealClock
from repliscope.bench.qsl import QuerySampleLibrary
from repliscope.bench.record import (
    BenchmarkRecord,
    EarlyStoppingResult,
    HarnessOverhead,
    LatencySummary,
    PeakPoint,
    PeakSearch,
    QuantileCI,
    cpu_governor,
    quantize_us,
)
from repliscope.bench.scenarios import METRIC_PERCENTILE, ScenarioRun, ScenarioSettings, run_scenario
from repliscope.bench.stats import (
    PERCENTILES,
    early_stopping_estimate,
    mean_interval,
    percentile,
    quantile_interval,
    server_early_stopping,
)
from repliscope.bench.sut import NoopRunner, QueryIssuer
from repliscope.datasets.base import Dataset
from repliscope.errors import RepliscopeError
from repliscope.evaluation.claims import MeasuredPerformance, judge_performance_claim
from repliscope.evaluation.record_builder import provenance
from repliscope.evaluation.run import PreparedRun, batch_limit, input_shape, runner_with_threads
from repliscope.runtimes.base import Runner

BENCH_DISTRIBUTIONS = ("opentelemetry-sdk",)
"""Recorded by every benchmark besides the manifest's own (:func:`~repliscope.evaluation.record_builder.provenance`):
the tracing SDK."""
LATENCY_ENDS = "response"
"""The record's ``settings.latency_ends``: a query's latency ends when the runtime's output is handed over as the
response (copied), LoadGen's ``QuerySamplesComplete``; the manifest's post-processing runs after it, untimed
(:class:`~repliscope.bench.sut.QueryIssuer`). Records without the key (before) timed the post-processing too."""
OVERHEAD_QUERIES = 2000
"""Queries of the no-op overhead measurement (about 50 ms of issuing)."""
PEAK_STEPS = 6
"""Binary-search steps of ``--find-peak-qps`` (each a full server run)."""


@dataclass(frozen=True)
class BenchOptions:
    """Everything of one benchmark besides the runtime and threads (recorded in the record's settings)."""

    scenario: ScenarioSettings
    timed_preprocess: bool = False
    trace_level: str = "none"
    find_peak_qps: bool = False
    overhead_queries: int = OVERHEAD_QUERIES


def make_tracer(level: str) -> Any:
    """The tracer of ``level`` (:func:`repliscope.tracing.make_tracer`; imported here, only when benchmarking)."""
    from repliscope.tracing import make_tracer as make

    return make(level, service="repliscope-bench")


def max_batch(prepared: PreparedRun, settings: ScenarioSettings) -> int | None:
    """1 for a model that takes one image at a time (:func:`repliscope.evaluation.run.batch_limit`), else None;
    an offline ``--batch-size`` above it is an error (the record would name a batch never run)."""
    limit = batch_limit(prepared)
    if limit is not None and settings.scenario == "offline" and settings.batch_size > limit:
        raise RepliscopeError(
            f"the model takes one image at a time (inputs[0].shape "
            f"{list(prepared.artifact.input_shape)}): offline --batch-size {settings.batch_size} "
            f"is not possible, use --batch-size {limit}"
        )
    return limit


def default_offline_batch(input_shape: Sequence[int]) -> int:
    """Offline's inference batch when ``--batch-size`` is not given: 1 for a model that takes one image at a time
    (``inputs[0].shape`` with the batch fixed at 1 or an image axis of any size, the rule of
    :func:`repliscope.evaluation.run.batch_limit`), else 8."""
    shape = list(input_shape)
    return 1 if shape and (shape[0] == 1 or any(d < 0 for d in shape[1:])) else 8


def measure_overhead(
    prepared: PreparedRun,
    settings: ScenarioSettings,
    trace_level: str,
    queries: int,
    clock: Clock,
    *,
    runner: Runner | None = None,
    qsl: QuerySampleLibrary | None = None,
) -> HarnessOverhead:
    """Issue ``queries`` queries of the scenario's shape through :class:`NoopRunner` (server: back to back, as
    single-stream, since waiting for arrivals is not overhead). Classification: zero inputs, zero scores. A model
    with named outputs (detection): copies of the library's first sample, and the no-op runtime answers each with
    the outputs ``runner`` gave for that sample, so the post-processing (decoding, NMS, geometry) does its real
    work on every query."""
    art = prepared.artifact
    named = prepared.inference.named_outputs
    if named:
        if runner is None or qsl is None:
            raise RepliscopeError("the overhead of a model with named outputs needs its runner and library")
        lib = qsl.repeat(0)
        canned = runner.infer_outputs(lib.batch([0], None))
        noop = NoopRunner(art, threads=1, cache_dir=prepared.runner.cache_dir, num_classes=1, canned=canned)
    else:
        num_classes = int(prepared.loaded.manifest.outputs[0].shape[-1])
        noop = NoopRunner(art, threads=1, cache_dir=prepared.runner.cache_dir, num_classes=num_classes)
        lib = QuerySampleLibrary.zeros(prepared.pipeline, input_shape(prepared), art.input_dtype)
    limit = max_batch(prepared, settings)
    scenario = "single-stream" if settings.scenario == "server" else settings.scenario
    s = replace(
        settings,
        scenario=scenario,
        min_queries=queries,
        min_duration_s=0.0,
        warmup_queries=50,
        samples_per_query=queries * settings.batch_size if scenario == "offline" else settings.samples_per_query,
    )
    issuers = [
        QueryIssuer(
            lib,
            noop,
            prepared.pipeline,
            make_tracer(trace_level),
            postprocess=post,
            named_outputs=named,
            max_batch=limit,
        )
        for post in (True, False)
    ]
    runs = [run_scenario(issuer, len(lib), s, clock) for issuer in issuers]
    per_query = []
    for run in runs:
        lat = run.latencies_s if scenario != "offline" else np.diff(np.append(run.starts_s, run.duration_s))
        per_query.append((lat * 1e6, run.duration_s / run.queries * 1e6))
    (full, full_cycle), (loop, loop_cycle) = per_query
    return HarnessOverhead(
        queries=runs[0].queries,
        latency_p50_us=float(np.median(full)),
        latency_mean_us=float(full.mean()),
        cycle_mean_us=full_cycle,
        loop_p50_us=float(np.median(loop)),
        loop_cycle_mean_us=loop_cycle,
        postprocess_mean_us=issuers[0].postprocess_seconds / max(issuers[0].postprocessed, 1) * 1e6,
    )


def find_peak_qps(
    issue: QueryIssuer, n: int, settings: ScenarioSettings, clock: Clock, steps: int = PEAK_STEPS
) -> tuple[PeakSearch, ScenarioRun | None]:
    """Binary search (geometric) of the highest target QPS whose server-scenario p99 meets the latency bound,
    between ``1 / mean service time`` (one worker cannot sustain more) and 1/16 of it. Returns the search and
    the run at the peak (None when even the lowest rate misses the bound)."""
    bound = settings.latency_bound_ms
    if bound is None:
        raise RepliscopeError("--find-peak-qps needs --latency-bound-ms")
    probe = run_scenario(
        issue, n, replace(settings, scenario="single-stream", min_queries=50, min_duration_s=0.0), clock
    )
    high = 1.0 / float(probe.latencies_s.mean())
    tried: list[PeakPoint] = []
    runs: dict[float, ScenarioRun] = {}

    def meets(qps: float) -> bool:
        run = runs[qps] = run_scenario(issue, n, replace(settings, target_qps=qps), clock)
        p99 = percentile(run.latencies_s * 1e3, 0.99)
        tried.append(PeakPoint(qps=qps, p99_ms=p99, meets_bound=p99 <= bound))
        return p99 <= bound

    good = high / 16
    if not meets(good):
        return PeakSearch(latency_bound_ms=bound, tried=tried, peak_qps=None), None
    if meets(high):
        good = high
    else:
        for _ in range(steps):
            mid = float(np.sqrt(good * high))
            if meets(mid):
                good = mid
            else:
                high = mid
    return PeakSearch(latency_bound_ms=bound, tried=tried, peak_qps=good), runs[good]


def latency_summary(lat_ms: np.ndarray) -> LatencySummary:
    """Percentiles (LoadGen's order statistic) with distribution-free 95 % intervals, mean, min, max."""
    out = {}
    for name, p in PERCENTILES.items():
        ci = quantile_interval(lat_ms, p)
        out[name] = QuantileCI(value=percentile(lat_ms, p), low=ci.low, high=ci.high, coverage=ci.coverage)
    return LatencySummary(percentiles=out, mean=float(lat_ms.mean()), min=float(lat_ms.min()), max=float(lat_ms.max()))


def early_stopping(lat_ms: np.ndarray, s: ScenarioSettings) -> EarlyStoppingResult | None:
    """LoadGen's early stopping for the scenario's percentile (None for offline)."""
    p = METRIC_PERCENTILE[s.scenario]
    if p is None:
        return None
    if s.scenario == "server":
        assert s.latency_bound_ms is not None
        srv = server_early_stopping(lat_ms, s.latency_bound_ms, p)
        return EarlyStoppingResult(
            percentile=p, queries=srv.queries, overlatency=srv.overlatency, needed=srv.needed, passed=srv.passed
        )
    est = early_stopping_estimate(lat_ms, p)
    return EarlyStoppingResult(
        percentile=p,
        queries=est.queries,
        estimate_ms=est.estimate,
        min_queries=est.min_queries,
        discarded=est.discarded,
    )


def throughput_interval(run: ScenarioRun, s: ScenarioSettings) -> tuple[float, float] | None:
    """95 % interval of samples/s from the per-query cycle times (issue to next issue) of back-to-back
    scenarios and offline batches; None for server (its rate is the arrival rate) or fewer than 2 queries."""
    if s.scenario == "server" or run.queries < 2:
        return None
    cycles = (
        np.diff(np.append(run.starts_s, run.duration_s))[:-1]
        if s.scenario == "offline"
        else np.diff(np.append(run.starts_s, run.duration_s))
    )
    if len(cycles) < 2:
        return None
    _, low, high = mean_interval(cycles)
    per = s.batch_of_query
    return (per / high, per / low) if low > 0 else None


def thread_mismatch(runner: Runner, threads: int) -> str | None:
    """Why ``runner`` does not run ``threads`` intra-op threads, when its notes say so (TensorFlow / Keras on
    TensorFlow: process-global pools fixed at their first use, ``thread_pools.matches_requested``); else None."""
    pools = runner.notes.get("thread_pools")
    if isinstance(pools, dict) and pools.get("matches_requested") is False:
        return (
            f"{runner.name} runs {pools.get('intra_op')} intra-op threads, not the {threads} asked: its thread "
            "pools are process-global and were fixed earlier in this process (benchmark each thread count "
            "in a process of its own)"
        )
    return None


def validity(run: ScenarioRun, lat_ms: np.ndarray, s: ScenarioSettings, stop: EarlyStoppingResult | None) -> list[str]:
    """Why the run is not a valid LoadGen result (empty list: valid)."""
    reasons = []
    if s.scenario != "offline" and run.queries < s.min_queries:
        reasons.append(f"{run.queries} queries < --min-queries {s.min_queries}")
    if run.duration_s < s.min_duration_s:
        reasons.append(
            f"ran {run.duration_s:.3f} s < --min-duration {s.min_duration_s} s"
            + (" (raise --samples-per-query)" if s.scenario == "offline" else "")
        )
    if stop is not None and s.scenario != "server" and stop.estimate_ms is None:
        reasons.append(
            f"early stopping needs at least {stop.min_queries} queries for the p{stop.percentile * 100:g} estimate"
        )
    if s.scenario == "server":
        assert s.latency_bound_ms is not None and stop is not None
        p99 = percentile(lat_ms, 0.99)
        if p99 > s.latency_bound_ms:
            reasons.append(f"p99 {p99:.3f} ms > the bound {s.latency_bound_ms} ms (lower --target-qps)")
        if not stop.passed:
            reasons.append(
                f"early stopping: {stop.overlatency} over-latency queries need {stop.needed} queries, "
                f"ran {stop.queries}"
            )
    return reasons


def measured_performance(rec: BenchmarkRecord) -> MeasuredPerformance:
    """The benchmark's values for performance claims: p90 / p99 latency with their intervals (not offline, whose
    latencies are per sample of one query), throughput with its interval (not server, whose rate is the
    ``--target-qps`` given or found, not a measurement: a claim of it is "not comparable", not "run longer")."""
    values: dict[str, tuple[float, float | None, float | None]] = {}
    if rec.scenario != "offline":
        for metric, key in (("latency_p90_ms", "p90"), ("latency_p99_ms", "p99")):
            q = rec.latency.percentiles[key]
            values[metric] = (q.value, q.low, q.high)
    ci = rec.throughput_ci
    if rec.scenario != "server":
        values["throughput"] = (rec.throughput_samples_per_second, ci[0] if ci else None, ci[1] if ci else None)
    cpu = str(rec.hardware.get("cpu_model", "unknown"))
    return MeasuredPerformance(
        scenario=rec.scenario,
        batch_size=int(rec.settings["batch_size"]),
        cpu_model=cpu,
        threads=rec.threads,
        runtime=str(rec.runtime["runtime"]),
        values=values,
        description=f"{rec.scenario}, batch {rec.settings['batch_size']}, {rec.threads} "
        f"thread{'' if rec.threads == 1 else 's'} on {cpu}, {rec.runtime['runtime']}",
    )


def run_benchmark(
    prepared: PreparedRun,
    dataset: Dataset,
    qsl: QuerySampleLibrary,
    threads: int,
    options: BenchOptions,
    *,
    tracer: Any = None,
    clock: Clock | None = None,
    matrix_id: str | None = None,
) -> BenchmarkRecord:
    """Load the runner with ``threads`` intra-op threads, issue ``options.scenario``'s load on ``qsl`` (traced by
    ``tracer``, default: one of ``options.trace_level``), measure the no-op overhead, build the record."""
    clock = clock or RealClock()
    tracer = tracer if tracer is not None else make_tracer(options.trace_level)
    s = options.scenario
    runner = runner_with_threads(prepared.runner, threads)
    runner.load()
    limit = max_batch(prepared, s)
    issue = QueryIssuer(
        qsl, runner, prepared.pipeline, tracer, named_outputs=prepared.inference.named_outputs, max_batch=limit
    )
    peak = None
    with (
        tracer.span("run", "application", command="bench", scenario=s.scenario, runtime=runner.name, threads=threads),
        tracer.instrument(runner),
    ):
        if options.find_peak_qps:
            peak, found = find_peak_qps(issue, len(qsl), s, clock)
            if found is None or peak.peak_qps is None:
                raise RepliscopeError(
                    f"no target QPS meets p99 <= {s.latency_bound_ms} ms, not even "
                    f"{peak.tried[0].qps:.3g} QPS (p99 {peak.tried[0].p99_ms:.3g} ms)"
                )
            s = replace(s, target_qps=peak.peak_qps)
            run = found
        else:
            run = run_scenario(issue, len(qsl), s, clock)
    overhead = measure_overhead(
        prepared, s, options.trace_level, options.overhead_queries, clock, runner=runner, qsl=qsl
    )
    lat_us = quantize_us(run.latencies_s)
    lat_ms = lat_us / 1000.0
    stop = early_stopping(lat_ms, s)
    reasons = validity(run, lat_ms, s, stop)
    mismatch = thread_mismatch(runner, threads)
    if mismatch is not None:
        reasons.append(mismatch)
    loaded = prepared.loaded
    ran = provenance(prepared, runner, prepared.pipeline, BENCH_DISTRIBUTIONS)
    rec = BenchmarkRecord(
        benchmark_id=uuid.uuid4().hex,
        created_at=datetime.now(UTC),
        repliscope_version=repliscope.__version__,
        **{**ran, "hardware": {**ran["hardware"], "cpu_governor": cpu_governor()}},
        dataset={
            **dataset.describe(qsl.fingerprints),
            "query_samples": len(qsl),
            "failed_samples": dict(list(qsl.failures.items())[:100]),
        },
        settings={
            **asdict(s),
            "threads": threads,
            "batch_size": s.batch_of_query,
            "inference_batch": min(s.batch_of_query, limit or s.batch_of_query),
            "outputs": "infer_outputs (named)" if issue.named_outputs else "infer (scores)",
            "timed_preprocess": options.timed_preprocess,
            "trace_level": options.trace_level,
            "find_peak_qps": options.find_peak_qps,
            "clock": type(clock).__name__,
            "latency_ends": LATENCY_ENDS,
        },
        latency=latency_summary(lat_ms),
        throughput_samples_per_second=run.samples / run.duration_s if run.duration_s > 0 else 0.0,
        throughput_ci=throughput_interval(run, s),
        queries=1 if s.scenario == "offline" else run.queries,
        samples=run.samples,
        duration_seconds=run.duration_s,
        early_stopping=stop,
        valid=not reasons,
        invalid_reasons=reasons,
        overhead=overhead,
        peak=peak,
        claims=[],
        matrix_id=matrix_id,
        latencies_us=lat_us.tolist(),
    )
    measured = measured_performance(rec)
    rec.claims = [judge_performance_claim(c, measured) for c in loaded.manifest.claims if c.is_performance]
    return rec
