"""Run the reference pipeline and every pitfall variant over the same samples, sharing work.

Per sample, the encoded bytes are read once and every op prefix that variants have in common is computed
once (all variants share the decode; most share decode + resize + crop). Pipelined: pre-processing of batches
n+1, n+2 runs in worker threads while the runtime infers batch n for every variant (memory: at most three
batches of every variant's model inputs). Data-parallel: each worker pre-processes and infers whole batches
with runner replicas of its own (memory: one batch of every variant's inputs per worker; finished batches keep
only their predictions). Each variant becomes a stored-ready EvaluationRecord linked by ``sweep_id``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, NamedTuple, Protocol

import numpy as np

import repliscope
from repliscope.datasets.base import Dataset, Sample, read_sample
from repliscope.errors import RepliscopeError
from repliscope.evaluation.calibration import Plan
from repliscope.evaluation.engine import (
    Batch,
    BatchInference,
    LoopHooks,
    LoopOptions,
    LoopResult,
    Outputs,
    apply_op,
    drive,
    fail_fast_hook,
    load_and_warm_up,
    shape_error,
    warmup_shape,
)
from repliscope.evaluation.provenance import usable_cores
from repliscope.evaluation.record import EvaluationRecord, SamplePrediction
from repliscope.evaluation.record_builder import build_record
from repliscope.evaluation.run import PreparedRun, check_dataset, input_shape, plan_for, runner_with_threads
from repliscope.ops.base import Geometry, Item
from repliscope.ops.pipeline import Pipeline
from repliscope.pitfalls import variants as _builtin_variants  # noqa: F401  (registers the built-ins)
from repliscope.pitfalls.base import NotApplicable, PitfallContext, op_keys, task_pitfalls
from repliscope.pitfalls.degrees import VariantSpec, VariantSpecError, parse_variant, resolve_variant
from repliscope.pitfalls.result import PairedStats, SweepResult, VariantOutcome, VisualPanel
from repliscope.pitfalls.runners import runner_for
from repliscope.pitfalls.stats import kl_divergence, paired_predictions
from repliscope.pitfalls.visual import visual_entry
from repliscope.runtimes.base import Runner
from repliscope.tracing.tracer import current_tracer

REFERENCE = "reference"
_GLOBAL_THREAD_RUNTIMES = ("torch", "opencv_dnn")
"""Runtimes whose thread count is process-global: variants with other thread counts cannot run beside the
reference in parallel workers without changing each other's setting."""


@dataclass
class _Plan:
    """One pipeline to run: the reference or a variant, with its runner and batch size."""

    name: str
    description: str
    change: str
    pipeline: Pipeline
    runner: Runner
    batch_size: int
    settings: dict[str, object]
    op_keys: list[str] = field(default_factory=list)
    loop: LoopResult = field(default_factory=lambda: LoopResult(predictions=[]))
    kl: list[float] = field(default_factory=list)
    abs_diff: list[float] = field(default_factory=list)
    probs: np.ndarray | None = None  # current batch, (n_ok, C)
    ok_rows: list[int] = field(default_factory=list)
    shared_batches: dict[str, int] = field(default_factory=dict)  # plan name -> batches whose outputs were reused
    reused_seconds: float = 0.0  # of loop.inference_seconds: the twins' measured latencies of reused batches
    failed: str | None = None  # a pipeline error (not a sample's fault): the variant stops, the sweep goes on
    pitfall: str = ""  # the registered variant (``name`` is its label: with the degree when one was given)
    params: dict[str, object] = field(default_factory=dict)  # the degree given (empty: the variant's default)


class _Cell(NamedTuple):
    """One plan's pre-processed sample: the model input and its layout, or why the sample failed (``error``,
    recorded), or why the plan's pipeline cannot run at all (``fatal``: the variant stops, the sweep goes on)."""

    data: np.ndarray | None
    layout: str = ""
    error: str | None = None
    fatal: str | None = None
    geometry: Geometry | None = None


