"""The stack matrix: one manifest on the same samples in several software stacks, compared pair by pair.

Per stack: top-1 / top-5 (classification) or AP (detection), the result hash, seconds and throughput. Per pair
(a, b) of stacks (every pair, in the order given): top-1 agreement over the samples evaluated on both, the flips
(correct on a and wrong on b, and the reverse), max and mean |Δ raw output| over the samples whose raw outputs
both runs kept, and whether the result hashes are equal.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np
from pydantic import BaseModel, Field

from repliscope.evaluation.provenance import runtime_distributions
from repliscope.evaluation.record import EvaluationRecord
from repliscope.stacks.spec import StackError

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


class MatrixManifest(BaseModel):
    name: str
    version: str
    sha256: str


class MatrixDataset(BaseModel):
    identity: str
    n: int
    """Samples in the dataset (each run saw all of them)."""


class StackEntry(BaseModel):
    """One stack's run: ``versions`` (distribution -> version, from the record), metrics as fractions (None when
    the task has no such metric), ``seconds`` (the run's total, s) and ``throughput`` (samples/s of the loop).
    ``error``: why the stack could not run the job (e.g. its onnxruntime refuses the model's IR version); then
    there is no run, no metric and no pair with it."""

    key: str
    spec: str
    versions: dict[str, str] = Field(default_factory=dict)
    agent_id: str | None = None
    run_id: str | None = None
    top1: float | None = None
    top5: float | None = None
    ap: float | None = None
    result_hash: str | None = None
    seconds: float = 0.0
    throughput: float = 0.0
    evaluated: int = 0
    failed: int = 0
    error: str | None = None


class StackPair(BaseModel):
    """Stacks ``a`` and ``b`` (keys) compared on the samples evaluated on both (``compared``).

    ``agreement``: fraction with the same top-1 (None without top-1 predictions); ``flips_ab``: sample ids
    correct on a and wrong on b (labelled samples), ``flips_ba`` the reverse; ``max_abs_output_diff`` /
    ``mean_abs_output_diff``: over every element of the raw outputs both kept (None when either kept none);
    ``outputs_compared``: samples whose raw outputs were compared; ``result_hash_equal``: identical results."""

    a: str
    b: str
    compared: int
    agreement: float | None
    agree: int | None
    flips_ab: list[str] = Field(default_factory=list)
    flips_ba: list[str] = Field(default_factory=list)
    max_abs_output_diff: float | None = None
    mean_abs_output_diff: float | None = None
    outputs_compared: int = 0
    result_hash_equal: bool


class StackMatrix(BaseModel):
    matrix_id: str
    created_at: datetime
    manifest: MatrixManifest
    runtime: str
    dataset: MatrixDataset
    stacks: list[StackEntry]
    pairs: list[StackPair]

    def pair(self, a: str, b: str) -> StackPair:
        """The pair of stacks ``a`` and ``b`` (keys, either order; flips swapped to a's point of view)."""
        for p in self.pairs:
            if (p.a, p.b) == (a, b):
                return p
            if (p.a, p.b) == (b, a):
                return p.model_copy(update={"a": a, "b": b, "flips_ab": p.flips_ba, "flips_ba": p.flips_ab})
        raise StackError(
            f"matrix {self.matrix_id[:12]} has no pair ({a}, {b}) (stacks: {', '.join(s.key for s in self.stacks)})"
        )


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


def _fmt_fraction(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.2f} %"


def _fmt_diff(value: float | None) -> str:
    return "–" if value is None else "0" if value == 0 else f"{value:.3g}"


def summary_rows(m: StackMatrix) -> list[dict[str, str]]:
    """One row per stack, against the first stack: the table ``repliscope stacks``, the report and the web page
    show. Keys: stack, spec, versions, agent, top1 (or AP), delta, agreement, flips (``a→b / b→a``: correct on
    the first and wrong here / the reverse), max_diff, mean_diff, hash_equal, seconds, throughput, run_id; a stack
    that could not run has delta ``failed`` and ``error`` (the reason)."""
    rows = []
    ran = [s for s in m.stacks if s.error is None]
    first = ran[0] if ran else None
    for s in m.stacks:
        if s.error is not None:
            rows.append(
                {
                    "stack": s.key,
                    "spec": s.spec,
                    "versions": ", ".join(f"{k} {v}" for k, v in s.versions.items()),
                    "agent": s.agent_id or "–",
                    "top1": "–",
                    "delta": "failed",
                    "agreement": "–",
                    "flips": "–",
                    "max_diff": "–",
                    "mean_diff": "–",
                    "hash_equal": "–",
                    "seconds": "–",
                    "throughput": "–",
                    "run_id": "–",
                    "error": s.error,
                }
            )
            continue
        metric = s.top1 if s.top1 is not None else s.ap
        base = (first.top1 if first.top1 is not None else first.ap) if first is not None else None
        row = {
            "stack": s.key,
            "spec": s.spec,
            "versions": ", ".join(f"{k} {v}" for k, v in s.versions.items()),
            "agent": s.agent_id or "–",
            "top1": _fmt_fraction(metric),
            "seconds": f"{s.seconds:.2f}",
            "throughput": f"{s.throughput:.1f}",
            "run_id": s.run_id or "–",
        }
        if s is first or first is None:
            row.update(delta="(reference)", agreement="–", flips="–", max_diff="–", mean_diff="–", hash_equal="–")
        else:
            p = m.pair(first.key, s.key)
            delta = None if metric is None or base is None else metric - base
            agreement = "–" if p.agreement is None else f"{_fmt_fraction(p.agreement)} ({p.agree}/{p.compared})"
            row.update(
                delta="–" if delta is None else f"{100 * delta:+.2f} pp",
                agreement=agreement,
                flips=f"{len(p.flips_ab)} / {len(p.flips_ba)}",
                max_diff=_fmt_diff(p.max_abs_output_diff),
                mean_diff=_fmt_diff(p.mean_abs_output_diff),
                hash_equal="yes" if p.result_hash_equal else "no",
            )
        rows.append(row)
    return rows
