"""A benchmark matrix: every runtime x thread count on one manifest and one query sample library, and the table of
ratios against the fastest configuration.

The scenario's metric decides "fastest": the p90 (single-stream) or p99 (multi-stream, server) latency, lowest
first, or the throughput (offline), highest first. Every ratio is >= 1 (1 for the fastest).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from repliscope.bench.qsl import QuerySampleLibrary
from repliscope.bench.record import BenchmarkRecord
from repliscope.bench.run import BenchOptions, make_tracer, run_benchmark
from repliscope.datasets.base import Dataset
from repliscope.evaluation.run import PreparedRun, RunSettings, input_shape, prepare
from repliscope.manifest.loader import LoadedManifest

METRIC_KEY = {"single-stream": "p90", "multi-stream": "p99", "server": "p99", "offline": None}


@dataclass
class MatrixResult:
    """The records in configuration order (runtime-major), their shared ``matrix_id`` (None for a single
    configuration) and each one's tracer (to write or store its trace)."""

    records: list[BenchmarkRecord]
    matrix_id: str | None
    tracers: list[Any]


def metric_of(rec: BenchmarkRecord) -> tuple[str, float]:
    """(metric name, value) the configurations are ranked by."""
    key = METRIC_KEY[rec.scenario]
    if key is None:
        return "throughput (samples/s)", rec.throughput_samples_per_second
    return f"{key} latency (ms)", rec.latency.percentiles[key].value


def ratio_rows(records: Sequence[BenchmarkRecord]) -> list[dict[str, Any]]:
    """One row per record: runtime, threads, the metric, its ratio to the fastest, throughput, p50."""
    values = [metric_of(r)[1] for r in records]
    offline = bool(records) and METRIC_KEY[records[0].scenario] is None
    best = max(values) if offline else min(values)
    rows = []
    for rec, value in zip(records, values, strict=True):
        ratio = (best / value if value > 0 else float("inf")) if offline else (value / best if best > 0 else 1.0)
        rows.append(
            {
                "benchmark_id": rec.benchmark_id,
                "runtime": rec.runtime["runtime"],
                "threads": rec.threads,
                "metric": metric_of(rec)[0],
                "value": value,
                "ratio_to_fastest": ratio,
                "p50_ms": rec.latency.percentiles["p50"].value,
                "throughput_samples_per_second": rec.throughput_samples_per_second,
            }
        )
    return rows


def run_matrix(
    loaded: LoadedManifest,
    dataset: Dataset,
    runtimes: Sequence[str],
    threads: Sequence[int],
    options: BenchOptions,
    *,
    settings: RunSettings | None = None,
    on_config: Callable[[str, int], None] | None = None,
    prepared_override: Callable[[PreparedRun], PreparedRun] | None = None,
) -> MatrixResult:
    """Benchmark each runtime with each thread count on one library (pre-processed once, with the first runtime's
    pipeline: the pipeline is the manifest's, the same for every runtime). ``on_config(runtime, threads)`` is
    called before each configuration; ``prepared_override`` lets tests swap the runner."""
    base = settings or RunSettings(runtime=runtimes[0])
    matrix_id = uuid.uuid4().hex if len(runtimes) * len(threads) > 1 else None
    result = MatrixResult(records=[], matrix_id=matrix_id, tracers=[])
    qsl: QuerySampleLibrary | None = None
    for runtime in runtimes:
        prepared = prepare(loaded, replace(base, runtime=runtime, threads=threads[0]))
        if prepared_override is not None:
            prepared = prepared_override(prepared)
        if qsl is None:
            qsl = QuerySampleLibrary.load(
                prepared.pipeline,
                dataset.samples,
                input_shape(prepared),
                options.timed_preprocess,
                prepared.artifact.input_dtype,
            )
        for n in threads:
            if on_config is not None:
                on_config(runtime, n)
            tracer = make_tracer(options.trace_level)
            result.records.append(run_benchmark(prepared, dataset, qsl, n, options, tracer=tracer, matrix_id=matrix_id))
            result.tracers.append(tracer)
    return result
