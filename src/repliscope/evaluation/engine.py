"""The evaluation loop, in one of two schedules (:data:`SCHEDULES`), batch by batch.

``pipelined``: while the runtime runs batch n (with its intra-op threads), ``prep_workers`` threads decode and
pre-process batches n+1 .. n+prefetch (decoders and numpy release the GIL). At most ``prefetch + 1`` batches of
inputs exist at once, so memory stays bounded.

``data_parallel``: ``prep_workers`` workers, each with a runner of its own (a :meth:`Runner.replica`), take whole
batches and read, pre-process and infer them, so every core alternates between pre-processing and inference and
none waits for the other stage. Results are collected in dataset order; at most ``workers + prefetch`` batches are
in flight. On a 2-core machine with a runtime that costs twice the pre-processing this reaches 0.91 of the
tight two-core bound where ``pipelined`` reaches 0.80 (``benchmarks/bench_evaluate.py``, Lite0 on ONNX Runtime).
A sample that fails (unreadable, corrupt, wrong shape after pre-processing) is recorded with its reason.
Every sample's file is read exactly once, by the worker that pre-processes it; the sha256 of the bytes read
(or the unreadable reason) is kept per sample (``LoopResult.fingerprints``) for the dataset identity.
"""

from __future__ import annotations

import re
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from queue import SimpleQueue
from typing import TYPE_CHECKING, Literal, NamedTuple

import numpy as np

from repliscope.datasets.base import Sample, SampleRead, read_sample
from repliscope.errors import RepliscopeError, SampleError
from repliscope.evaluation.record import SamplePrediction
from repliscope.ops.base import Geometry, Item, PreOp
from repliscope.ops.pipeline import Pipeline
from repliscope.runtimes.base import Runner
from repliscope.tracing.levels import RANK
from repliscope.tracing.tracer import NO_TRACER, Tracer, current_tracer

if TYPE_CHECKING:
    from repliscope.tasks.base import Task

MODEL_RANK = RANK["model"]

ProgressCallback = Callable[[int], None]
"""Called with the number of samples finished since the last call."""


Schedule = Literal["pipelined", "data_parallel"]
SCHEDULES: tuple[Schedule, ...] = ("pipelined", "data_parallel")


@dataclass(frozen=True)
class LoopOptions:
    """``prep_workers``: pre-processing threads (``pipelined``) or workers with a runner each
    (``data_parallel``)."""

    batch_size: int
    prep_workers: int
    schedule: Schedule = "pipelined"
    prefetch_batches: int = 2
    fail_fast: bool = False
    warmup: bool = True
    """One warm-up inference (zeros, the first batch's shape) after loading, outside the measured loop."""
    keep_outputs: bool = False
    """Keep every sample's raw model output (:attr:`LoopResult.outputs`), e.g. to compare software stacks."""


@dataclass
class LoopResult:
    """Per-sample predictions in dataset order, plus timings in seconds.

    ``total_seconds`` = ``load_seconds`` (model build / ONNX export / session) + ``warmup_seconds`` +
    ``loop_seconds`` (the measured loop: pre-processing and inference of every sample).
    """

    predictions: list[SamplePrediction]
    batch_latencies: list[float] = field(default_factory=list)
    inference_seconds: float = 0.0
    total_seconds: float = 0.0
    load_seconds: float = 0.0
    warmup_seconds: float = 0.0
    loop_seconds: float = 0.0
    fingerprints: list[str] | None = None
    """Per sample, in order: sha256 hex of the bytes read, or the ``unreadable: ...`` reason (see
    :meth:`Dataset.identity_from`). None when the loop that made this result did not record them."""
    outputs: dict[str, np.ndarray] | None = None
    """With :attr:`LoopOptions.keep_outputs`: sample id -> its raw model output as a float32 1-D array (the score
    row; with named outputs, each output's row flattened and concatenated in output-name order). Failed samples
    have none. None otherwise."""


