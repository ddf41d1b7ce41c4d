"""The run wizard (``/new``): what fits the chosen manifest (:mod:`repliscope.service.fit`), and its submission.

For each stored manifest the wizard knows, from the registries, which runtimes run its ``source.format``
(:data:`repliscope.runtimes.base.RUNTIME_SOURCE_FORMATS`), which registered datasets carry what its task scores
(``Task.truth`` against the dataset's recorded annotations), which pitfall variants are about its task
(:func:`repliscope.pitfalls.sweep.task_pitfalls`) and which datasets are declared to be a claim's dataset. The
page offers only what fits and says why the rest is not offered; a submission that picks a misfit is refused at
that field (:func:`check_fit`) before it goes through the API's own ``submit_job``.

A runner uploads a manifest from the page itself (:func:`upload_manifest`, ``POST /new/manifest``): a YAML file or
pasted text, bounded by the server's upload limit, validated and stored by the API's own
:func:`~repliscope.service.routers.manifests.store_upload` (the same loader, source and code policies, the same
messages, each naming the file, line and field); the wizard then opens with it chosen."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from repliscope.service.fit import DatasetFacts, Fit, fit_of, manifest_facts
from repliscope.service.web.job_pages import WizardError

__all__ = [
    "DatasetFacts",
    "Fit",
    "UploadRefusal",
    "UploadResult",
    "check_fit",
    "fit_of",
    "manifest_facts",
    "submit",
    "upload_manifest",
    "wizard_choices",
]

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


UPLOADED = ("created", "stored")
"""The wizard's ``uploaded`` parameter after an upload: a new manifest, or the same text already stored."""


@dataclass(frozen=True)
class UploadResult:
    """An upload that was stored: ``ref`` (name@version), ``created`` False when the same text was already there."""

    ref: str
    created: bool


@dataclass(frozen=True)
class UploadRefusal:
    """An upload that was refused: the form ``field`` (``file``, ``text`` or the manifest's field, e.g.
    ``architecture.package``) and the message, one problem a line (``file:line: field '...': ...``)."""

    field: str
    message: str

    @property
    def lines(self) -> list[str]:
        return [line.strip() for line in self.message.splitlines() if line.strip()]


FORM_OVERHEAD_BYTES = 4096
"""What the upload form's body carries besides the manifest (its CSRF token, the multipart boundaries and
headers): kept free under the server's request limit (``--max-upload-bytes``), so a manifest the page accepts
is never refused as a too-large request."""


def upload_limit(request: Any) -> int:
    """The largest manifest the upload form takes, in bytes: the server's request limit less
    :data:`FORM_OVERHEAD_BYTES`."""
    return max(1, int(request.app.state.config.max_upload_bytes) - FORM_OVERHEAD_BYTES)


PASTED_FILENAME = "pasted.yaml"
"""The file name a pasted manifest's messages name."""
UPLOAD_FIELDS = ("file", "text")
"""The upload form's fields: a YAML file, or the manifest pasted as text (one of them)."""


async def upload_manifest(request: Any, principal: Any, form: Any) -> tuple[str, bool, list[str]]:
    """Store the manifest of the wizard's upload form (``form``: its parsed multipart fields ``file`` or ``text``,
    CSRF and role already checked by the route) through the API's
    :func:`~repliscope.service.routers.manifests.store_upload` -> (``name@version``, created, warnings); a
    WizardError naming the field (``file``, ``text``, or the manifest's own field) otherwise."""
    from repliscope.service.errors import ApiError
    from repliscope.service.routers.manifests import store_upload

    limit = upload_limit(request)
    upload = form.get("file")
    pasted = str(form.get("text") or "")
    if upload is not None and not isinstance(upload, str) and upload.filename:
        if pasted.strip():
            raise WizardError(422, "file", "choose a file or paste the manifest, not both")
        field, filename = "file", str(upload.filename)
        data = await upload.read(limit + 1)
    elif pasted.strip():
        field, filename, data = "text", PASTED_FILENAME, pasted.encode("utf-8")
    else:
        raise WizardError(422, "file", "choose a manifest file (.yaml) or paste its text")
    if len(data) > limit:
        raise WizardError(413, field, f"the manifest is larger than this page's limit of {limit:,} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise WizardError(422, field, f"{filename} is not UTF-8 text") from None
    try:
        stored = await store_upload(request, principal, text, filename)
    except ApiError as exc:
        where = str(exc.field or field)
        raise WizardError(exc.status, field if where in ("body", "body.file") else where, exc.message) from None
    return stored.ref, stored.created, list(stored.warnings)