@dataclass(frozen=True)
class _Fatal:
    message: str


_Prepared = dict[str, _Cell]  # plan name -> cell, for one sample


@dataclass
class SweepOutput:
    result: SweepResult
    records: list[EvaluationRecord]


def plan_sweep(
    prepared: PreparedRun, names: Sequence[str] | None, run_plan: Plan
) -> tuple[list[_Plan], list[VariantOutcome]]:
    """Derive every requested variant (all registered ones by default) from the prepared pipeline; the
    reference runs as ``run_plan`` says (batch size, runner threads)."""
    ctx = variant_context(prepared.loaded.manifest, prepared.settings.runtime, run_plan.batch_size, run_plan.threads)
    base = runner_with_threads(prepared.runner, run_plan.threads)
    ref = _Plan(REFERENCE, "the manifest as written", "none", prepared.pipeline, base, run_plan.batch_size, {})
    plans, skipped = [ref], []
    shape0 = tuple(int(d) for d in base.artifact.input_shape[1:])
    runners: dict[tuple[int, str, tuple[int, ...]], Runner] = {(run_plan.threads, "float32", shape0): base}
    available = task_pitfalls(prepared.loaded.manifest.task)  # also registers the task's own variants
    for asked in requested_variants(names if names is not None else available, prepared.pipeline, ctx):
        name, pitfall = asked.label, asked.instance()
        try:
            derived = pitfall.derive(prepared.pipeline, ctx)
            threads = int(derived.settings.get("threads", run_plan.threads))
            precision = str(derived.settings.get("precision", "float32"))
            shape = tuple(int(d) for d in derived.settings.get("input_shape", shape0))
            key = (threads, precision, shape)
            if key not in runners:
                runners[key] = runner_for(base, threads, precision, shape)
            plans.append(
                _Plan(
                    name,
                    pitfall.description,
                    derived.change,
                    derived.pipeline,
                    runners[key],
                    int(derived.settings.get("batch_size", run_plan.batch_size)),
                    dict(derived.settings),
                    pitfall=asked.pitfall,
                    params=asked.params,
                )
            )
        except NotApplicable as exc:
            skipped.append(
                VariantOutcome(
                    name=name,
                    pitfall=asked.pitfall,
                    params=asked.params,
                    description=pitfall.description,
                    change="",
                    status="not applicable",
                    reason=str(exc),
                )
            )
    for plan in plans:
        plan.op_keys = op_keys(plan.pipeline)
    return plans, skipped


def variant_context(manifest: Any, runtime: str, batch_size: int, threads: int) -> PitfallContext:
    """What a variant may look at besides the pipeline: ``manifest``'s (a ``Manifest``) first input and the run's
    settings."""
    spec = manifest.inputs[0]
    return PitfallContext(
        input_shape=tuple(spec.shape),
        input_layout=spec.layout,
        runtime=runtime,
        batch_size=batch_size,
        threads=threads,
    )


def check_variants(
    loaded: Any, names: Sequence[str], runtime: str, batch_size: int | None = None, threads: int | None = None
) -> list[VariantSpec]:
    """:func:`requested_variants` on ``loaded``'s (a ``LoadedManifest``) pre-processing: the check
    :func:`plan_sweep` makes when the sweep starts, made before any model, data or agent is touched (a sweep
    job's submission through ``JOB_KINDS["pitfalls"].check``, ``repliscope pitfalls``). A variant's degrees are
    read off the pre-processing (``Parameter.search``); a batch size or thread count not chosen yet (the
    calibration chooses it) is 1 here. :class:`VariantSpecError` naming every refused entry and its allowed
    names or degrees."""
    manifest = loaded.manifest
    base = Pipeline.from_specs(manifest.preprocess, [])
    return requested_variants(names, base, variant_context(manifest, runtime, batch_size or 1, threads or 1))


