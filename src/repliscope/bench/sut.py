"""The system under test: one query = batch from the library, infer with a :class:`Runner`, post-process.

:class:`NoopRunner` returns zeros of the output shape without any work: issuing the same load through it
measures what the harness itself adds to every query (batching, spans, the runner's timing wrapper,
post-processing, the issue loop).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import numpy as np

from repliscope.bench.qsl import QuerySampleLibrary
from repliscope.ops.base import Predictions
from repliscope.ops.pipeline import Pipeline
from repliscope.runtimes.base import ModelArtifact, Runner


class NoopRunner(Runner):
    """``infer``: any (N, ...) batch -> float32 zeros (N, ``num_classes``); loads nothing, computes nothing."""

    name = "noop"

    def __init__(self, artifact: ModelArtifact, *, threads: int, cache_dir: Path, num_classes: int = 1000) -> None:
        super().__init__(artifact, threads=threads, cache_dir=cache_dir)
        self.num_classes = num_classes
        self._zeros = np.zeros((1, num_classes), dtype=np.float32)

    def framework(self) -> tuple[str, str]:
        return "repliscope-noop", "0"

    def _load(self) -> None:
        return None

    def _infer(self, batch: np.ndarray) -> np.ndarray:
        n = batch.shape[0]
        if self._zeros.shape[0] != n:
            self._zeros = np.zeros((n, self.num_classes), dtype=np.float32)
        return self._zeros


class QueryIssuer:
    """``issue(indices)``: one query, traced as a ``query`` span (level ``model``; warm-up queries inside one
    ``warmup`` span) with children
    ``preprocess/<op>`` (timed-preprocess libraries only), ``inference`` and ``postprocess/<op>``
    (``postprocess=False``: none, for measuring the loop without the manifest's post-processing)."""

    def __init__(self, qsl: QuerySampleLibrary, runner: Runner, pipeline: Pipeline, tracer: Any,
                 postprocess: bool = True) -> None:
        self.qsl = qsl
        self.runner = runner
        self.post_ops = [(f"postprocess/{op.name}", op) for op in pipeline.post_ops] if postprocess else []
        self.tracer = tracer

    def warmup(self, queries: int) -> AbstractContextManager[None]:
        """The ``warmup`` span (level ``model``) around a scenario's ``queries`` untimed queries."""
        return self.tracer.span("warmup", "model", queries=queries)

    def __call__(self, indices: Sequence[int]) -> None:
        span = self.tracer.span
        with span("query", "model"):
            batch = self.qsl.batch(indices, self.tracer)
            with span("inference", "model"):
                scores = self.runner.infer(batch)
            preds = Predictions(scores=np.asarray(scores, dtype=np.float32))
            for name, op in self.post_ops:
                with span(name, "model"):
                    preds = op(preds)
