"""What fits a stored manifest, from the registries: the runtimes that run its ``source.format``
(:data:`repliscope.runtimes.base.RUNTIME_SOURCE_FORMATS`), the registered datasets whose samples carry what its task
scores (``Task.truth`` against the annotations recorded at registration), the pitfall variants about its task
(:func:`repliscope.pitfalls.sweep.task_pitfalls`) and the datasets declared as each claim's dataset. The wizard
offers only what fits; ``POST /api/v1/jobs`` refuses a misfit at its field (:func:`check_job`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ManifestFacts:
    """What the wizard needs of a stored manifest (read from its validated text)."""

    ref: str
    task: str
    framework: str
    format: str
    claims: tuple[tuple[str, str], ...]
    """(claim dataset ``NAME/SPLIT``, its label e.g. ``top1 75.1 % on imagenet-1k/val``), accuracy claims only."""


@dataclass(frozen=True)
class DatasetFacts:
    name: str
    description: str
    declared_as: str | None
    annotations: tuple[str, ...] | None


@dataclass
class Fit:
    """For one manifest: each runtime / dataset / variant -> None (fits) or why not."""

    runtimes: dict[str, str | None] = field(default_factory=dict)
    datasets: dict[str, str | None] = field(default_factory=dict)
    variants: list[str] = field(default_factory=list)
    claims: list[tuple[str, str]] = field(default_factory=list)
    judges: dict[str, list[str]] = field(default_factory=dict)
    """dataset name -> the labels of the claims it is declared for."""

    def as_json(self) -> dict[str, Any]:
        return {
            "runtimes": self.runtimes,
            "datasets": self.datasets,
            "variants": self.variants,
            "claims": self.claims,
            "judges": self.judges,
        }


def manifest_facts(ref: str, text: str) -> ManifestFacts | None:
    """The facts of a stored manifest (None when its text no longer parses: it is then not offered)."""
    import yaml

    from repliscope.manifest.schema import PERFORMANCE_METRICS
    from repliscope.service.web.claim_cells import claim_cell

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return None
    if not isinstance(data, dict):
        return None
    framework, source = data.get("framework") or {}, data.get("source") or {}
    claims = []
    for claim in data.get("claims") or []:
        if not isinstance(claim, dict) or claim.get("metric") in PERFORMANCE_METRICS:
            continue
        ds = claim.get("dataset") or {}
        on = f"{ds.get('name')}/{ds.get('split')}"
        value = claim.get("value")
        percent_value = (
            value / 100 if claim.get("metric") in ("top1", "top5") and isinstance(value, int | float) else value
        )
        label = claim_cell({"metric": claim.get("metric"), "claimed": percent_value}).claimed
        claims.append((on, f"{claim.get('metric')} {label} on {on}"))
    return ManifestFacts(
        ref=ref,
        task=str(data.get("task") or "unknown task"),
        framework=str(framework.get("name") if isinstance(framework, dict) else "?"),
        format=str(source.get("format") if isinstance(source, dict) else "?"),
        claims=tuple(claims),
    )


def fit_of(manifest: ManifestFacts, datasets: list[DatasetFacts], runtimes: list[str]) -> Fit:
    """What fits ``manifest``: runtimes by source format, datasets by what its task scores, its task's pitfall
    variants, and the datasets declared as each claim's dataset."""
    from repliscope.pitfalls.base import task_pitfalls
    from repliscope.runtimes.base import RUNTIME_SOURCE_FORMATS
    from repliscope.tasks.base import TASKS

    fit = Fit(claims=list(manifest.claims))
    for name in runtimes:
        formats = RUNTIME_SOURCE_FORMATS.get(name)
        if formats is None:
            fit.runtimes[name] = None  # a plugin runtime that declares no formats: offered, the job says
        elif manifest.format not in formats:
            fit.runtimes[name] = f"runs {', '.join(formats)} sources, not {manifest.format}"
        else:
            fit.runtimes[name] = None
    truth = TASKS.get(manifest.task).truth if manifest.task in TASKS else None
    for d in datasets:
        if truth is None or d.annotations is None:
            fit.datasets[d.name] = None
        elif truth not in d.annotations:
            carries = ", ".join(d.annotations) or "nothing"
            fit.datasets[d.name] = f"its samples carry {carries}; {manifest.task} scores {truth}"
        else:
            fit.datasets[d.name] = None
        fit.judges[d.name] = [label for on, label in manifest.claims if d.declared_as == on]
    fit.variants = task_pitfalls(manifest.task) if manifest.task in TASKS else []
    return fit


def check_job(manifest_ref: str, manifest_text: str, dataset: Any, runtimes: list[str], variants: list[str]) -> None:
    """Raise :class:`MisfitError` (naming ``runtime``, ``runtime_b``, ``dataset`` or ``variants``) when a job's
    runtimes, registered dataset (a ``RegisteredDataset``) or pitfall variants do not fit the manifest."""
    from repliscope.runtimes.base import RUNTIMES

    facts = manifest_facts(manifest_ref, manifest_text)
    if facts is None:
        return
    fit = fit_of(
        facts,
        [DatasetFacts(dataset.name, dataset.description, dataset.declared_as, dataset.annotations)],
        sorted(RUNTIMES.names()),
    )
    for where, name in zip(("runtime", "runtime_b"), runtimes, strict=False):
        why = fit.runtimes.get(name)
        if why:
            raise MisfitError(where, f"{name} does not run {manifest_ref}: it {why}")
    why = fit.datasets.get(dataset.name)
    if why:
        raise MisfitError("dataset", f"{dataset.name} does not fit {manifest_ref}: {why}")
    unknown = [v for v in variants if v.split("[", 1)[0].strip() not in fit.variants]  # NAME[degree]: NAME's
    if unknown:
        raise MisfitError(
            "variants", f"{', '.join(unknown)} not a pitfall of {facts.task} (allowed: {', '.join(fit.variants)})"
        )


class MisfitError(Exception):
    """A job part that does not fit its manifest: ``field`` names it (``runtime``, ``dataset``, ...)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message