def requested_variants(names: Sequence[str], base: Pipeline, ctx: PitfallContext) -> list[VariantSpec]:
    """Each requested variant (``NAME`` or ``NAME[PARAMETER=VALUE, ...]``, :mod:`repliscope.pitfalls.degrees`) at
    the degree it names on ``base``, duplicates once; every refusal in one :class:`VariantSpecError`, before any
    variant runs."""
    specs, errors = [], []
    for text in dict.fromkeys(names):
        try:
            specs.append(resolve_variant(parse_variant(text), base, ctx))
        except VariantSpecError as exc:
            errors.append(str(exc))
    if errors:
        raise VariantSpecError("; ".join(errors))
    return list({spec.label: spec for spec in specs}.values())


class PrefixPlan(Protocol):
    """What :func:`prepare_all` reads of a plan (the sweep's plans; the pipeline diff's variant search)."""

    name: str
    pipeline: Pipeline
    op_keys: list[str]


PrefixMemo = dict[tuple[str, ...], Any]
"""Op-key prefix -> its output Item (or failure) for one sample."""


def prepare_all(
    sample: Sample,
    plans: Sequence[PrefixPlan],
    expected_shape: tuple[int, ...],
    memo: PrefixMemo | None = None,
    shapes: Mapping[str, tuple[int, ...]] | None = None,
) -> tuple[_Prepared, str]:
    """Read one sample once and pre-process it for every plan, computing each distinct op prefix once ->
    (cells, fingerprint: sha256 hex of the bytes or the unreadable reason). Pass the same ``memo`` for the same
    sample to reuse prefixes across calls (the pipeline diff's singles, then pairs). ``shapes``: a plan's own
    expected input shape by plan name (a variant at another input size), else ``expected_shape``."""
    read = read_sample(sample)
    if read.data is None:
        return {p.name: _Cell(None, error=read.error) for p in plans}, read.fingerprint
    root = Item(np.frombuffer(read.data, dtype=np.uint8), "encoded")
    memo = {} if memo is None else memo
    out: _Prepared = {}
    for plan in plans:
        item: Item = root
        error: str | _Fatal | None = None
        for i, op in enumerate(plan.pipeline.pre_ops):
            key = tuple(plan.op_keys[: i + 1])
            hit = memo.get(key)
            if hit is None:
                try:
                    hit = apply_op(op, item)
                except RepliscopeError as exc:  # this variant's pipeline cannot run at all
                    hit = _Fatal(f"{op.name}: {exc}")
                memo[key] = hit
            if not isinstance(hit, Item):
                error = hit
                break
            item = hit
        if error is None:
            error = shape_error(item.data, (shapes or {}).get(plan.name, expected_shape))
        if isinstance(error, _Fatal):
            out[plan.name] = _Cell(None, fatal=error.message)
        else:
            out[plan.name] = (
                _Cell(None, error=error) if error is not None else _Cell(item.data, item.layout, geometry=item.geometry)
            )
    return out, read.fingerprint


def run_sweep(
    prepared: PreparedRun,
    dataset: Dataset,
    names: Sequence[str] | None = None,
    *,
    visual_samples: int = 3,
    on_progress: Callable[[int], None] | None = None,
) -> SweepOutput:
    """Evaluate the reference and every variant on ``dataset``; returns the sweep and one record per plan.

    The sweep runs as the run's plan says (:func:`repliscope.evaluation.run.plan_for`: given, or the same
    cached calibration as ``evaluate``): ``pipelined`` (pre-processing threads beside the runtime) or
    ``data_parallel`` (each worker reads, pre-processes and infers whole batches for every plan with runner
    replicas of its own)."""
    start = time.perf_counter()
    check_dataset(prepared, dataset)
    run_plan = plan_for(prepared, dataset)
    plans, skipped = plan_sweep(prepared, names, run_plan)
    if (
        run_plan.schedule == "data_parallel"
        and prepared.runner.name in _GLOBAL_THREAD_RUNTIMES
        and len({p.runner.threads for p in plans}) > 1
    ):
        run_plan = replace(
            run_plan,
            schedule="pipelined",
            workers=usable_cores(),
            source=f"{run_plan.source}; the sweep runs pipelined: {prepared.runner.name}'s thread "
            "count is process-global, and its variants use different thread counts",
        )
    with ExitStack() as instrumented:
        return _sweep_loop(
            prepared, dataset, plans, skipped, run_plan, start, visual_samples, on_progress, instrumented
        )