RawOutputs = dict[str, np.ndarray] | None
"""Sample id -> raw output row (float32, 1-D) of one batch's samples, with :attr:`LoopOptions.keep_outputs`."""


Prepared = tuple[np.ndarray | None, str | None]
"""(model input without batch axis, None) or (None, failure reason)."""


class PreparedItem(NamedTuple):
    """One pre-processed sample: the model input without batch axis (None when the sample failed), the
    failure reason, and the sample's :class:`Geometry` (where the input's pixels came from; detection)."""

    data: np.ndarray | None
    error: str | None
    geometry: Geometry | None = None


def apply_op(op: PreOp, item: Item, tracer: Tracer | None = None) -> Item | str:
    """The op's output, or the failure reason (a sample failure: recorded, never dropped); a
    ``preprocess/<op name>`` span of ``tracer`` (default: the current tracer) at trace level ``model`` or deeper.

    A RepliscopeError that is not a SampleError is a pipeline mistake (e.g. ops out of order) and stops the run.
    """
    t = current_tracer() if tracer is None else tracer
    if t.rank >= MODEL_RANK:
        with t.span(f"preprocess/{op.name}", "model"):
            return _apply(op, item)
    return _apply(op, item)


def _apply(op: PreOp, item: Item) -> Item | str:
    try:
        return op(item)
    except SampleError as exc:
        return stable_reason(str(exc))
    except RepliscopeError:
        raise
    except Exception as exc:  # a library raised on this sample's content: record it, keep going
        return stable_reason(f"{type(exc).__name__}: {exc}")


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def stable_reason(reason: str) -> str:
    """A failure reason without object addresses (``<_io.BytesIO object at 0x7f..>``), so that the result
    hash of two identical runs is identical even when samples fail."""
    return _ADDRESS.sub("", reason)


def shape_error(data: np.ndarray, expected_shape: tuple[int, ...] | None) -> str | None:
    """Why ``data`` (one sample, no batch axis) cannot be the model input of ``expected_shape`` (a dynamic axis,
    -1, takes any size); None when it can."""
    if expected_shape is None:
        return None
    if data.ndim != len(expected_shape) or any(
        w >= 0 and g != w for g, w in zip(data.shape, expected_shape, strict=True)
    ):
        return f"pre-processed shape {tuple(data.shape)} does not match the model input {expected_shape}"
    return None


def prepare_sample(pipeline: Pipeline, sample: Sample, expected_shape: tuple[int, ...] | None) -> Prepared:
    """Read + pre-process one sample -> (model input without batch axis, None) or (None, failure reason)."""
    return prepare_read(pipeline, read_sample(sample), expected_shape)


def read_and_prepare(
    pipeline: Pipeline, sample: Sample, expected_shape: tuple[int, ...] | None, tracer: Tracer | None = None
) -> tuple[PreparedItem, str]:
    """:func:`prepare_item` of the sample's bytes plus its fingerprint (sha256 hex of the bytes, or the read
    failure); a ``read`` span and one span per op at trace level ``model`` or deeper."""
    t = current_tracer() if tracer is None else tracer
    with t.span("read", "model"):
        read = read_sample(sample)
    return prepare_item(pipeline, read, expected_shape, t), read.fingerprint


def prepare_read(
    pipeline: Pipeline, read: SampleRead, expected_shape: tuple[int, ...] | None, tracer: Tracer | None = None
) -> Prepared:
    """Pre-process bytes already read -> (model input without batch axis, None) or (None, failure reason)."""
    data, error, _ = prepare_item(pipeline, read, expected_shape, tracer)
    return data, error


