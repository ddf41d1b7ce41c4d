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
from contextlib import AbstractContextManager, ExitStack, nullcontext
from dataclasses import dataclass, field
from queue import SimpleQueue
from typing import TYPE_CHECKING, Generic, Literal, NamedTuple, Protocol, TypeVar

import numpy as np

from repliscope.datasets.base import Sample, SampleRead, read_sample
from repliscope.errors import RepliscopeError, SampleError
from repliscope.evaluation.batch_tail import BatchTail
from repliscope.evaluation.record import SamplePrediction
from repliscope.ops.base import Geometry, Item, Predictions, PreOp
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
    counts: dict[str, int] = field(default_factory=dict)
    """The task's counts summed over the batches (:meth:`Task.batch_counts`; classification: all-equal rows and
    label ties at the top-1 / top-5 boundary), added to the record's ``counts``."""
    ahead: int = 0
    """Samples this loop took already read and (partly) pre-processed from a :class:`ReadAhead`: their reading
    and those ops ran before the loop, while the model loaded, and are not in ``loop_seconds``."""
    ahead_seconds: float = 0.0
    """The CPU seconds the read-ahead spent reading and pre-processing those samples (its thread's)."""
    ahead_share: float = 0.0
    """What that work costs at this loop's pace: ``ahead_seconds`` x ``loop_seconds`` / the process's CPU seconds
    during the loop (on an idle 2-core machine about ``ahead_seconds`` / 2; on a busy one, where the loop gets
    less CPU per second, more). :attr:`rate_seconds` adds it to the loop."""

    @property
    def rate_seconds(self) -> float:
        """The seconds a true rate of this loop is over: ``loop_seconds`` + :attr:`ahead_share` (a loop that took
        samples read ahead did less than the whole work of its samples)."""
        return self.loop_seconds + self.ahead_share


Stage = tuple[Item, int]
"""A sample part way through its pre-processing: the item after the first ``n`` ops, and ``n``."""


class ReadAhead(Protocol):
    """Samples read and pre-processed ahead of the loop (:class:`repliscope.evaluation.warm_start.Prefetched`)."""

    def take(self, sample: Sample) -> Held | None:
        """The sample's :data:`Held` state, removed from the store; None when it is not held (the loop reads it)."""
        ...


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


Held = tuple[PreparedItem | Stage, str, float]
"""A sample read ahead: its state (prepared, or a :data:`Stage` to finish), its fingerprint, and the CPU seconds
its reading and ops took on the read-ahead thread."""


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
    return finish_item(pipeline, encoded_item(read.data), 0, expected_shape, tracer)


def encoded_item(data: bytes) -> Item:
    """A sample's bytes as the first pre-processing op takes them."""
    return Item(np.frombuffer(data, dtype=np.uint8), "encoded")


def advance(pipeline: Pipeline, item: Item, done: int, stop: int | None, tracer: Tracer | None = None) -> Item | str:
    """``item`` after the first ``done`` pre-processing ops -> after ``pre_ops[done:stop]`` too, or the failure
    reason."""
    t = current_tracer() if tracer is None else tracer
    current: Item | str = item
    for op in pipeline.pre_ops[done:stop]:
        current = apply_op(op, current, t)  # type: ignore[arg-type]
        if isinstance(current, str):
            return current
    return current


def finish_item(
    pipeline: Pipeline, item: Item, done: int, expected_shape: tuple[int, ...] | None, tracer: Tracer | None = None
) -> PreparedItem:
    """``item`` after the first ``done`` pre-processing ops -> the rest of them applied in order, and the shape
    checked: what :func:`prepare_item` gives for the same bytes (the ops are functions of their item)."""
    current = advance(pipeline, item, done, None, tracer)
    if isinstance(current, str):
        return PreparedItem(None, current)
    error = shape_error(current.data, expected_shape)
    return PreparedItem(None, error) if error else PreparedItem(current.data, None, current.geometry)