def _sweep_loop(
    prepared: PreparedRun,
    dataset: Dataset,
    plans: list[_Plan],
    skipped: list[VariantOutcome],
    run_plan: Plan,
    start: float,
    visual_samples: int,
    on_progress: Callable[[int], None] | None,
    instrumented: ExitStack,
) -> SweepOutput:
    """The sweep's measured part. Tracing (the current tracer): every distinct runner (and each data-parallel
    replica) is instrumented (:meth:`Tracer.instrument`: layer spans at ``framework``) from before its warm-up
    until ``instrumented`` closes; each inference is an ``inference`` span (``model``) naming its variant."""
    tracer = current_tracer()
    for runner in {id(p.runner): p.runner for p in plans}.values():
        instrumented.enter_context(tracer.instrument(runner))
    s = prepared.settings
    task = prepared.task
    expected = input_shape(prepared)
    samples = dataset.samples
    size = run_plan.batch_size
    batches = [samples[i : i + size] for i in range(0, len(samples), size)]
    visual: list[tuple[Sample, _Prepared]] = []
    shapes = {p.name: plan_shape(p.runner) for p in plans}
    load_seconds, warmup_seconds = _load_and_warm_up(plans, len(samples))
    workers = [{id(p.runner): p.runner for p in plans if p.failed is None}]
    if run_plan.schedule == "data_parallel":
        sizes = {
            id(p.runner): sorted({min(q.batch_size, len(samples)) for q in plans if q.runner is p.runner})
            for p in plans
            if p.failed is None
        }
        for _ in range(run_plan.workers - 1):
            replicas = {key: r.replica() for key, r in workers[0].items()}
            for key, r in replicas.items():
                instrumented.enter_context(tracer.instrument(r))
                for n in sizes[key]:  # every batch size this runner will see, outside the measured loop
                    _, warm = load_and_warm_up(r, warmup_shape(n, plan_shape(r)))
                    warmup_seconds += warm
                load_seconds += r.load_seconds
            workers.append(replicas)
    fingerprints: list[str] = []  # what was read, per sample: the identity of every plan's record
    inference = BatchInference(prepared.pipeline, task, plans[0].runner)

    def prepare(smp: Sample) -> tuple[_Prepared, str]:
        return prepare_all(smp, plans, expected, shapes=shapes)

    def infer(
        runners: dict[int, Runner], index: int, batch: Batch, read: list[tuple[_Prepared, str]]
    ) -> list[_PlanBatch]:
        outcomes = _infer_batch(inference, plans, runners, batch, [c for c, _ in read], s.fail_fast)
        for i, (cells, _) in enumerate(read):  # only the visual panel needs model inputs after inference
            if index * size + i >= visual_samples:
                cells.clear()
        return outcomes

    def collect(index: int, batch: Batch, read: list[tuple[_Prepared, str]], outcomes: list[_PlanBatch]) -> None:
        fingerprints.extend(fingerprint for _, fingerprint in read)
        for smp, (prep, _) in zip(batch, read, strict=True):
            if len(visual) < visual_samples:
                visual.append((smp, prep))
        _apply_batch(plans, outcomes)
        _pair_batch(plans)

    loop_start = time.perf_counter()
    drive(
        batches,
        LoopHooks(prepare, infer, collect),
        workers,
        schedule=run_plan.schedule,
        prep_threads=run_plan.workers,
        prefetch=1,
        on_progress=on_progress,
        batch_spans=False,
    )
    end = time.perf_counter()
    for plan in plans:
        plan.loop.fingerprints = fingerprints
    timings = {
        "total_seconds": end - start,
        "load_seconds": load_seconds,
        "warmup_seconds": warmup_seconds,
        "loop_seconds": end - loop_start,
    }
    return _assemble(prepared, dataset, plans, skipped, visual, timings, run_plan)