def prepare_item(
    pipeline: Pipeline, read: SampleRead, expected_shape: tuple[int, ...] | None, tracer: Tracer | None = None
) -> PreparedItem:
    """Pre-process bytes already read -> the model input and the sample's geometry, or the failure reason."""
    if read.data is None:
        return PreparedItem(None, read.error)
    t = current_tracer() if tracer is None else tracer
    item: Item | str = Item(np.frombuffer(read.data, dtype=np.uint8), "encoded")
    for op in pipeline.pre_ops:
        item = apply_op(op, item, t)  # type: ignore[arg-type]
        if isinstance(item, str):
            return PreparedItem(None, item)
    assert isinstance(item, Item)
    error = shape_error(item.data, expected_shape)
    return PreparedItem(None, error) if error else PreparedItem(item.data, None, item.geometry)


def run_loop(
    pipeline: Pipeline,
    runner: Runner,
    samples: Sequence[Sample],
    options: LoopOptions,
    expected_shape: tuple[int, ...] | None,
    on_progress: ProgressCallback | None = None,
    task: Task | None = None,
    *,
    replicas: Sequence[Runner] | None = None,
) -> LoopResult:
    """Evaluate ``samples`` in order; returns one SamplePrediction per sample (failures included), recorded
    by ``task`` (default: :func:`task_of` the pipeline). ``data_parallel`` workers beyond the first use
    ``replicas`` (runners kept across calls, e.g. by a run in segments), else new ones (:meth:`Runner.replica`).

    Tracing (the current tracer, :func:`repliscope.tracing.current_tracer`): at level ``model`` one ``batch``
    span per batch (``data_parallel``: around reading, pre-processing, inference and post-processing of the
    batch on its worker; ``pipelined``: around inference and post-processing, the pre-processing spans being
    on the prep threads, ahead), ``inference`` and per-op spans; at ``framework`` / ``library`` every runner is
    instrumented (:meth:`Tracer.instrument`) from before its warm-up to the end of the loop."""
    if options.schedule not in SCHEDULES:
        raise RepliscopeError(f"unknown schedule '{options.schedule}' (allowed: {', '.join(SCHEDULES)})")
    tracer = current_tracer()
    if tracer.rank:  # the record says its latencies were measured under tracing
        runner.notes["trace_level"] = tracer.level
    infer = BatchInference(pipeline, task or task_of(pipeline), runner)
    start = time.perf_counter()
    result = LoopResult(predictions=[], fingerprints=[], outputs={} if options.keep_outputs else None)
    batches = [samples[i : i + options.batch_size] for i in range(0, len(samples), options.batch_size)]
    shape = warmup_shape(len(batches[0]) if batches else 0, expected_shape) if options.warmup else None
    with ExitStack() as instrumented:
        instrumented.enter_context(tracer.instrument(runner))
        result.load_seconds, result.warmup_seconds = load_and_warm_up(runner, shape)
        loop_start = time.perf_counter()
        if options.schedule == "pipelined":
            _pipelined(infer, runner, batches, options, expected_shape, result, on_progress, tracer)
        else:
            given = list(replicas or [])[: options.prep_workers - 1]
            runners = [runner, *given, *(runner.replica() for _ in range(options.prep_workers - 1 - len(given)))]
            for replica in runners[1:]:
                instrumented.enter_context(tracer.instrument(replica))
                load, warm = load_and_warm_up(replica, shape)
                result.load_seconds += load
                result.warmup_seconds += warm
            loop_start = time.perf_counter()
            _data_parallel(infer, runners, batches, options, expected_shape, result, on_progress, tracer)
        end = time.perf_counter()
    result.loop_seconds, result.total_seconds = end - loop_start, end - start
    return result


Batch = Sequence[Sample]


