"""A stack matrix's types: one manifest on the same samples in several software stacks, compared pair by pair
(built by :func:`repliscope.stacks.matrix.build_matrix`), and the summary table every view of it shows.

The bottom layer (it imports nothing of repliscope but its exceptions): the store and the report read a matrix
without importing the stacks package, which sits above the core.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from repliscope.errors import StackError


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