def plan_shape(runner: Runner) -> tuple[int, ...]:
    """The model input a plan's runner takes, without the batch axis (a variant may run another size)."""
    return tuple(runner.artifact.input_shape[1:])


def _load_and_warm_up(plans: Sequence[_Plan], n_samples: int) -> tuple[float, float]:
    """Load every distinct runner once and warm each up once per batch size it will see, before the measured
    loop; fills each plan's ``loop.load_seconds`` / ``loop.warmup_seconds`` (shared runners report the same
    load). Returns the sweep's (load seconds, warm-up seconds), each runner and warm-up counted once. A variant
    whose runner cannot load fails (``plan.failed``, the sweep goes on); the reference's error stops the sweep."""
    loads: dict[int, float] = {}
    warmups: dict[tuple[int, int], float] = {}
    broken: dict[int, str] = {}  # a variant's runner that cannot load (e.g. a float16 conversion the runtime refuses)
    for plan in plans:
        key = (id(plan.runner), plan.batch_size)
        if id(plan.runner) in broken:
            plan.failed = broken[id(plan.runner)]
            continue
        if key not in warmups:
            shape = warmup_shape(min(plan.batch_size, n_samples), plan_shape(plan.runner))
            try:
                loads[id(plan.runner)], warmups[key] = load_and_warm_up(plan.runner, shape)
            except RepliscopeError as exc:
                if plan.name == REFERENCE:
                    raise
                plan.failed = broken[id(plan.runner)] = f"the variant's runner cannot run: {exc}"
                continue
        plan.loop.load_seconds, plan.loop.warmup_seconds = loads[id(plan.runner)], warmups[key]
    return sum(loads.values()), sum(warmups.values())


@dataclass
class _PlanBatch:
    """One plan's outcome on one batch, computed by a worker; applied to the plan in batch order."""

    preds: list[SamplePrediction]
    fatal: str | None = None
    probs: np.ndarray | None = None  # (n_ok, C)
    ok_rows: list[int] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    twin: str | None = None


def _infer_batch(
    inference: BatchInference,
    plans: Sequence[_Plan],
    runners: dict[int, Runner],
    batch: Sequence[Sample],
    prepared_batch: list[_Prepared],
    fail_fast: bool,
) -> list[_PlanBatch]:
    """Every plan on one batch (:meth:`BatchInference.predict` with the plan's pipeline), ``runners`` mapping
    id(plan.runner) to the runner this worker uses. When an earlier plan of this batch fed the SAME runner, in the
    same batch size, bit-identical inputs, its outputs are reused: a deterministic runtime would compute them
    again. Classification keeps each plan's probabilities (the paired KL)."""
    tracer = current_tracer()
    done: list[tuple[_Plan, list[int], np.ndarray, Outputs, list[float]]] = []  # (plan, rows, x, y, latencies)
    out = []
    for plan in plans:
        fatal = next((p[plan.name].fatal for p in prepared_batch if p[plan.name].fatal), None)
        if plan.failed is not None or fatal is not None:
            out.append(_PlanBatch([], fatal=plan.failed or fatal))
            continue
        twins: list[str] = []

        def reuse(rows: list[int], inputs: np.ndarray, plan: _Plan = plan, twins: list[str] = twins) -> Any:
            for other, other_rows, x, y, seconds in done:
                if (
                    other.runner is plan.runner
                    and other.batch_size == plan.batch_size
                    and other_rows == rows
                    and _same_array(x, inputs)
                ):  # the same runner on the same inputs: its measured latencies are this plan's too
                    twins.append(other.name)
                    return y, seconds
            return None

        outcome = inference.predict(
            runners[id(plan.runner)],
            batch,
            [p[plan.name] for p in prepared_batch],
            pipeline=plan.pipeline,
            chunk=plan.batch_size,
            on_error=fail_fast_hook(f" in {plan.name}") if fail_fast else None,
            reuse=reuse,
            tracer=tracer,
            variant=plan.name,
        )
        result = _PlanBatch(outcome.predictions, ok_rows=outcome.rows, latencies=outcome.latencies)
        out.append(result)
        if outcome.inputs is None or outcome.outputs is None or outcome.post is None:
            continue
        result.twin = twins[0] if twins else None
        done.append((plan, outcome.rows, outcome.inputs, outcome.outputs, outcome.latencies))
        if inference.task.class_scores:  # probabilities: the manifest loader requires a softmax for logits outputs
            result.probs = outcome.post.scores
    return out