def _pipelined(
    infer: BatchInference,
    runner: Runner,
    batches: list[Batch],
    options: LoopOptions,
    expected_shape: tuple[int, ...] | None,
    result: LoopResult,
    on_progress: ProgressCallback | None,
    tracer: Tracer = NO_TRACER,
) -> None:
    pipeline = infer.pipeline
    with ThreadPoolExecutor(max_workers=options.prep_workers, thread_name_prefix="repliscope-prep") as pool:
        pending: deque[list[Future[tuple[PreparedItem, str]]]] = deque()

        def submit(batch: Batch) -> None:
            pending.append([pool.submit(read_and_prepare, pipeline, s, expected_shape, tracer) for s in batch])

        for batch in batches[: options.prefetch_batches + 1]:
            submit(batch)
        for index, batch in enumerate(batches):
            done = [f.result() for f in pending.popleft()]
            nxt = index + options.prefetch_batches + 1
            if nxt < len(batches):
                submit(batches[nxt])
            with tracer.span("batch", "model", index=index, size=len(batch)):
                predictions, latency, raw = _infer_batch(infer, runner, batch, [p for p, _ in done], options, tracer)
            _collect(result, [fp for _, fp in done], predictions, latency, raw)
            if on_progress is not None:
                on_progress(len(batch))


def _data_parallel(
    infer: BatchInference,
    runners: list[Runner],
    batches: list[Batch],
    options: LoopOptions,
    expected_shape: tuple[int, ...] | None,
    result: LoopResult,
    on_progress: ProgressCallback | None,
    tracer: Tracer = NO_TRACER,
) -> None:
    pipeline = infer.pipeline
    free: SimpleQueue[Runner] = SimpleQueue()
    for r in runners:
        free.put(r)

    def work(batch: Batch, index: int) -> tuple[list[str], list[SamplePrediction], float | None, RawOutputs]:
        runner = free.get()
        try:
            with tracer.span("batch", "model", index=index, size=len(batch)):
                done = [read_and_prepare(pipeline, s, expected_shape, tracer) for s in batch]
                predictions, latency, raw = _infer_batch(infer, runner, batch, [p for p, _ in done], options, tracer)
        finally:
            free.put(runner)
        return [fp for _, fp in done], predictions, latency, raw

    in_flight = len(runners) + options.prefetch_batches
    with ThreadPoolExecutor(max_workers=len(runners), thread_name_prefix="repliscope-worker") as pool:
        pending: deque[Future[tuple[list[str], list[SamplePrediction], float | None, RawOutputs]]] = deque(
            pool.submit(work, b, i) for i, b in enumerate(batches[:in_flight])
        )
        try:
            for index, batch in enumerate(batches):
                fingerprints, predictions, latency, raw = pending.popleft().result()
                if index + in_flight < len(batches):
                    pending.append(pool.submit(work, batches[index + in_flight], index + in_flight))
                _collect(result, fingerprints, predictions, latency, raw)
                if on_progress is not None:
                    on_progress(len(batch))
        finally:
            for f in pending:  # --fail-fast or an error: do not start the rest
                f.cancel()


def _collect(
    result: LoopResult,
    fingerprints: list[str],
    predictions: list[SamplePrediction],
    latency: float | None,
    raw: RawOutputs = None,
) -> None:
    assert result.fingerprints is not None
    result.fingerprints.extend(fingerprints)
    result.predictions.extend(predictions)
    if raw is not None and result.outputs is not None:
        result.outputs.update(raw)
    if latency is not None:
        result.batch_latencies.append(latency)
        result.inference_seconds += latency


def warmup_shape(batch_len: int, expected_shape: tuple[int, ...] | None) -> tuple[int, ...] | None:
    """(batch_len, *expected_shape) for the warm-up, or None (no warm-up) without samples or with a
    dynamic (< 1) input dimension."""
    if batch_len < 1 or expected_shape is None or any(d is None or d < 1 for d in expected_shape):
        return None
    return (batch_len, *expected_shape)


def load_and_warm_up(runner: Runner, shape: tuple[int, ...] | None) -> tuple[float, float]:
    """Load ``runner`` and run one warm-up inference of ``shape`` (skipped when None) -> (load seconds of
    this runner, warm-up seconds). A runner loaded earlier reports the time its load took then."""
    runner.load()
    return runner.load_seconds, runner.warm_up(shape) if shape is not None else 0.0


