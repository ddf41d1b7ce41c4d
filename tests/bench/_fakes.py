"""A fake runtime with deterministic latencies on a virtual clock, for exact scenario tests, and helpers."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from repliscope.bench.clock import VirtualClock
from repliscope.bench.qsl import QuerySampleLibrary
from repliscope.bench.record import BenchmarkRecord
from repliscope.bench.run import BenchOptions, run_benchmark
from repliscope.bench.scenarios import ScenarioSettings
from repliscope.datasets.base import Dataset
from repliscope.evaluation.provenance import cpu_model
from repliscope.evaluation.run import PreparedRun
from repliscope.manifest.schema import ClaimHardware, ClaimSpec, DatasetRef
from repliscope.runtimes.base import ModelArtifact, Runner

UNIT = 1 / 1024
"""Latencies are multiples of 1/1024 s, so sums on the virtual clock are exact in binary floating point."""


class FakeRunner(Runner):
    """Each ``infer`` advances ``clock`` by the next latency of ``latencies_s`` (cycled), times the batch size
    when ``per_sample``; returns zeros (N, 1000)."""

    name = "fake"

    def __init__(
        self,
        artifact: ModelArtifact,
        *,
        threads: int,
        cache_dir: Path,
        clock: VirtualClock,
        latencies_s: Sequence[float],
        per_sample: bool = False,
    ) -> None:
        super().__init__(artifact, threads=threads, cache_dir=cache_dir)
        self.clock = clock
        self.latencies_s = list(latencies_s)
        self.per_sample = per_sample
        self.batch_sizes: list[int] = []

    def framework(self) -> tuple[str, str]:
        return "fake", "1"

    def _load(self) -> None:
        return None

    def _infer(self, batch: np.ndarray) -> np.ndarray:
        n = batch.shape[0]
        lat = self.latencies_s[len(self.batch_sizes) % len(self.latencies_s)]
        self.batch_sizes.append(n)
        self.clock.advance(lat * n if self.per_sample else lat)
        return np.zeros((n, 1000), dtype=np.float32)


class FakeIssue:
    """An ``issue(indices)`` that records the indices and advances the clock like :class:`FakeRunner`."""

    def __init__(self, clock: VirtualClock, latencies_s: Sequence[float], per_sample: bool = False) -> None:
        self.clock = clock
        self.latencies_s = list(latencies_s)
        self.per_sample = per_sample
        self.calls: list[list[int]] = []

    def __call__(self, indices: Sequence[int]) -> None:
        lat = self.latencies_s[len(self.calls) % len(self.latencies_s)]
        self.calls.append(list(indices))
        self.clock.advance(lat * len(indices) if self.per_sample else lat)


CYCLE = [k * UNIT for k in range(1, 11)]
"""1..10 units: 55 units per 10 queries."""

Base = tuple[PreparedRun, Dataset, QuerySampleLibrary]
"""The real Lite0 manifest (with performance claims added) prepared for onnxruntime, the foolbox dataset, and its
query sample library (``tests/bench/conftest.py: base``)."""


def perf_claim(metric: str, value: float, **kw: object) -> ClaimSpec:
    """A performance claim measured here (this CPU, 1 thread, single-stream, batch 1) unless ``kw`` says else."""
    fields: dict[str, object] = {
        "scenario": "single-stream",
        "batch_size": 1,
        "hardware": ClaimHardware(cpu_model=cpu_model(), threads=1),
        "runtime": "fake",
    }
    return ClaimSpec.model_validate(
        {
            "metric": metric,
            "value": value,
            "source": "test",
            "dataset": DatasetRef(name="imagenet-1k", split="val"),
            **fields,
            **kw,
        }
    )


def run_fake(
    base: Base, scenario: ScenarioSettings, tracer: object = None, latencies: Sequence[float] = CYCLE
) -> tuple[BenchmarkRecord, FakeRunner]:
    """:func:`run_benchmark` with a :class:`FakeRunner` of ``latencies`` on a fresh virtual clock."""
    prepared, data, qsl = base
    clock = VirtualClock()
    fake = FakeRunner(
        prepared.artifact, threads=1, cache_dir=prepared.runner.cache_dir, clock=clock, latencies_s=latencies
    )
    rec = run_benchmark(
        replace(prepared, runner=fake),
        data,
        qsl,
        1,
        BenchOptions(scenario=scenario, overhead_queries=100),
        tracer=tracer,
        clock=clock,
    )
    return rec, fake