def finish_batch(
    pipeline: Pipeline,
    tail: BatchTail | None,
    states: Sequence[PreparedItem | Stage],
    expected_shape: tuple[int, ...] | None,
    tracer: Tracer | None = None,
) -> tuple[list[PreparedItem], np.ndarray | None]:
    """One batch's samples, each prepared or stopped before ``tail`` (a :data:`Stage`) -> every sample prepared,
    and their inputs stacked when ``tail`` ran on the whole batch at once (every sample at its start, one shape:
    :meth:`BatchTail.fits`), else None. The same inputs and failure reasons as :func:`finish_item` per sample."""
    staged = [s for s in states if not isinstance(s, PreparedItem)]
    if tail is not None and staged and len(staged) == len(states) and tail.fits([s[0] for s in staged]):
        inputs = tail.apply([s[0] for s in staged])
        error = shape_error(inputs[0], expected_shape)
        if error:
            return [PreparedItem(None, error) for _ in staged], None
        return [PreparedItem(x, None, s[0].geometry) for x, s in zip(inputs, staged, strict=True)], inputs
    return [
        s if isinstance(s, PreparedItem) else finish_item(pipeline, s[0], s[1], expected_shape, tracer) for s in states
    ], None


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
    ahead: ReadAhead | None = None,
) -> LoopResult:
    """Evaluate ``samples`` in order; returns one SamplePrediction per sample (failures included), recorded
    by ``task`` (default: :func:`task_of` the pipeline). ``data_parallel`` workers beyond the first use
    ``replicas`` (runners kept across calls, e.g. by a run in segments), else new ones (:meth:`Runner.replica`).
    A sample that ``ahead`` holds (read and partly pre-processed while the model loaded,
    :mod:`repliscope.evaluation.warm_start`) is taken from it and its remaining ops applied, instead of being
    read again; :attr:`LoopResult.ahead` counts them and :attr:`LoopResult.ahead_seconds` sums what they cost there.

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
        runners = [runner]
        if options.schedule == "data_parallel":
            given = list(replicas or [])[: options.prep_workers - 1]
            runners += [*given, *(runner.replica() for _ in range(options.prep_workers - 1 - len(given)))]
            for replica in runners[1:]:
                instrumented.enter_context(tracer.instrument(replica))
                load, warm = load_and_warm_up(replica, shape)
                result.load_seconds += load
                result.warmup_seconds += warm
        on_error = fail_fast_hook() if options.fail_fast else None
        taken: list[float] = []  # list.append is atomic: the data_parallel workers note the seconds held into it

        # data_parallel, untraced: each sample stops before the element-wise tail, which runs once per batch
        tail = BatchTail.of(pipeline) if options.schedule == "data_parallel" and tracer.rank < MODEL_RANK else None

        def upto(item: Item, done: int) -> PreparedItem | Stage:
            if tail is None or done > tail.start:
                return finish_item(pipeline, item, done, expected_shape, tracer)
            current = advance(pipeline, item, done, tail.start, tracer)
            return PreparedItem(None, current) if isinstance(current, str) else (current, tail.start)

        def prepare(sample: Sample) -> tuple[PreparedItem | Stage, str]:
            if ahead is not None:
                held = ahead.take(sample)
                if held is not None:
                    stage, fingerprint, seconds = held
                    taken.append(seconds)
                    return (stage if isinstance(stage, PreparedItem) else upto(*stage)), fingerprint
            if tail is None:
                return read_and_prepare(pipeline, sample, expected_shape, tracer)
            read = read_sample(sample)
            return (PreparedItem(None, read.error) if read.data is None else upto(encoded_item(read.data), 0)), (
                read.fingerprint
            )

        def infer_batch(
            worker: Runner, index: int, batch: Batch, done: list[tuple[PreparedItem | Stage, str]]
        ) -> BatchOutcome:
            prepared, stacked = finish_batch(pipeline, tail, [p for p, _ in done], expected_shape, tracer)
            return infer.predict(worker, batch, prepared, on_error=on_error, tracer=tracer, stacked=stacked)

        def collect(
            index: int, batch: Batch, done: list[tuple[PreparedItem | Stage, str]], outcome: BatchOutcome
        ) -> None:
            _collect(result, [fp for _, fp in done], outcome, options.keep_outputs)

        loop_start, loop_cpu = time.perf_counter(), time.process_time()
        drive(
            batches,
            LoopHooks(prepare, infer_batch, collect),
            runners,
            schedule=options.schedule,
            prep_threads=options.prep_workers,
            prefetch=options.prefetch_batches,
            on_progress=on_progress,
            tracer=tracer,
        )
        end, loop_cpu = time.perf_counter(), time.process_time() - loop_cpu
    result.loop_seconds, result.total_seconds = end - loop_start, end - start
    result.ahead, result.ahead_seconds = len(taken), sum(taken)
    if taken:  # charged at the loop's own pace (wall seconds per CPU second of the process)
        result.ahead_share = result.ahead_seconds * result.loop_seconds / max(loop_cpu, 1e-9)
    return result


Batch = Sequence[Sample]
WorkerT = TypeVar("WorkerT")
PreparedT = TypeVar("PreparedT")
OutcomeT = TypeVar("OutcomeT")


@dataclass(frozen=True)
class LoopHooks(Generic[WorkerT, PreparedT, OutcomeT]):
    """What the one batch loop (:func:`drive`) does with a dataset's batches: the evaluation (one pipeline, a runner
    per worker) and the pitfall sweep (every variant's pipeline, a set of runners per worker) differ only here.

    ``prepare(sample)``: per sample, on a pre-processing thread (``pipelined``) or the worker (``data_parallel``):
    read it once and pre-process it; a bad sample is a value that says why (recorded, never dropped).
    ``infer(worker, index, batch, prepared)``: per batch, with one worker's runners (``pipelined``: the first
    worker, on the calling thread); a failed sample's record carries its reason (an ``on_error`` hook of
    :meth:`BatchInference.predict` may stop the run instead: ``--fail-fast``).
    ``collect(index, batch, prepared, outcome)``: per batch, in dataset order, on the calling thread."""

    prepare: Callable[[Sample], PreparedT]
    infer: Callable[[WorkerT, int, Batch, list[PreparedT]], OutcomeT]
    collect: Callable[[int, Batch, list[PreparedT], OutcomeT], None]


def drive(
    batches: Sequence[Batch],
    hooks: LoopHooks[WorkerT, PreparedT, OutcomeT],
    workers: Sequence[WorkerT],
    *,
    schedule: Schedule,
    prep_threads: int,
    prefetch: int,
    on_progress: ProgressCallback | None = None,
    tracer: Tracer = NO_TRACER,
    batch_spans: bool = True,
) -> None:
    """The batch loop of the evaluation and the pitfall sweep, in one of :data:`SCHEDULES`.

    ``pipelined``: ``prep_threads`` threads prepare the samples of the next ``prefetch`` batches while the calling
    thread infers the current one with ``workers[0]``. ``data_parallel``: one thread per worker takes whole
    batches (prepare every sample, infer) with a worker of its own; at most ``len(workers) + prefetch`` batches
    are in flight and results are collected in dataset order; an error cancels the batches not started. With
    ``batch_spans``, each batch is a ``batch`` span (level ``model``) of ``tracer``: around its inference
    (``pipelined``) or its preparation and inference (``data_parallel``)."""

    def span(index: int, batch: Batch) -> AbstractContextManager[object]:
        return tracer.span("batch", "model", index=index, size=len(batch)) if batch_spans else nullcontext()

    if schedule == "pipelined":
        with ThreadPoolExecutor(max_workers=prep_threads, thread_name_prefix="repliscope-prep") as pool:
            prepping: deque[list[Future[PreparedT]]] = deque()

            def submit(index: int) -> None:
                prepping.append([pool.submit(hooks.prepare, s) for s in batches[index]])

            for first in range(min(prefetch + 1, len(batches))):
                submit(first)
            try:
                for index, batch in enumerate(batches):
                    prepared = [f.result() for f in prepping.popleft()]
                    if index + prefetch + 1 < len(batches):
                        submit(index + prefetch + 1)
                    with span(index, batch):
                        outcome = hooks.infer(workers[0], index, batch, prepared)
                    hooks.collect(index, batch, prepared, outcome)
                    if on_progress is not None:
                        on_progress(len(batch))
            finally:
                for futures in prepping:  # an error: do not start the rest
                    for waiting in futures:
                        waiting.cancel()
        return
    free: SimpleQueue[WorkerT] = SimpleQueue()
    for w in workers:
        free.put(w)

    def work(index: int) -> tuple[list[PreparedT], OutcomeT]:
        batch = batches[index]
        worker = free.get()
        try:
            with span(index, batch):
                prepared = [hooks.prepare(s) for s in batch]
                return prepared, hooks.infer(worker, index, batch, prepared)
        finally:
            free.put(worker)

    in_flight = len(workers) + prefetch
    with ThreadPoolExecutor(max_workers=len(workers), thread_name_prefix="repliscope-worker") as pool:
        pending: deque[Future[tuple[list[PreparedT], OutcomeT]]] = deque(
            pool.submit(work, i) for i in range(min(in_flight, len(batches)))
        )
        try:
            for index, batch in enumerate(batches):
                prepared, outcome = pending.popleft().result()
                if index + in_flight < len(batches):
                    pending.append(pool.submit(work, index + in_flight))
                hooks.collect(index, batch, prepared, outcome)
                if on_progress is not None:
                    on_progress(len(batch))
        finally:
            for f in pending:  # --fail-fast or an error: do not start the rest
                f.cancel()


def _collect(result: LoopResult, fingerprints: list[str], outcome: BatchOutcome, keep_outputs: bool) -> None:
    assert result.fingerprints is not None
    result.fingerprints.extend(fingerprints)
    result.predictions.extend(outcome.predictions)
    if keep_outputs and result.outputs is not None and outcome.outputs is not None:
        result.outputs.update(outcome.raw(outcome.outputs))
    for key, value in outcome.counts.items():
        result.counts[key] = result.counts.get(key, 0) + value
    if outcome.latencies:
        result.batch_latencies.append(outcome.latencies[0])
        result.inference_seconds += outcome.latencies[0]


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


Outputs = np.ndarray | dict[str, np.ndarray]
"""A runner's outputs of one batch: the score array, or every named output."""

