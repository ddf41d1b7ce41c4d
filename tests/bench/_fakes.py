"""A fake runtime with deterministic latencies on a virtual clock, for exact scenario tests."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from repliscope.bench.clock import VirtualClock
from repliscope.runtimes.base import ModelArtifact, Runner

UNIT = 1 / 1024
"""Latencies are multiples of 1/1024 s, so sums on the virtual clock are exact in binary floating point."""


class FakeRunner(Runner):
    """Each ``infer`` advances ``clock`` by the next latency of ``latencies_s`` (cycled), times the batch size
    when ``per_sample``; returns zeros (N, 1000)."""

    name = "fake"

    def __init__(self, artifact: ModelArtifact, *, threads: int, cache_dir: Path, clock: VirtualClock,
                 latencies_s: Sequence[float], per_sample: bool = False) -> None:
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
