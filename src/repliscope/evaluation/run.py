"""Evaluate one manifest on one runtime and dataset, producing a complete EvaluationRecord."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np

from repliscope.datasets.base import Dataset
from repliscope.errors import RepliscopeError
from repliscope.evaluation.adaptive import fits_in_run, run_adaptive
from repliscope.evaluation.artifacts import load_class_names, resolve_artifact
from repliscope.evaluation.calibration import Plan, Planning, calibrate, planning, write_cached
from repliscope.evaluation.engine import LoopOptions, ProgressCallback, run_loop
from repliscope.evaluation.prepared import PreparedRun
from repliscope.evaluation.provenance import usable_cores
from repliscope.evaluation.record import EvaluationRecord
from repliscope.evaluation.record_builder import build_record
from repliscope.evaluation.run_config import RunSettings
from repliscope.limits import TENSOR_BYTES
from repliscope.manifest.loader import LoadedManifest, build_ops, load_manifest
from repliscope.ops.base import BuildContext
from repliscope.ops.pipeline import Pipeline
from repliscope.paths import default_cache_dir
from repliscope.runtimes.base import RUNTIMES, Runner


def prepare(manifest: str | Path | LoadedManifest, settings: RunSettings) -> PreparedRun:
    loaded = manifest if isinstance(manifest, LoadedManifest) else load_manifest(manifest)
    cache_dir = settings.cache_dir or default_cache_dir()
    cache_dir.mkdir(parents=True, exist_ok=True)  # exports, conversions and calibrations are written there
    artifact = resolve_artifact(loaded, cache_dir, settings.allow_download, settings.allow_outside_paths)
    class_names = load_class_names(loaded, cache_dir, settings.allow_download, settings.allow_outside_paths)
    pre, post = build_ops(loaded, BuildContext(class_names=class_names))
    runner = RUNTIMES.get(settings.runtime)(artifact, threads=settings.threads or 1, cache_dir=cache_dir)
    return PreparedRun(loaded, artifact, Pipeline(pre, post), runner, settings, class_names)


def evaluate(
    prepared: PreparedRun,
    dataset: Dataset,
    on_progress: ProgressCallback | None = None,
    pipeline: Pipeline | None = None,
    *,
    outputs: dict[str, np.ndarray] | None = None,
) -> EvaluationRecord:
    """Run the loop and assemble the record (metrics, claim verdicts, provenance, result hash). Given a dict as
    ``outputs``, it receives every sample's raw model output (sample id -> float32 1-D array, see
    :attr:`LoopResult.outputs`); the record is the same either way."""
    s = prepared.settings
    check_dataset(prepared, dataset)
    pipe = pipeline or prepared.pipeline
    planned = planning_for(prepared, dataset, pipe)
    plan = planned.plan
    if plan is None and not fits_in_run(len(dataset.samples), planned.candidates):
        plan = plan_for(prepared, dataset, pipe)  # too few samples to calibrate on: trials before the loop
        planned = replace(planned, plan=plan)
    check_batch_budget(prepared, max(c.batch_size for c in (*planned.candidates, *([plan] if plan else []))))
    if plan is not None and not plan.source.startswith("calibrated"):  # given or fallback: nothing to check
        runner = runner_with_threads(prepared.runner, plan.threads)
        options = plan.loop_options(s.fail_fast, keep_outputs=outputs is not None)
        loop = run_loop(pipe, runner, dataset.samples, options, input_shape(prepared), on_progress, prepared.task)
        if runner is not prepared.runner and prepared.runner.loaded:  # e.g. the ONNX export, made earlier
            loop.load_seconds += prepared.runner.load_seconds
            loop.total_seconds += prepared.runner.load_seconds
    else:  # calibrate on the run's first samples, or check the cached calibration on them
        template = LoopOptions(1, 1, fail_fast=s.fail_fast, keep_outputs=outputs is not None)
        loop, plan = run_adaptive(
            planned, pipe, prepared.runner, dataset.samples, template, input_shape(prepared), on_progress, prepared.task
        )
        if s.prep_workers:
            plan = replace(plan, workers=s.prep_workers)
        runner = runner_with_threads(prepared.runner, plan.threads)
        options = plan.loop_options(s.fail_fast, keep_outputs=outputs is not None)
    if outputs is not None and loop.outputs is not None:
        outputs.update(loop.outputs)
    return build_record(prepared, dataset, loop, pipe, options, runner, plan)


def input_shape(prepared: PreparedRun) -> tuple[int, ...]:
    """The model input without the batch axis, e.g. (3, 224, 224)."""
    return tuple(prepared.artifact.input_shape[1:])


def check_batch_budget(prepared: PreparedRun, batch_size: int) -> None:
    """Refuse a batch of model inputs over the :data:`repliscope.limits.TENSOR_BYTES` budget (the input's
    elements per sample, -1 axes counted as 1, x ``batch_size`` x dtype size) before anything is allocated."""
    itemsize = np.dtype(prepared.artifact.input_dtype).itemsize
    per_sample = math.prod(d for d in input_shape(prepared) if d is not None and d > 0) * itemsize
    budget = TENSOR_BYTES.value
    if per_sample * batch_size > budget:
        raise RepliscopeError(
            f"a batch of {batch_size} inputs of {per_sample:,} bytes each is "
            f"{per_sample * batch_size:,} bytes, more than the {budget:,}-byte tensor budget "
            f"({TENSOR_BYTES.name}, ${TENSOR_BYTES.env}); use a smaller --batch-size"
        )


def batch_limit(prepared: PreparedRun) -> int | None:
    """1 when the model takes one image at a time: a batch axis fixed at 1 in ``inputs[0].shape``, or an
    image axis of any size (-1: samples of different sizes cannot be stacked); else None."""
    shape = prepared.artifact.input_shape
    return 1 if shape and (shape[0] == 1 or any(d < 0 for d in shape[1:])) else None


def plan_for(prepared: PreparedRun, dataset: Dataset, pipeline: Pipeline | None = None) -> Plan:
    """How this run uses the cores, before its loop: as given in the settings, else the cached calibration, else
    calibrated now (:func:`repliscope.evaluation.calibration.calibrate`, cached) for the rest (batch 1 for a
    model that takes one image at a time, :func:`batch_limit`). ``evaluate`` calibrates on its own samples
    instead (:mod:`repliscope.evaluation.adaptive`)."""
    planned = planning_for(prepared, dataset, pipeline)
    if planned.plan is not None:
        return planned.plan
    given = planned.candidates[0]
    s = prepared.settings
    plan = calibrate(
        prepared.runner,
        pipeline or prepared.pipeline,
        dataset.samples,
        input_shape(prepared),
        cores=usable_cores(),
        batch_size=given.batch_size,
        threads=s.threads,
        schedule=s.schedule,
    )
    if plan.source == "calibrated" and planned.cache_path is not None:  # a fallback depends on this dataset
        write_cached(planned.cache_path, plan)
    return replace(plan, workers=s.prep_workers) if s.prep_workers else plan


def planning_for(prepared: PreparedRun, dataset: Dataset, pipeline: Pipeline | None = None) -> Planning:
    """:func:`repliscope.evaluation.calibration.planning` for this run's settings: a given, cached or fallback
    plan, or the candidates to calibrate (``--prep-workers`` applied to each)."""
    s = prepared.settings
    limit = batch_limit(prepared)
    if limit is not None and s.batch_size is not None and s.batch_size > limit:
        raise RepliscopeError(
            f"the model takes one image at a time (inputs[0].shape "
            f"{list(prepared.artifact.input_shape)}): --batch-size {s.batch_size} is not possible, "
            "use --batch-size 1"
        )
    if limit is not None and s.batch_size is None:  # the model's input shape fixes it
        s = replace(s, batch_size=limit, origins={**s.origins, "batch_size": "manifest"})
    if s.threads is not None and s.batch_size is not None and s.schedule is None:
        return Planning(
            Plan(
                "pipelined",
                s.batch_size,
                s.prep_workers or s.threads,
                s.threads,
                "given (--threads and --batch-size without --schedule: pipelined, no calibration)",
            )
        )
    planned = planning(
        prepared.runner,
        pipeline or prepared.pipeline,
        dataset.samples,
        input_shape(prepared),
        batch_size=s.batch_size,
        threads=s.threads,
        schedule=s.schedule,
        cache_dir=s.cache_dir or default_cache_dir(),
    )
    if not s.prep_workers:
        return planned
    return Planning(
        replace(planned.plan, workers=s.prep_workers) if planned.plan else None,
        tuple(replace(c, workers=s.prep_workers) for c in planned.candidates),
        planned.cache_path,
    )


def runner_with_threads(runner: Runner, threads: int) -> Runner:
    """``runner`` when it has ``threads`` intra-op threads, else a replica with them (loaded separately): the
    runner of a plan (evaluation, pitfall sweep) and of a benchmark's thread count."""
    return runner if runner.threads == threads else runner.replica(threads=threads)


def check_dataset(prepared: PreparedRun, dataset: Dataset) -> None:
    """Can the manifest's task evaluate ``dataset``? (DatasetError naming the problem.)"""
    prepared.task.check_dataset(dataset, prepared.loaded.manifest.labels.num_classes, prepared.class_names)
