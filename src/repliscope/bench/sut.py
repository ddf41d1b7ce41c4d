"""The system under test: one query = batch from the library, infer with a :class:`Runner`, hand over the
output as the response; the post-processing runs after the query's completion (:meth:`QueryIssuer.complete`).

A model with named outputs (a detection model, or several outputs) is run through ``Runner.infer_outputs`` and
its post-processing (:meth:`Pipeline.postprocess`, as in the evaluation loop) gets every output by name and each
row's geometry; a model that
takes one image at a time (``max_batch`` 1) is run once per sample of a query.

:class:`NoopRunner` returns zeros of the output shape (or one fixed set of named outputs) without any work:
issuing the same load through it measures what the harness itself adds to every query (batching, spans, the
runner's timing wrapper, the response's copy, the issue loop; and per issue cycle, the post-processing after
each completion).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import numpy as np

from repliscope.bench.qsl import QuerySampleLibrary
from repliscope.ops.base import Geometry, Predictions
from repliscope.ops.pipeline import Pipeline
from repliscope.runtimes.base import ModelArtifact, Outputs, Runner
from repliscope.tracing.levels import RANK

MODEL_RANK = RANK["model"]


class NoopRunner(Runner):
    """``infer``: any (N, ...) batch -> float32 zeros (N, ``num_classes``); ``infer_outputs``: ``canned`` (every
    named output of ONE sample, batch axis 1) repeated N times on the batch axis; loads nothing, computes
    nothing."""

    name = "noop"

    def __init__(
        self,
        artifact: ModelArtifact,
        *,
        threads: int,
        cache_dir: Path,
        num_classes: int = 1000,
        canned: dict[str, np.ndarray] | None = None,
    ) -> None:
        super().__init__(artifact, threads=threads, cache_dir=cache_dir)
        self.num_classes = num_classes
        self._zeros = np.zeros((1, num_classes), dtype=np.float32)
        self.canned = canned
        self._repeated: dict[int, dict[str, np.ndarray]] = {}

    def framework(self) -> tuple[str, str]:
        return "repliscope-noop", "0"

    def _load(self) -> None:
        return None

    def _infer(self, batch: np.ndarray) -> np.ndarray:
        n = batch.shape[0]
        if self._zeros.shape[0] != n:
            self._zeros = np.zeros((n, self.num_classes), dtype=np.float32)
        return self._zeros

    def _infer_outputs(self, batch: np.ndarray) -> dict[str, np.ndarray]:
        if self.canned is None:
            return super()._infer_outputs(batch)
        n = batch.shape[0]
        if n not in self._repeated:
            self._repeated[n] = {k: np.repeat(v, n, axis=0) for k, v in self.canned.items()}
        return dict(self._repeated[n])  # a new dict: post-processing ops may replace entries


RESPONSE_HOLD_BYTES = 256 * 2**20
"""The most bytes of responses a :class:`QueryIssuer` holds before post-processing them inside the next query
(an offline query of many large detection outputs); below it post-processing never runs inside a query."""


def _copy(outputs: Outputs) -> Outputs:
    """The response: a copy of the runtime's outputs (a runtime may reuse its output buffers on the next
    inference)."""
    if isinstance(outputs, dict):
        return {k: np.array(v, copy=True) for k, v in outputs.items()}
    return np.array(outputs, copy=True)


def _nbytes(outputs: Outputs) -> int:
    return sum(v.nbytes for v in outputs.values()) if isinstance(outputs, dict) else outputs.nbytes


class QueryIssuer:
    """``issue(indices)``: one query, from its issue to the runtime's output; ``complete()``: the manifest's
    post-processing of the queries answered since the last call, run by the scenario AFTER it stamped their
    completion. That is LoadGen's definition: a query's latency ends when the system under test hands over its
    response (``QuerySamplesComplete``); accuracy is scored afterwards from the logged responses. The response is
    the runtime's output, copied (:func:`_copy`); the predictions are those the post-processing would have
    given inside the query, in the same order (the same ops on the same outputs and geometry).

    Traced as a ``query`` span (level ``model``; warm-up queries inside one ``warmup`` span) with children
    ``preprocess/<op>`` (timed-preprocess libraries only) and ``inference``; ``complete()`` records one
    ``postprocess/<op>`` span per op and inference, after the query (``postprocess=False``: none, for
    measuring the loop without the manifest's post-processing).

    ``named_outputs``: run ``Runner.infer_outputs`` (every output by name, e.g. a detector's boxes and scores)
    and post-process them with each row's geometry; else ``Runner.infer`` (one (N, C) score array).
    ``max_batch``: the most samples one inference takes (1: a model that takes one image at a time; the query's
    samples are then inferred one by one, an ``inference`` span each); None: the whole query. ``last``: the
    predictions of the last inference post-processed; ``keep=True``: every inference's predictions in
    ``predictions``, in issue order (checks; a benchmark keeps only ``last`` and the count ``postprocessed``).
    Responses above :data:`RESPONSE_HOLD_BYTES` not yet completed are post-processed inside the next query.

    What runs between a query's issue and its completion is kept to the query's own work: with the tracer
    below level ``model`` (nothing recorded) and a pre-processed library, a query is one list look-up (each
    sample's input is held with its batch axis, :meth:`QuerySampleLibrary.row`), the backend's inference
    (:meth:`Runner.query_call`: no load check and no timestamps of the runner's own, the scenario times the
    query) and the copy of its output; no span context managers are entered. ``lean=False``: always the spanned
    path (``benchmarks/bench_harness.py`` times both in one run)."""

    def __init__(
        self,
        qsl: QuerySampleLibrary,
        runner: Runner,
        pipeline: Pipeline,
        tracer: Any,
        postprocess: bool = True,
        *,
        named_outputs: bool = False,
        max_batch: int | None = None,
        lean: bool = True,
        keep: bool = False,
    ) -> None:
        self.qsl = qsl
        self.runner = runner
        self.pipeline = pipeline if postprocess else Pipeline(pipeline.pre_ops, ())
        self.tracer = tracer
        self.named_outputs = named_outputs
        self.max_batch = max_batch
        self.last: Predictions | None = None
        self.keep = keep
        self.predictions: list[Predictions] = []
        self.postprocessed = 0
        """Inferences post-processed so far."""
        self.postprocess_seconds = 0.0
        """Their post-processing's time in all (timed in :meth:`complete`, outside every latency)."""
        self._pending: list[tuple[Outputs, list[Geometry | None]]] = []
        self._pending_bytes = 0
        self._lean = lean and not qsl.timed_preprocess and tracer.rank < MODEL_RANK
        self._run: Callable[[np.ndarray], Outputs] | None = None
        """The runner's inference for the lean path, bound on the first query (which loads the runner)."""

    def warmup(self, queries: int) -> AbstractContextManager[None]:
        """The ``warmup`` span (level ``model``) around a scenario's ``queries`` untimed queries."""
        return self.tracer.span("warmup", "model", queries=queries)

    @property
    def pending(self) -> int:
        """Inferences answered and not yet post-processed."""
        return len(self._pending)

    def __call__(self, indices: Sequence[int]) -> None:
        if self._pending_bytes > RESPONSE_HOLD_BYTES:
            self.complete()
        if self._lean:
            self._issue_lean(indices)
            return
        step = self.max_batch or len(indices)
        with self.tracer.span("query", "model"):
            for lo in range(0, len(indices), step):
                self._infer(indices[lo : lo + step])

    def complete(self, limit: int | None = None) -> int:
        """Post-process the responses not yet post-processed (``limit``: at most that many, the oldest), in
        issue order, after their completion; returns how many."""
        count = len(self._pending) if limit is None else min(limit, len(self._pending))
        if count == 0:
            return 0
        start = time.perf_counter()
        done, self._pending = self._pending[:count], self._pending[count:]
        post, tracer, keep = self.pipeline.postprocess, self.tracer, self.keep
        for outputs, geometry in done:
            self._pending_bytes -= _nbytes(outputs)
            self.last = post(outputs, tracer, geometry=geometry)
            if keep:
                self.predictions.append(self.last)
        self.postprocessed += count
        self.postprocess_seconds += time.perf_counter() - start
        return count

    def _respond(self, outputs: Outputs, geometry: list[Geometry | None]) -> None:
        response = _copy(outputs)
        self._pending.append((response, geometry))
        self._pending_bytes += _nbytes(response)

    def _infer(self, indices: Sequence[int]) -> None:
        batch, geometry = self.qsl.batch_with_geometry(indices, self.tracer)
        with self.tracer.span("inference", "model"):
            outputs = self.runner.infer_outputs(batch) if self.named_outputs else self.runner.infer(batch)
        self._respond(outputs, geometry)

    def _issue_lean(self, indices: Sequence[int]) -> None:
        """The query without spans (the tracer records nothing at this level): the same inference as
        :meth:`_infer`, with the least Python between issue and completion."""
        run = self._run
        if run is None:
            run = self._run = self.runner.query_call(self.named_outputs)
        qsl = self.qsl
        step = self.max_batch or len(indices)
        if step == 1 or len(indices) == 1:
            for i in indices:
                self._respond(run(qsl.row(i)), qsl.row_geometry(i))
            return
        for lo in range(0, len(indices), step):
            batch, geometry = qsl.batch_with_geometry(indices[lo : lo + step], None)
            self._respond(run(batch), geometry)