SampleErrorHook = Callable[[Sample, str], None]
"""Called with a sample that failed and its reason, before the batch is inferred; it may raise to stop the run
(``--fail-fast``). Without one, the failure is recorded in the sample's record and the run goes on."""

Reuse = Callable[[list[int], np.ndarray], tuple[Outputs, list[float]] | None]
"""Given the rows of a batch and their stacked model inputs: outputs computed already for exactly these inputs on
the same runner, with their measured latencies (the pitfall sweep's twin variants), or None."""


class Inferable(Protocol):
    """One pre-processed sample as :meth:`BatchInference.predict` reads it (:class:`PreparedItem`, the sweep's
    cells): the model input (None when the sample failed), the failure reason and the geometry."""

    @property
    def data(self) -> np.ndarray | None: ...
    @property
    def error(self) -> str | None: ...
    @property
    def geometry(self) -> Geometry | None: ...


def fail_fast_hook(where: str = "") -> SampleErrorHook:
    """The ``--fail-fast`` hook: the first failed sample stops the run (a SampleError naming it, ``where`` it failed
    and why)."""

    def stop(sample: Sample, reason: str) -> None:
        raise SampleError(f"sample '{sample.id}' failed{where}: {reason} (--fail-fast)")

    return stop


@dataclass
class BatchOutcome:
    """One batch through :meth:`BatchInference.predict`: one record per sample (failures included), the rows that
    were inferred with finite outputs (a row whose output holds a NaN or an infinity is a failed sample:
    :func:`non_finite_rows`), their stacked inputs, the raw outputs and post-processed predictions of those rows
    (None when every sample failed) and the runtime's seconds per inference call."""

    predictions: list[SamplePrediction]
    rows: list[int] = field(default_factory=list)
    inputs: np.ndarray | None = None
    outputs: Outputs | None = None
    post: Predictions | None = None
    latencies: list[float] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    """The task's counts of the post-processed rows (:meth:`Task.batch_counts`: classification's ties)."""

    def raw(self, outputs: Outputs) -> dict[str, np.ndarray]:
        """Sample id -> raw output row (float32, 1-D) of the inferred rows (:func:`raw_rows`)."""
        return {
            self.predictions[i].sample_id: row
            for i, row in zip(self.rows, raw_rows(outputs, len(self.rows)), strict=True)
        }


