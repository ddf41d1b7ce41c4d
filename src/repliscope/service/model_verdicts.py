"""The models pages' verdicts: per model, one cell per (runtime, dataset) with its best-supported judged verdict.

The newest run is not the best evidence: a 20-image smoke run stored after the judged 1000-image one would hide it.
Among the plain runs of a model (sweep variants and benchmarks left out: they are not the model as claimed) on one
runtime and one dataset, the cell shows

1. a run whose accuracy claims were judged (a verdict ``consistent`` or ``inconsistent`` as
   :func:`repliscope.report.sections.shown_verdict` shows it: the rule of :func:`repliscope.evaluation.claims.
   judge_claim`, an older record's wide "consistent" counting as not comparable) over one that was not;
2. among judged runs, the one with the most evaluated samples, then the narrowest 95 % interval (the widest of its
   judged claims), then the newest;
3. when no run judged its claims, the newest run (its "not comparable" or "no claim" said as such).

Each cell says which run it comes from and why it was chosen (:attr:`BestCell.why`). At most :data:`RUNS_SCANNED`
newest runs are considered; records are read without their samples, most samples first, only as far as the choice
needs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

RUNS_SCANNED = 500
"""The newest runs the models pages consider (the store's largest page)."""
JUDGED = ("consistent", "inconsistent")


@dataclass(frozen=True)
class BestCell:
    """The best-supported verdict of one model on one runtime and dataset."""

    runtime: str
    dataset: str
    """The dataset's name as recorded (the runs page's ``dataset`` filter)."""
    version: str
    hardware: str
    verdict: str
    run_id: str
    created_at: datetime
    samples: int
    """Evaluated samples of the chosen run."""
    judged: bool
    runs: int
    """Plain runs of this model on this runtime and dataset (the chosen one included)."""
    why: str
    """Why this run, e.g. ``judged on 1,000 samples, the most of 3 runs``."""
    claims: tuple[Any, ...] = ()
    """:class:`~repliscope.service.web.claim_cells.ClaimCell` per accuracy claim of the chosen run."""
    claim_dicts: tuple[dict[str, Any], ...] = ()
    """The chosen run's accuracy claims as stored (JSON objects)."""
    evaluated: str = ""
    """The evaluated data as the verdict names it, e.g. ``imagenet-sample (as imagenet-1k/val)``."""
    model: str = ""

    @property
    def created(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M}"

    @property
    def runs_href(self) -> str:
        """The runs page filtered to this model, runtime and dataset."""
        return "/runs?" + urlencode({"model": self.model, "runtime": self.runtime, "dataset": self.dataset})


@dataclass
class ModelVerdicts:
    """One model: its versions (as its runs name them), its claims (labels) and its cells."""

    name: str
    versions: list[str] = field(default_factory=list)
    claims: list[str] = field(default_factory=list)
    cells: list[BestCell] = field(default_factory=list)


@dataclass(frozen=True)
class _Read:
    summary: Any
    claims: tuple[dict[str, Any], ...]

    @property
    def judged(self) -> bool:
        from repliscope.report.sections import shown_verdict

        return any(shown_verdict(c)[0] in JUDGED for c in self.claims)

    @property
    def width(self) -> float:
        """The widest 95 % interval of the judged claims (0 without one)."""
        from repliscope.report.sections import shown_verdict

        widths = [
            float(c["ci_high"]) - float(c["ci_low"])
            for c in self.claims
            if shown_verdict(c)[0] in JUDGED and c.get("ci_low") is not None and c.get("ci_high") is not None
        ]
        return max(widths, default=0.0)


def _evaluated(summary: Any) -> int:
    return int(summary.num_samples) - int(summary.num_failed)


def _accuracy_claims(claims: Any) -> tuple[dict[str, Any], ...]:
    from repliscope.manifest.schema import PERFORMANCE_METRICS

    dumped = [c.model_dump(mode="json") if hasattr(c, "model_dump") else dict(c) for c in claims]
    return tuple(c for c in dumped if c.get("metric") not in PERFORMANCE_METRICS)


def _choose(store: Any, runs: list[Any]) -> tuple[_Read, str]:
    """The best-supported run of ``runs`` (one model, runtime and dataset; newest first) and why it was chosen."""
    from repliscope.errors import StoreError

    def read(summary: Any) -> _Read:
        try:
            record, _count = store.get_without_samples(summary.run_id)
        except StoreError:  # deleted meanwhile: nothing judged
            return _Read(summary, ())
        return _Read(summary, _accuracy_claims(record.claims))

    of = f"of {len(runs)} runs" if len(runs) > 1 else "the only run"
    best: _Read | None = None
    for summary in sorted(runs, key=lambda s: (_evaluated(s), s.created_at), reverse=True):
        if best is not None and _evaluated(summary) < _evaluated(best.summary):
            break  # fewer samples than the judged run found: never better
        candidate = read(summary)
        if not candidate.judged:
            continue
        if best is None or (candidate.width, -candidate.summary.created_at.timestamp()) < (
            best.width,
            -best.summary.created_at.timestamp(),
        ):
            best = candidate
    if best is not None:
        n = _evaluated(best.summary)
        ties = sum(1 for s in runs if _evaluated(s) == n)
        how = f"judged on {n:,} samples, the most {of}" if len(runs) > 1 else f"judged on {n:,} samples, {of}"
        if ties > 1:
            how += f" (the narrowest interval of the {ties} with {n:,})"
        return best, how
    newest = read(runs[0])
    if not newest.claims:
        return newest, f"no claim judged: the newest {of}" if len(runs) > 1 else "no claim judged: the only run"
    return newest, (f"no run judged its claims: the newest {of}" if len(runs) > 1 else "its claims were not judged")


def best_verdicts(store: Any, name: str | None = None) -> list[ModelVerdicts]:
    """Every model with a stored plain run (``name``: that model only), by name, each with one :class:`BestCell`
    per (runtime, dataset), ordered by runtime then dataset."""
    from repliscope.service.web.claim_cells import claim_cell
    from repliscope.service.web.views import verdict_text
    from repliscope.store.repository import RunQuery

    summaries, _total = store.query_runs(RunQuery(model=name), "-created_at", 1, RUNS_SCANNED)
    groups: dict[tuple[str, str, str], list[Any]] = {}
    for s in summaries:  # newest first
        if s.variant is not None or s.kind == "benchmark":
            continue
        groups.setdefault((s.manifest_name, s.runtime, s.dataset_name), []).append(s)
    models: dict[str, ModelVerdicts] = {}
    for (model, runtime, dataset), runs in sorted(groups.items()):
        chosen, why = _choose(store, runs)
        row = models.setdefault(model, ModelVerdicts(model))
        for s in runs:
            if s.manifest_version not in row.versions:
                row.versions.append(s.manifest_version)
        for c in chosen.claims:
            label = _claim_label(c)
            if label not in row.claims:
                row.claims.append(label)
        s = chosen.summary
        row.cells.append(
            BestCell(
                runtime=runtime,
                dataset=dataset,
                version=s.manifest_version,
                hardware=s.cpu_model or "—",
                verdict=verdict_text(list(chosen.claims)),
                run_id=s.run_id,
                created_at=s.created_at,
                samples=_evaluated(s),
                judged=chosen.judged,
                runs=len(runs),
                why=why,
                claims=tuple(claim_cell(c) for c in chosen.claims),
                claim_dicts=chosen.claims,
                evaluated=str(chosen.claims[0].get("evaluated_dataset", "")) if chosen.claims else dataset,
                model=model,
            )
        )
    for row in models.values():
        row.versions.sort()
    return [models[k] for k in sorted(models)]


def _claim_label(claim: Mapping[str, Any]) -> str:
    """``top1 75.1 % on imagenet-1k/val`` (percent metrics in percent, as the manifest writes them)."""
    from repliscope.service.web.claim_cells import claim_cell

    return f"{claim.get('metric')} {claim_cell(claim).claimed} on {claim.get('claim_dataset')}"