def task_of(pipeline: Pipeline) -> Task:
    """The task whose post ops ``pipeline`` uses (the registries keep the tasks' op names apart): for callers
    that run a manifest's pipeline without its manifest (calibration)."""
    from repliscope.tasks.base import task_for_post_ops

    return task_for_post_ops([op.name for op in pipeline.post_ops])


@dataclass(frozen=True)
class BatchInference:
    """How one batch of model inputs becomes records: the runner's outputs (every named output when the task
    is not classification or the model has several, else the single score array), the pipeline's postprocess
    (with each row's geometry) and the task's per-sample records."""

    pipeline: Pipeline
    task: Task
    runner: Runner

    @property
    def named_outputs(self) -> bool:
        return self.task.reads_named_outputs(self.runner.artifact.output_names)

    def run(
        self, runner: Runner, inputs: np.ndarray, tracer: Tracer = NO_TRACER
    ) -> tuple[np.ndarray | dict[str, np.ndarray], float]:
        """``runner``'s (this one or a replica) raw outputs of one batch (N, ...) and its inference seconds."""
        with tracer.span("inference", "model", batch_size=len(inputs)):
            outputs = runner.infer_outputs(inputs) if self.named_outputs else runner.infer(inputs)
        return outputs, runner.last_inference_seconds

    def records(
        self,
        outputs: np.ndarray | dict[str, np.ndarray],
        geometry: list[Geometry | None],
        batch: Sequence[Sample],
        rows: Sequence[int],
        tracer: Tracer = NO_TRACER,
    ) -> list[SamplePrediction]:
        """Post-process the outputs of ``batch[rows]`` and record them with the task."""
        preds = self.pipeline.postprocess(outputs, tracer, geometry=geometry)
        return self.task.to_samples(preds, batch, rows)


def raw_rows(outputs: np.ndarray | dict[str, np.ndarray], n: int) -> list[np.ndarray]:
    """Per row of a batch of ``n`` inputs, its raw output as a float32 1-D array: the row of a single output
    array, or the rows of every named output (those whose first axis is the batch) flattened and concatenated
    in output-name order."""
    arrays = [outputs] if isinstance(outputs, np.ndarray) else [np.asarray(outputs[k]) for k in sorted(outputs)]
    batched = [a for a in arrays if a.ndim >= 1 and a.shape[0] == n]
    return [
        np.concatenate([a[i].astype(np.float32, copy=False).ravel() for a in batched])
        if batched
        else np.zeros(0, np.float32)
        for i in range(n)
    ]


def _infer_batch(
    infer: BatchInference,
    runner: Runner,
    batch: Sequence[Sample],
    prepared: list[PreparedItem],
    options: LoopOptions,
    tracer: Tracer = NO_TRACER,
) -> tuple[list[SamplePrediction], float | None, RawOutputs]:
    """Infer the prepared samples of one batch -> (one prediction per sample, the runtime's seconds or None
    when every sample of the batch failed, the raw outputs by sample id with ``options.keep_outputs``)."""
    ok = [i for i, p in enumerate(prepared) if p.data is not None]
    out: list[SamplePrediction] = [
        SamplePrediction(sample_id=s.id, label=s.label, error=prepared[i].error) for i, s in enumerate(batch)
    ]
    failed = [p for p in out if p.error is not None]
    if failed and options.fail_fast:
        raise SampleError(f"sample '{failed[0].sample_id}' failed: {failed[0].error} (--fail-fast)")
    if not ok:
        return out, None, {} if options.keep_outputs else None
    inputs = np.stack([prepared[i].data for i in ok])  # type: ignore[misc]
    geometry = [prepared[i].geometry for i in ok]
    outputs, seconds = infer.run(runner, inputs, tracer)
    raw = (
        {batch[i].id: row for i, row in zip(ok, raw_rows(outputs, len(ok)), strict=True)}
        if options.keep_outputs
        else None
    )
    for i, record in zip(ok, infer.records(outputs, geometry, batch, ok, tracer), strict=True):
        out[i] = record
    return out, seconds, raw
