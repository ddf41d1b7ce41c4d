"""The run wizard (``/new``): what fits the chosen manifest (:mod:`repliscope.service.fit`), and its submission.

For each stored manifest the wizard knows, from the registries, which runtimes run its ``source.format``
(:data:`repliscope.runtimes.base.RUNTIME_SOURCE_FORMATS`), which registered datasets carry what its task scores
(``Task.truth`` against the dataset's recorded annotations), which pitfall variants are about its task
(:func:`repliscope.pitfalls.sweep.task_pitfalls`) and which datasets are declared to be a claim's dataset. The
page offers only what fits and says why the rest is not offered; a submission that picks a misfit is refused at
that field (:func:`check_fit`) before it goes through the API's own ``submit_job``."""

from __future__ import annotations

from typing import Any

from repliscope.service.fit import DatasetFacts, Fit, fit_of, manifest_facts
from repliscope.service.web.job_pages import WizardError

__all__ = ["DatasetFacts", "Fit", "check_fit", "fit_of", "manifest_facts", "submit", "wizard_choices"]

WIZARD_INT_FIELDS = ("threads", "limit", "min_queries")
"""Whole-number wizard fields passed as job options (empty = not given)."""


def wizard_choices(store: Any, agents: list[Any] | None = None, selected: str | None = None) -> dict[str, Any]:
    """What each wizard step offers; ``selected``: the chosen manifest (default: the first stored)."""
    from repliscope.evaluation.provenance import cpu_model, usable_cores
    from repliscope.manifest.schema import SCENARIOS
    from repliscope.pitfalls.base import PITFALLS
    from repliscope.runtimes.base import RUNTIMES
    from repliscope.service.executor import KINDS
    from repliscope.store.service_tables import list_datasets, list_manifests
    from repliscope.tasks.base import TASKS

    manifests = [f for m in list_manifests(store, None) if (f := manifest_facts(f"{m.name}@{m.version}", m.text))]
    datasets = [DatasetFacts(d.name, d.description, d.declared_as, d.annotations) for d in list_datasets(store)]
    runtimes = sorted(RUNTIMES.names())
    fits = {m.ref: fit_of(m, datasets, runtimes) for m in manifests}
    chosen = next((m for m in manifests if m.ref == selected), manifests[0] if manifests else None)
    return {
        "tasks": sorted({m.task for m in manifests}) or sorted(TASKS.names()),
        "manifests": manifests,
        "chosen": chosen,
        "fit": fits.get(chosen.ref) if chosen else None,
        "fits": {ref: f.as_json() for ref, f in fits.items()},
        "runtimes": runtimes,
        "hardware": f"{cpu_model()}, {usable_cores()} usable cores",
        "agents": agents or [],
        "max_threads": max(1, usable_cores()),
        "datasets": datasets,
        "kinds": list(KINDS),
        "scenarios": [s for s in SCENARIOS if s != "server"],
        "variants": [(name, PITFALLS.get(name).description) for name in PITFALLS.names()],
    }


def check_fit(choices: dict[str, Any], form: dict[str, Any]) -> None:
    """Refuse (WizardError at the field) a runtime, dataset, second runtime, variant or claim that does not fit
    the chosen manifest; an unknown manifest is left to the API (it names it)."""
    ref = form.get("manifest", "")
    fit: Fit | None = None
    for m in choices["manifests"]:
        if m.ref == ref:
            fit = fit_of(m, choices["datasets"], choices["runtimes"])
            facts = m
    if fit is None:
        return
    for name in ("runtime", "runtime_b"):
        why = fit.runtimes.get(form.get(name, ""))
        if why:
            raise WizardError(422, name, f"{form[name]} does not run {ref}: it {why}")
    why = fit.datasets.get(form.get("dataset", ""))
    if why:
        raise WizardError(422, "dataset", f"{form['dataset']} does not fit {ref}: {why}")
    variants = form.get("variants") or []
    if variants and form.get("kind") != "pitfalls":
        raise WizardError(422, "variants", f"pitfall variants are for a pitfalls job, not a {form.get('kind')} job")
    unknown = [v for v in variants if v not in fit.variants]
    if unknown:
        raise WizardError(
            422,
            "variants",
            f"{', '.join(unknown)} not a pitfall of {facts.task} (allowed: {', '.join(fit.variants)})",
        )
    claim = form.get("claim", "")
    if claim:
        claims = [on for on, _ in fit.claims]
        if claim not in claims:
            raise WizardError(
                422, "claim", f"{ref} makes no claim on {claim} (its claims are on: {', '.join(claims) or 'nothing'})"
            )
        declared = next((d.declared_as for d in choices["datasets"] if d.name == form.get("dataset")), None)
        if declared != claim:
            raise WizardError(
                422,
                "dataset",
                f"{form.get('dataset')} is {'declared as ' + declared if declared else 'not declared'}, not {claim}: "
                "its run would be 'not comparable' (an admin declares datasets on the datasets page)",
            )


def _int_field(form: dict[str, Any], name: str) -> int | None:
    value = str(form.get(name, "")).strip()
    if not value:
        return None
    if not value.isdigit() or int(value) < 1:
        raise WizardError(422, name, f"must be a whole number from 1, not '{value}'")
    return int(value)


def _duration(form: dict[str, Any]) -> float | None:
    value = str(form.get("min_duration_s", "")).strip()
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds <= 600:
        raise WizardError(422, "min_duration_s", f"must be a number of seconds above 0 and at most 600, not '{value}'")
    return seconds


def submit(request: Any, principal: Any, form: dict[str, Any], choices: dict[str, Any]) -> str:
    """Check the form against the chosen manifest (:func:`check_fit`), then submit it through the API's
    ``submit_job`` -> the job id; a WizardError names the field."""
    from pydantic import ValidationError

    from repliscope.service.errors import ApiError
    from repliscope.service.routers.jobs import JobSubmit, submit_job

    check_fit(choices, form)
    kind = str(form.get("kind", ""))
    options: dict[str, Any] = {k: v for k in WIZARD_INT_FIELDS if (v := _int_field(form, k)) is not None}
    if kind != "bench":
        options.pop("min_queries", None)
    if kind == "bench":
        if form.get("scenario"):
            options["scenario"] = form["scenario"]
        if (seconds := _duration(form)) is not None:
            options["min_duration_s"] = seconds
    if kind == "pitfalls" and form.get("variants"):
        options["variants"] = list(form["variants"])
    if str(form.get("agent", "")).strip():
        options["hardware"] = [f"agent_id={str(form['agent']).strip()}"]
    if kind == "diff":
        if not form.get("runtime_b"):
            raise WizardError(422, "runtime_b", "a diff needs a second runtime")
        options["runtime_b"] = form["runtime_b"]
    try:
        body = JobSubmit.model_validate(
            {
                "kind": kind,
                "manifest": form.get("manifest", ""),
                "runtime": form.get("runtime", ""),
                "dataset": form.get("dataset", ""),
                "options": options,
            }
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "form"
        raise WizardError(422, where.removeprefix("options."), first["msg"]) from None
    try:
        job = submit_job(request, body, principal)
    except ApiError as exc:
        raise WizardError(exc.status, str(exc.field or "form").removeprefix("body."), exc.message) from None
    return str(job["id"])