@dataclass(frozen=True)
class BatchInference:
    """How one batch of prepared samples becomes records, for the evaluation loop, every variant of the pitfall
    sweep and the benchmark's queries: the runner's outputs (every named output when the task is not
    classification or the model has several, else the single score array), the pipeline's postprocess (with each
    row's geometry) and the task's per-sample records."""

    pipeline: Pipeline
    task: Task
    runner: Runner

    @property
    def named_outputs(self) -> bool:
        return self.task.reads_named_outputs(self.runner.artifact.output_names)

    def run(
        self, runner: Runner, inputs: np.ndarray, tracer: Tracer = NO_TRACER, **span: object
    ) -> tuple[Outputs, float]:
        """``runner``'s (this one, a replica or a variant's) raw outputs of one batch (N, ...) and its inference
        seconds, in an ``inference`` span (level ``model``, with ``span``'s attributes)."""
        named = self.task.reads_named_outputs(runner.artifact.output_names)
        with tracer.span("inference", "model", **span, batch_size=len(inputs)):
            outputs = runner.infer_outputs(inputs) if named else runner.infer(inputs)
        return outputs, runner.last_inference_seconds

    def predict(
        self,
        runner: Runner,
        batch: Sequence[Sample],
        prepared: Sequence[Inferable],
        *,
        pipeline: Pipeline | None = None,
        chunk: int | None = None,
        on_error: SampleErrorHook | None = None,
        reuse: Reuse | None = None,
        tracer: Tracer = NO_TRACER,
        stacked: np.ndarray | None = None,
        **span: object,
    ) -> BatchOutcome:
        """Record one batch: a failed sample's record carries its reason (``on_error`` is called first, and may
        stop the run), the others are stacked, inferred by ``runner`` (in calls of at most ``chunk`` rows; outputs
        ``reuse`` gives are not computed again), post-processed by ``pipeline`` (default: this one) and recorded by
        the task. ``stacked``: every sample's input stacked already (:func:`finish_batch`), used as is."""
        outcome = BatchOutcome(
            [
                SamplePrediction(sample_id=s.id, label=s.label, error=p.error)
                for s, p in zip(batch, prepared, strict=True)
            ]
        )
        if on_error is not None:
            for sample, item in zip(batch, prepared, strict=True):
                if item.error is not None:
                    on_error(sample, item.error)
        outcome.rows = [i for i, p in enumerate(prepared) if p.data is not None]
        if not outcome.rows:
            return outcome
        if stacked is not None and len(outcome.rows) == len(stacked):
            inputs = outcome.inputs = stacked
        else:
            inputs = outcome.inputs = np.stack([prepared[i].data for i in outcome.rows])  # type: ignore[misc]
        reused = reuse(outcome.rows, inputs) if reuse is not None else None
        if reused is not None:
            outcome.outputs, outcome.latencies = reused[0], list(reused[1])
        else:
            step = chunk or len(inputs)
            chunks: list[Outputs] = []
            for j in range(0, len(inputs), step):
                out, seconds = self.run(runner, inputs[j : j + step], tracer, **span)
                chunks.append(out)
                outcome.latencies.append(seconds)
            outcome.outputs = concatenate(chunks)
        rows = outcome.rows
        bad = non_finite_rows(outcome.outputs, len(rows))
        if bad:  # a NaN / infinity is no prediction: those samples fail with the reason, the rest go on
            for j, reason in bad.items():
                if on_error is not None:
                    on_error(batch[rows[j]], reason)
                outcome.predictions[rows[j]] = SamplePrediction(
                    sample_id=batch[rows[j]].id, label=batch[rows[j]].label, error=reason
                )
            keep = [j for j in range(len(rows)) if j not in bad]
            outcome.outputs = take_rows(outcome.outputs, keep, len(rows))
            outcome.inputs, outcome.rows = inputs[keep], [rows[j] for j in keep]
            if not keep:
                outcome.outputs = None
                return outcome
        geometry = [prepared[i].geometry for i in outcome.rows]
        outcome.post = (pipeline or self.pipeline).postprocess(outcome.outputs, tracer, geometry=geometry)
        for i, record in zip(outcome.rows, self.task.to_samples(outcome.post, batch, outcome.rows), strict=True):
            outcome.predictions[i] = record
        outcome.counts = self.task.batch_counts(outcome.post, batch, outcome.rows)
        return outcome


