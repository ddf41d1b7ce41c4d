"""The stack matrix: one manifest on the same samples in several software stacks, compared pair by pair.

Per stack: top-1 / top-5 (classification) or AP (detection), the result hash, seconds and throughput. Per pair
(a, b) of stacks (every pair, in the order given): top-1 agreement over the samples evaluated on both, the flips
(correct on a and wrong on b, and the reverse), max and mean |Δ raw output| over the samples whose raw outputs
both runs kept, and whether the result hashes are equal.

The matrix's types and its summary table live in the bottom layer (:mod:`repliscope.records.stack_matrix`, read
by the store and the report); they are handed on here with :func:`build_matrix`, which makes a matrix of records.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np

from repliscope.errors import StackError
from repliscope.evaluation.provenance import runtime_distributions
from repliscope.evaluation.record import EvaluationRecord
from repliscope.records.stack_matrix import (
    MatrixDataset,
    MatrixManifest,
    StackEntry,
    StackMatrix,
    StackPair,
    summary_rows,
)

__all__ = [
    "VERSION_KEYS",
    "MatrixDataset",
    "MatrixManifest",
    "StackEntry",
    "StackMatrix",
    "StackPair",
    "build_matrix",
    "summary_rows",
]

VERSION_KEYS = (
    "onnxruntime",
    "onnx",
    "torch",
    "opencv-python-headless",
    "opencv-python",
    "tensorflow",
    "tensorflow-cpu",
    "keras",
    "ai-edge-litert",
    "numpy",
)
"""Distributions whose versions a stack entry shows for a runtime without a list of its own (else the runtime's
distributions, :func:`runtime_distributions`, and numpy)."""


def _metric(record: EvaluationRecord, name: str) -> float | None:
    return next((m.value for m in record.metrics if m.name == name), None)


def _entry(record: EvaluationRecord, agent_id: str | None) -> StackEntry:
    stack = record.software.get("stack") or {}
    dists: dict[str, Any] = record.software.get("distributions") or {}
    shown = runtime_distributions(str(record.runtime.get("runtime"))) or VERSION_KEYS
    versions = {k: str(dists[k]) for k in shown if dists.get(k)}
    versions.setdefault("numpy", str(record.software.get("numpy")))
    return StackEntry(
        key=stack.get("key", "unknown"),
        spec=stack.get("spec", "unknown"),
        versions=versions,
        agent_id=agent_id,
        run_id=record.run_id,
        top1=_metric(record, "top1"),
        top5=_metric(record, "top5"),
        ap=_metric(record, "AP"),
        result_hash=record.result_hash,
        seconds=record.timings.total_seconds,
        throughput=record.timings.throughput_samples_per_second,
        evaluated=record.counts["evaluated"],
        failed=record.counts["failed"],
    )


def _pair(
    a: EvaluationRecord,
    b: EvaluationRecord,
    key_a: str,
    key_b: str,
    out_a: Mapping[str, np.ndarray] | None,
    out_b: Mapping[str, np.ndarray] | None,
) -> StackPair:
    pa = {s.sample_id: s for s in a.samples if s.error is None}
    pb = {s.sample_id: s for s in b.samples if s.error is None}
    both = [sid for sid in pa if sid in pb]
    with_top1 = [sid for sid in both if pa[sid].top1 is not None and pb[sid].top1 is not None]
    agree = sum(1 for sid in with_top1 if pa[sid].top1 == pb[sid].top1)
    labelled = [sid for sid in with_top1 if pa[sid].label is not None]
    flips_ab = [sid for sid in labelled if pa[sid].top1 == pa[sid].label != pb[sid].top1]
    flips_ba = [sid for sid in labelled if pb[sid].top1 == pb[sid].label != pa[sid].top1]
    max_diff = mean_diff = None
    compared = 0
    if out_a and out_b:
        diffs = []
        for sid in both:
            x, y = out_a.get(sid), out_b.get(sid)
            if x is None or y is None:
                continue
            if x.shape != y.shape:
                raise StackError(
                    f"raw outputs of sample '{sid}' differ in shape between stacks {key_a} "
                    f"{x.shape} and {key_b} {y.shape}: not the same model output"
                )
            diffs.append(np.abs(x.astype(np.float64) - y.astype(np.float64)).ravel())
            compared += 1
        if diffs:
            flat = np.concatenate(diffs)
            max_diff = float(flat.max()) if flat.size else 0.0
            mean_diff = float(flat.mean()) if flat.size else 0.0
    return StackPair(
        a=key_a,
        b=key_b,
        compared=len(both),
        agreement=agree / len(with_top1) if with_top1 else None,
        agree=agree if with_top1 else None,
        flips_ab=flips_ab,
        flips_ba=flips_ba,
        max_abs_output_diff=max_diff,
        mean_abs_output_diff=mean_diff,
        outputs_compared=compared,
        result_hash_equal=a.result_hash == b.result_hash,
    )


def build_matrix(
    records: Sequence[EvaluationRecord],
    outputs_by_stack: Mapping[str, Mapping[str, np.ndarray]] | None = None,
    agents: Mapping[str, str] | None = None,
    matrix_id: str | None = None,
    failures: Sequence[tuple[int, StackEntry]] = (),
) -> StackMatrix:
    """The matrix of ``records`` (one per stack, in the order to show; each names its stack in
    ``software["stack"]``), with the raw outputs of each stack (stack key -> sample id -> float32 array) and the
    agent that ran each (stack key -> agent id); ``failures``: (position in the order, entry with ``error``) of
    the stacks that could not run (no pairs with them). StackError when the records are not the same manifest on
    the same dataset, or two records name one stack."""
    if len(records) < 1:
        raise StackError("a stack matrix needs at least one run")
    first = records[0]
    keys = [(r.software.get("stack") or {}).get("key", "unknown") for r in records]
    if len(set(keys)) != len(keys):
        raise StackError(f"two runs of the matrix name the same stack: {', '.join(keys)}")
    for r in records[1:]:
        if r.manifest.sha256 != first.manifest.sha256:
            raise StackError(
                f"run {r.run_id[:12]} is of manifest {r.manifest.name} {r.manifest.sha256[:12]}, not "
                f"{first.manifest.name} {first.manifest.sha256[:12]}: a matrix compares one manifest"
            )
        if r.dataset.get("identity") != first.dataset.get("identity"):
            raise StackError(
                f"run {r.run_id[:12]} read other data (dataset identity "
                f"{str(r.dataset.get('identity'))[:12]} vs {str(first.dataset.get('identity'))[:12]}): "
                "a matrix compares the same samples"
            )
    outputs = outputs_by_stack or {}
    entries = [_entry(r, (agents or {}).get(k)) for r, k in zip(records, keys, strict=True)]
    for position, failed in sorted(failures, key=lambda f: f[0]):
        entries.insert(position, failed)
    pairs = [
        _pair(records[i], records[j], keys[i], keys[j], outputs.get(keys[i]), outputs.get(keys[j]))
        for i, j in itertools.combinations(range(len(records)), 2)
    ]
    return StackMatrix(
        matrix_id=matrix_id or uuid.uuid4().hex,
        created_at=datetime.now(UTC),
        manifest=MatrixManifest(name=first.manifest.name, version=first.manifest.version, sha256=first.manifest.sha256),
        runtime=str(first.runtime.get("runtime")),
        dataset=MatrixDataset(identity=str(first.dataset.get("identity")), n=first.counts["total"]),
        stacks=entries,
        pairs=pairs,
    )