def _apply_batch(plans: Sequence[_Plan], outcomes: list[_PlanBatch]) -> None:
    """Add one batch's outcomes to the plans, in batch order (a pipeline error stops that variant)."""
    for plan, res in zip(plans, outcomes, strict=True):
        if plan.failed is None and res.fatal is not None:
            if plan.name == REFERENCE:
                raise RepliscopeError(f"the reference pipeline cannot run: {res.fatal}")
            plan.failed = res.fatal
        if plan.failed is not None:
            plan.probs = None
            continue
        plan.loop.predictions.extend(res.preds)
        plan.loop.batch_latencies.extend(res.latencies)
        plan.loop.inference_seconds += sum(res.latencies)
        plan.probs, plan.ok_rows = res.probs, res.ok_rows
        if res.twin is not None:
            plan.shared_batches[res.twin] = plan.shared_batches.get(res.twin, 0) + 1
            plan.reused_seconds += sum(res.latencies)


def _same_array(a: np.ndarray, b: np.ndarray) -> bool:
    """Bit-identical? A strided probe first (about 0.02 % of the values): different variants almost always
    differ everywhere, so the full comparison runs only for likely twins."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    fa, fb = a.reshape(-1), b.reshape(-1)
    return bool(np.array_equal(fa[::4099], fb[::4099])) and bool(np.array_equal(fa, fb))


def _pair_batch(plans: list[_Plan]) -> None:
    """Per-sample KL(reference || variant) and max |p_ref - p_var| on the samples both evaluated."""
    ref = plans[0]
    if ref.probs is None:
        return
    ref_pos = {i: r for r, i in enumerate(ref.ok_rows)}
    for plan in plans[1:]:
        if plan.probs is None:
            continue
        rows = [(ref_pos[i], r) for r, i in enumerate(plan.ok_rows) if i in ref_pos]
        if not rows:
            continue
        a = ref.probs[[x for x, _ in rows]]
        b = plan.probs[[y for _, y in rows]]
        plan.kl.extend(kl_divergence(a, b).tolist())
        plan.abs_diff.extend(np.abs(a.astype(np.float64) - b).max(axis=1).tolist())


def _assemble(
    prepared: PreparedRun,
    dataset: Dataset,
    plans: list[_Plan],
    skipped: list[VariantOutcome],
    visual: list[tuple[Sample, _Prepared]],
    timings: dict[str, float],
    run_plan: Plan,
) -> SweepOutput:
    sweep_id = uuid.uuid4().hex
    s = prepared.settings
    task = prepared.task
    records: list[EvaluationRecord] = []
    outcomes: dict[str, VariantOutcome] = {}
    ref_preds = plans[0].loop.predictions
    scored, _ = task.restrict(dataset, prepared.class_names)  # detection: the categories the model detects
    for plan in plans:
        if plan.failed is not None:
            outcomes[plan.name] = VariantOutcome(
                name=plan.name,
                pitfall=plan.pitfall or None,
                params=plan.params,
                description=plan.description,
                change=plan.change,
                status="failed",
                reason=plan.failed,
                settings=plan.settings,
            )
            continue
        # each variant's own timings: the variants share one loop (reading and common pre-processing prefixes),
        # so a variant's loop time is its own model time (its batch latencies; a batch whose outputs were reused
        # from a twin counts the twin's measured latency) and its throughput is evaluated samples / that time
        plan.loop.loop_seconds = plan.loop.inference_seconds
        plan.loop.total_seconds = plan.loop.load_seconds + plan.loop.warmup_seconds + plan.loop.loop_seconds
        options = LoopOptions(
            batch_size=plan.batch_size, prep_workers=run_plan.workers, schedule=run_plan.schedule, fail_fast=s.fail_fast
        )
        rec = build_record(prepared, dataset, plan.loop, plan.pipeline, options, runner=plan.runner, plan=run_plan)
        rec = rec.model_copy(update={"kind": "pitfall_variant", "sweep_id": sweep_id, "variant": plan.name})
        records.append(rec)
        paired = None if plan.name == REFERENCE or not task.class_scores else _paired(ref_preds, plan)
        paired_task = (
            task.paired(ref_preds, plan.loop.predictions, scored)
            if plan.name != REFERENCE and not task.class_scores
            else None
        )
        outcomes[plan.name] = VariantOutcome(
            name=plan.name,
            pitfall=plan.pitfall or None,
            params=plan.params,
            description=plan.description,
            change=plan.change,
            status="ok",
            run_id=rec.run_id,
            metrics=rec.metrics,
            paired=paired,
            paired_task=paired_task,
            failed_samples=rec.counts["failed"],
            evaluated_samples=rec.counts["evaluated"],
            pipeline=rec.pipeline,
            settings=plan.settings,
            inference_seconds=plan.loop.inference_seconds,
            inference_reused=plan.shared_batches,
        )
    ordered = [outcomes[p.name] for p in plans[1:]] + skipped
    ordered.sort(key=lambda v: v.name)
    ref_rec = records[0]
    predicted = {
        p.name: {
            s.sample_id: (s.topk_indices[0], s.topk_probs[0])
            for s in p.loop.predictions
            if s.topk_indices and s.topk_probs
        }
        for p in plans
    }
    panels = [
        VisualPanel(
            sample_id=smp.id,
            label=smp.label,
            entries=[
                visual_entry(
                    p.name,
                    _cell(prep, REFERENCE),
                    _cell(prep, p.name),
                    prep[p.name].error,
                    predicted[p.name].get(smp.id),
                )
                for p in plans
            ],
        )
        for smp, prep in visual
    ]
    result = SweepResult(
        sweep_id=sweep_id,
        created_at=datetime.now(UTC),
        repliscope_version=repliscope.__version__,
        manifest=ref_rec.manifest,
        runtime=ref_rec.runtime,
        dataset=ref_rec.dataset,
        software=ref_rec.software,
        hardware=ref_rec.hardware,
        options={
            "batch_size": run_plan.batch_size,
            "threads": run_plan.threads,
            "schedule": run_plan.schedule,
            "plan": run_plan.describe(),
            "variants_requested": [p.name for p in plans[1:]] + [v.name for v in skipped],
        },
        reference=outcomes[REFERENCE],
        variants=ordered,
        claims=[c.model_dump() for c in ref_rec.claims],
        visual=panels,
        timings={**timings, "inference_seconds": sum(p.loop.inference_seconds - p.reused_seconds for p in plans)},
    )
    return SweepOutput(result, records)


def _cell(prep: _Prepared, name: str) -> tuple[np.ndarray, str] | None:
    data, layout = prep[name].data, prep[name].layout
    return None if data is None else (data, layout)


def _paired(ref: list[SamplePrediction], plan: _Plan) -> PairedStats | None:
    return paired_predictions(ref, plan.loop.predictions, plan.kl, float(max(plan.abs_diff)) if plan.abs_diff else 0.0)
