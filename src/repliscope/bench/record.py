"""The benchmark record: one scenario run of one runtime / thread count, with the provenance of evaluation records.

Pure data (pydantic). Latencies are kept per query (offline: per sample) in issue order as float32-exact
microseconds (``latencies_us``), so the store's compact float32 copy rebuilds an equal record and every
statistic can be recomputed from the stored values.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from repliscope.evaluation.record import ClaimVerdict, ManifestInfo


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class QuantileCI(_Model):
    """A percentile (ms) and its distribution-free 95 % interval (order statistics; None: too few queries)."""

    value: float
    low: float | None
    high: float | None
    coverage: float


class LatencySummary(_Model):
    """Latency statistics in milliseconds; ``percentiles`` keyed p50, p90, p95, p99, p999 (LoadGen's
    ``floor(n * p)`` order statistic)."""

    percentiles: dict[str, QuantileCI]
    mean: float
    min: float
    max: float


class EarlyStoppingResult(_Model):
    """LoadGen's early stopping. Single-/multi-stream: ``estimate_ms`` (None below ``min_queries``) of the
    ``percentile``. Server: ``overlatency`` queries above the bound, ``needed`` queries to pass, ``passed``."""

    percentile: float
    queries: int
    estimate_ms: float | None = None
    min_queries: int | None = None
    discarded: int | None = None
    overlatency: int | None = None
    needed: int | None = None
    passed: bool | None = None


class HarnessOverhead(_Model):
    """The same issue loop on the no-op runtime (zeros, no work), in µs per query. ``latency_*``: inside the
    measured latency (batching, spans, the runner's timing wrapper, the response's copy; the post-processing runs
    after completion, outside it); ``cycle_mean_us``: the loop's whole cost per query (duration / queries), with
    the manifest's post-processing ops after each completion (real work on the zero scores; offline: after its one
    query, so in neither); ``loop_*``: the same without the post-processing ops, i.e. the harness alone;
    ``postprocess_mean_us``: the post-processing ops per inference, timed where they run."""

    queries: int
    latency_p50_us: float
    latency_mean_us: float
    cycle_mean_us: float
    loop_p50_us: float
    loop_cycle_mean_us: float
    postprocess_mean_us: float | None = None
    """The manifest's post-processing ops per inference, after each completion (None: a record made before)."""


class PeakPoint(_Model):
    qps: float
    p99_ms: float
    meets_bound: bool


class PeakSearch(_Model):
    """``--find-peak-qps``: every target QPS tried (binary search) and the highest whose p99 met the bound."""

    latency_bound_ms: float
    tried: list[PeakPoint]
    peak_qps: float | None


class BenchmarkRecord(_Model):
    benchmark_id: str
    created_at: datetime
    repliscope_version: str
    kind: Literal["benchmark"] = "benchmark"
    manifest: ManifestInfo
    pipeline: dict[str, list[dict[str, Any]]]
    runtime: dict[str, Any]
    software: dict[str, Any]
    hardware: dict[str, Any]
    dataset: dict[str, Any]
    settings: dict[str, Any]
    """scenario, threads, batch size, samples per query, minimums, warm-up, seed, target QPS, bound, timed
    pre-processing, trace level, ``latency_ends`` (``response``: the latency ends when the runtime's output is
    handed over, the post-processing runs after it; absent in records made before)."""
    latency: LatencySummary
    throughput_samples_per_second: float
    throughput_ci: tuple[float, float] | None
    """95 % Student-t interval from the per-query cycle times (back-to-back scenarios and offline batches)."""
    queries: int
    samples: int
    duration_seconds: float
    early_stopping: EarlyStoppingResult | None
    valid: bool
    invalid_reasons: list[str]
    overhead: HarnessOverhead
    peak: PeakSearch | None = None
    claims: list[ClaimVerdict]
    matrix_id: str | None = None
    latencies_us: list[float]

    @property
    def scenario(self) -> str:
        return str(self.settings["scenario"])

    @property
    def threads(self) -> int:
        return int(self.settings["threads"])

    def latencies_ms(self) -> np.ndarray:
        return np.asarray(self.latencies_us, dtype=np.float64) / 1000.0

    def summary(self) -> dict[str, Any]:
        """The flat result (``--json``): scenario, latency_ms {p50, p90, p95, p99, p999}, latency_ends (what a
        latency ends at: ``response``; None in records made before), throughput_samples_per_second, queries,
        runtime, threads, and the rest worth scripting on."""
        return {
            "benchmark_id": self.benchmark_id,
            "scenario": self.scenario,
            "runtime": self.runtime["runtime"],
            "threads": self.threads,
            "batch_size": self.settings["batch_size"],
            "latency_ms": {k: q.value for k, q in self.latency.percentiles.items()},
            "latency_ci_ms": {k: [q.low, q.high] for k, q in self.latency.percentiles.items()},
            "latency_mean_ms": self.latency.mean,
            "latency_ends": self.settings.get("latency_ends"),
            "throughput_samples_per_second": self.throughput_samples_per_second,
            "queries": self.queries,
            "samples": self.samples,
            "duration_seconds": self.duration_seconds,
            "early_stopping": self.early_stopping.model_dump() if self.early_stopping else None,
            "valid": self.valid,
            "invalid_reasons": self.invalid_reasons,
            "harness_overhead_us": self.overhead.model_dump(),
            "peak": self.peak.model_dump() if self.peak else None,
            "claims": [c.model_dump() for c in self.claims],
            "matrix_id": self.matrix_id,
        }


def quantize_us(latencies_s: np.ndarray) -> np.ndarray:
    """Seconds -> float32-exact microseconds (float64 array), the precision latencies are kept at."""
    return (np.asarray(latencies_s, dtype=np.float64) * 1e6).astype(np.float32).astype(np.float64)


def cpu_governor() -> str | None:
    """cpu0's cpufreq scaling governor (``performance``, ``powersave`` ...), None when not readable."""
    try:
        return Path("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor").read_text().strip() or None
    except OSError:
        return None
