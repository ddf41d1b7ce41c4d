"""The one record builder: what every record of a run says about what ran (manifest, pipeline, runtime, software,
hardware: :func:`provenance`) and the evaluation record of one loop (:func:`build_record`), used by the
evaluation, each variant of the pitfall sweep and (the provenance) the benchmark."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import repliscope
from repliscope.datasets.base import Dataset
from repliscope.evaluation.claims import Sampling, judge_claim, objects_per_category, sample_selection
from repliscope.evaluation.engine import LoopOptions, LoopResult
from repliscope.evaluation.ground_truth import ground_truth_of
from repliscope.evaluation.provenance import hardware, manifest_distributions, software_stack
from repliscope.evaluation.record import (
    ClaimVerdict,
    EvaluationRecord,
    ManifestInfo,
    MetricValue,
    Timings,
    result_hash,
)
from repliscope.manifest.loader import LoadedManifest
from repliscope.ops.pipeline import Pipeline
from repliscope.runtimes.base import Runner

if TYPE_CHECKING:
    from repliscope.evaluation.calibration import Plan
    from repliscope.evaluation.prepared import PreparedRun
    from repliscope.manifest.schema import ClaimSpec, DatasetRef
    from repliscope.tasks.base import Task


def manifest_info(loaded: LoadedManifest) -> ManifestInfo:
    """The record's copy of the manifest that ran: name, version, path, sha256 and its whole text."""
    return ManifestInfo(
        name=loaded.manifest.name,
        version=loaded.manifest.version,
        path=str(loaded.path),
        sha256=loaded.sha256,
        text=loaded.text,
    )


def provenance(
    prepared: PreparedRun, runner: Runner, pipeline: Pipeline, distributions: Sequence[str] = ()
) -> dict[str, Any]:
    """What ran, as every record of a run states it: ``manifest``, ``pipeline`` (its description), ``runtime``
    (the runner's info with the model's sha256 and origin), ``software`` (the manifest's distributions, the
    runtime's and ``distributions``) and ``hardware`` (with the runner's thread count)."""
    loaded = prepared.loaded
    return {
        "manifest": manifest_info(loaded),
        "pipeline": pipeline.describe(),
        "runtime": {
            **runner.info(),
            "model_sha256": prepared.artifact.sha256,
            "model_origin": prepared.artifact.origin,
        },
        "software": software_stack(manifest_distributions(loaded.manifest, runner.name, tuple(distributions))),
        "hardware": hardware(runner.threads),
    }


def judge_claims(
    claims: Sequence[ClaimSpec],
    metrics: Sequence[MetricValue],
    per_class: Sequence[Mapping[str, Any]] | None,
    task: Task,
    evaluated_as: DatasetRef | None,
    evaluated_name: str,
    failed: int,
    sampling: Sampling,
) -> list[ClaimVerdict]:
    """Every accuracy claim's verdict on a run's metrics (:func:`~repliscope.evaluation.claims.judge_claim`; a
    detection claim also by its objects per category): the evaluation's, and a merged sharded run's
    (``repliscope.evaluation.merge``)."""
    by_name = {m.name: m for m in metrics}
    support = objects_per_category(per_class) if task.truth == "boxes" else None
    return [
        judge_claim(
            c, by_name.get(c.metric), evaluated_as, evaluated_name, failed, sampling=sampling, per_category=support
        )
        for c in claims
    ]


def build_record(
    prepared: PreparedRun,
    dataset: Dataset,
    loop: LoopResult,
    pipeline: Pipeline,
    options: LoopOptions,
    runner: Runner | None = None,
    plan: Plan | None = None,
) -> EvaluationRecord:
    """The evaluation record of one loop (metrics, claim verdicts, provenance, result hash); ``runner`` (default:
    the prepared one) is what actually ran."""
    s = prepared.settings
    runner = runner or prepared.runner
    task = prepared.task
    scored, coverage = task.restrict(dataset, prepared.class_names)  # detection: the categories the model detects
    metrics, per_class = task.evaluate(loop.predictions, scored)
    failed = sum(1 for p in loop.predictions if p.error is not None)
    sampling = sample_selection(len(dataset.samples), s.evaluated_as, limit=s.limit, shard=s.shard, declared=s.sampling)
    claims = judge_claims(
        prepared.loaded.manifest.claims, metrics, per_class, task, s.evaluated_as, dataset.name, failed, sampling
    )
    evaluated = len(loop.predictions) - failed
    return EvaluationRecord(
        run_id=uuid.uuid4().hex,
        created_at=datetime.now(UTC),
        repliscope_version=repliscope.__version__,
        **provenance(prepared, runner, pipeline),
        dataset={
            **dataset.describe(loop.fingerprints),
            **coverage,  # identity of what the loop read
            "evaluated_as": s.evaluated_as.model_dump() if s.evaluated_as else None,
            "sampling": sampling.as_record(),  # whole split / random sample / selection, and how
        },
        options={
            "batch_size": options.batch_size,
            "threads": runner.threads,
            "prep_workers": options.prep_workers,
            "prefetch_batches": options.prefetch_batches,
            "fail_fast": options.fail_fast,
            "warmup": options.warmup,
            "schedule": options.schedule,
            "plan": plan.describe() if plan is not None else None,
        },
        metrics=metrics,
        claims=claims,
        counts={
            "total": len(loop.predictions),
            "evaluated": evaluated,
            "failed": failed,
            "labelled": sum(1 for x in dataset.samples if task.has_truth(x)),  # a label, boxes or a mask
            **loop.counts,  # the task's own (classification: ties)
        },
        timings=Timings(
            total_seconds=loop.total_seconds,
            inference_seconds=loop.inference_seconds,
            batch_latencies_seconds=loop.batch_latencies,
            load_seconds=loop.load_seconds,
            warmup_seconds=loop.warmup_seconds,
            loop_seconds=loop.loop_seconds,
            read_ahead_samples=loop.ahead,
            read_ahead_cpu_seconds=loop.ahead_seconds,
            throughput_seconds=loop.rate_seconds,
            throughput_samples_per_second=evaluated / loop.rate_seconds if loop.rate_seconds else 0.0,
        ),
        samples=loop.predictions,
        result_hash=result_hash(loop.predictions),
        task=task.name,
        ground_truth=ground_truth_of(scored) if task.truth == "boxes" else None,
        per_class=per_class,
    )