NON_FINITE = "non-finite model output"
"""How the failure reason of a sample whose model output holds a NaN or an infinity starts."""


def non_finite_rows(outputs: Outputs, n: int) -> dict[int, str]:
    """Row -> failure reason for the rows of a batch of ``n`` whose floating-point model outputs (each output whose
    first axis is the batch) hold a NaN or an infinity: ``non-finite model output: 'scores' holds 1000 NaN and 0
    infinite of 1000 values``, naming every such output in name order."""
    named = {"output": outputs} if isinstance(outputs, np.ndarray) else outputs
    reasons: dict[int, list[str]] = {}
    for name in sorted(named):
        a = np.asarray(named[name])
        if a.ndim == 0 or a.shape[0] != n or not np.issubdtype(a.dtype, np.floating):
            continue
        flat = a.reshape(n, -1)
        for j in np.flatnonzero(~np.isfinite(flat).all(axis=1)):  # one pass; the counts only for the bad rows
            nan, inf = int(np.isnan(flat[j]).sum()), int(np.isinf(flat[j]).sum())
            reasons.setdefault(int(j), []).append(
                f"'{name}' holds {nan} NaN and {inf} infinite of {flat.shape[1]} values"
            )
    return {j: f"{NON_FINITE}: {'; '.join(r)}" for j, r in sorted(reasons.items())}


def take_rows(outputs: Outputs, keep: list[int], n: int) -> Outputs:
    """The rows ``keep`` of a batch of ``n``'s outputs (an output whose first axis is not the batch is kept whole)."""
    if isinstance(outputs, np.ndarray):
        return outputs[keep]
    return {k: v[keep] if np.ndim(v) >= 1 and np.shape(v)[0] == n else v for k, v in outputs.items()}


def concatenate(chunks: list[Outputs]) -> Outputs:
    """Chunks of one batch's outputs joined along the batch axis (per name for named outputs)."""
    first = chunks[0]
    if len(chunks) == 1:
        return first
    if isinstance(first, dict):
        return {name: np.concatenate([c[name] for c in chunks]) for name in first}
    return np.concatenate(chunks)  # type: ignore[arg-type]


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
