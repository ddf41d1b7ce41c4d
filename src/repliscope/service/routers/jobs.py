"""``/api/v1/jobs``: submit ``evaluate | pitfalls | bench | diff`` (a stored manifest, a runtime, a registered
dataset, options), status with progress, cancel, log. Jobs run in the app's executor."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import PlainTextResponse
from pydantic import BaseModel, ConfigDict, Field

from repliscope.service.auth import require
from repliscope.service.errors import ERROR_RESPONSES, ApiError
from repliscope.service.redaction import hide_paths_in, request_roots
from repliscope.service.routers.common import UtcDatetime, executor_of, store_errors, store_of

if TYPE_CHECKING:
    from repliscope.service.executor import JobExecutor

router = APIRouter(prefix="/jobs", tags=["jobs"], responses=ERROR_RESPONSES)

Kind = Literal["evaluate", "pitfalls", "bench", "diff"]
Status = Literal["queued", "running", "succeeded", "failed", "cancelled"]


class JobOptions(BaseModel):
    """Options of a job (all optional; what is not given is chosen as the CLI chooses it and recorded)."""

    model_config = ConfigDict(extra="forbid")

    limit: Annotated[int, Field(ge=1, le=1_000_000)] | None = None
    """Only the first N samples of the dataset (sorted order)."""
    threads: Annotated[int, Field(ge=1, le=256)] | None = None
    batch_size: Annotated[int, Field(ge=1, le=4096)] | None = None
    download: bool = False
    """Allow downloading the manifest's https:// sources (sha256-checked) into the server's cache."""
    variants: list[Annotated[str, Field(max_length=100)]] | None = Field(default=None, max_length=100)
    """pitfalls: only these pitfalls (default: every registered one), each NAME or NAME[PARAMETER=VALUE, ...] at a
    degree, as the pipeline diff names it (``center_crop_offset[offset=[1, 0]]``)."""
    visual: Annotated[int, Field(ge=0, le=20)] = 3
    """pitfalls: images in the visual-testing panel."""
    scenario: Literal["single-stream", "multi-stream", "offline"] = "single-stream"
    """bench: the LoadGen scenario (server needs a target rate: use the CLI)."""
    min_duration_s: Annotated[float, Field(ge=0, le=600)] = 1.0
    min_queries: Annotated[int, Field(ge=1, le=100_000)] = 20
    runtime_b: str | None = None
    """diff: the second runtime (``runtime`` is the first)."""
    requires: list[Annotated[str, Field(min_length=1, max_length=200)]] | None = Field(default=None, max_length=20)
    """Placement: PEP 508 requirements the executing agent's installed distributions must meet
    (e.g. ``onnxruntime>=1.20``)."""
    hardware: list[Annotated[str, Field(min_length=1, max_length=200)]] | None = Field(default=None, max_length=20)
    """Placement: hardware selectors ``KEY=VALUE``, ``KEY>=N``, ``KEY<=N``, ``KEY~=SUBSTRING`` (keys: cpu_model,
    cpu_flags, cores, memory_gib, hostname, agent_id, gpus)."""
    stack: Annotated[str, Field(min_length=1, max_length=500)] | None = None
    """Placement: only an agent running in this provisioned stack (its key, ``repliscope stack list``)."""
    idempotency_key: Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_.:@/+-]+$")] | None = None
    """Store the job's results at most once under this key: a resubmission with the same key stores nothing new
    (default: the job id)."""
    shards: Annotated[int, Field(ge=1, le=256)] | None = None
    """evaluate: run as N shard jobs at once on the agents and store ONE record merged from them."""
    allow_mixed_stacks: bool = False
    """With ``shards``: merge shards whose stacks differ (refused by default, naming the differing fields)."""

    def run_options(self) -> Any:
        """These options as the job layer takes them (:class:`repliscope.job_execution.RunOptions`)."""
        from repliscope.job_execution import RunOptions

        return RunOptions.model_validate(self.model_dump())


class JobSubmit(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Kind
    manifest: Annotated[str, Field(min_length=3, max_length=300, description="name@version of a stored manifest")]
    runtime: Annotated[str, Field(min_length=1, max_length=100)]
    dataset: Annotated[str, Field(min_length=1, max_length=200, description="a registered dataset name")]
    options: JobOptions = Field(default_factory=JobOptions)


class JobOut(BaseModel):
    id: str
    kind: str
    manifest: str
    runtime: str | None
    dataset: str | None
    options: dict[str, Any]
    status: Status
    progress_done: int
    progress_total: int | None
    result_ids: list[str]
    error: str | None
    created_at: UtcDatetime
    started_at: UtcDatetime | None
    finished_at: UtcDatetime | None
    created_by: str


def _out(job: Any, roots: Any = None) -> dict[str, Any]:
    """A job as the API serves it: no log, its error without database URLs and, with ``roots`` (a caller below
    admin: :func:`repliscope.service.redaction.request_roots`), without absolute server paths."""
    from repliscope.service.errors import redact
    from repliscope.service.redaction import hide_paths_in

    out: dict[str, Any] = job.model_dump(exclude={"log"})
    if out.get("error"):
        out["error"] = redact(out["error"])
    if roots is not None:
        for key in ("error", "dataset", "options"):
            out[key] = hide_paths_in(out[key], roots)
    return out


def _check_runtime(name: str, field: str) -> None:
    from repliscope.runtimes.base import RUNTIMES

    if name not in RUNTIMES:
        raise ApiError(
            422,
            f"unknown runtime '{name}' (allowed: {', '.join(sorted(RUNTIMES))})",
            field=field,
            code="unknown_reference",
        )


@router.post("", status_code=202, response_model=JobOut)
def submit_job(request: Request, body: JobSubmit, principal: Annotated[Any, Depends(require("runner"))]) -> Any:
    """Queue a job; 202 with its status (poll ``GET /api/v1/jobs/{id}``)."""
    from repliscope.job_execution import JobSpec
    from repliscope.store.service_tables import create_job, get_dataset, get_manifest, new_job_id

    store = store_of(request)
    _check_runtime(body.runtime, "body.runtime")
    options = body.options.model_dump(exclude_none=True, exclude_defaults=True)
    if body.kind == "diff":
        if body.options.runtime_b is None:
            raise ApiError(422, "a diff needs options.runtime_b (the second runtime)", field="body.options.runtime_b")
        _check_runtime(body.options.runtime_b, "body.options.runtime_b")
    elif body.options.runtime_b is not None:
        raise ApiError(422, f"options.runtime_b is for a diff, not a {body.kind} job", field="body.options.runtime_b")
    if body.options.variants:
        if body.kind != "pitfalls":
            raise ApiError(
                422, f"options.variants is for a pitfalls job, not a {body.kind} job", field="body.options.variants"
            )
        from repliscope.pitfalls.degrees import VariantSpecError, parse_variants

        try:  # NAME or NAME[PARAMETER=VALUE, ...]; each value on the manifest's pipeline below (_check_kind)
            parse_variants(body.options.variants)
        except VariantSpecError as exc:
            raise ApiError(422, str(exc), field="body.options.variants", code="unknown_reference") from None
    with store_errors(body_refs=True):
        manifest = get_manifest(store, body.manifest)
        dataset = get_dataset(store, body.dataset)
    loaded = _check_code(request, manifest)
    _check_fit(body, manifest, dataset)
    executor = executor_of(request)
    # the registry's name and declaration go to the core as the CLI's --as does (RunOptions.evaluated_as)
    registered = {"registered_name": dataset.name, "evaluated_as": dataset.declared_as}
    options = {**options, **{k: v for k, v in registered.items() if v is not None}}
    spec = JobSpec(
        new_job_id(),
        body.kind,
        manifest.ref,
        manifest.text,
        body.runtime,
        dataset.name,
        dataset.spec,
        body.options.run_options().model_copy(update=registered),
        idempotency_key=body.options.idempotency_key,
    )
    _check_kind(spec, loaded)
    _placeable(executor, spec)  # before the job row: a refused job leaves none
    with store_errors(body_refs=True):
        job = create_job(
            store,
            body.kind,
            manifest.ref,
            body.runtime,
            dataset.name,
            options,
            created_by=principal.name,
            job_id=spec.job_id,
        )
    executor.submit(spec)
    return _out(job)


def _check_code(request: Request, manifest: Any) -> Any:
    """The stored manifest's architecture code under this server's allowlist NOW (it may have been stored before
    the admin narrowed it): a 422 at ``body.manifest`` naming the manifest's field and the allowed packages
    (:func:`repliscope.service.routers.manifests.check_code`), before anything is queued. Returns the loaded
    manifest."""
    from repliscope.service.routers.manifests import check_code, load_text

    loaded = load_text(manifest.text)
    try:
        check_code(loaded, request.app.state.config.architecture_packages)
    except ApiError as exc:
        raise ApiError(
            422, f"{manifest.ref}: {exc.field}: {exc.message}", field="body.manifest", code="code_policy"
        ) from None
    return loaded


def _check_kind(spec: Any, loaded: Any) -> None:
    """The job kind's own check of its options on the manifest (:meth:`repliscope.job_kinds.JobKind.check_job`;
    a sweep: each variant at a degree of the manifest's pre-processing, the check the sweep makes when it starts):
    a 422 at ``body.options.<option>`` naming the entry and the allowed values, before anything is queued."""
    from repliscope.job_kinds import JOB_KINDS, JobOptionError

    try:
        JOB_KINDS.get(spec.kind).check_job(spec, loaded)
    except JobOptionError as exc:
        raise ApiError(422, str(exc), field=f"body.options.{exc.option}", code="invalid") from None


def _check_fit(body: JobSubmit, manifest: Any, dataset: Any) -> None:
    """A runtime that does not run the manifest's source format, a dataset whose samples do not carry what its
    task scores, or a pitfall variant not about its task: a 422 at that field (:mod:`repliscope.service.fit`),
    before anything is queued."""
    from repliscope.service.fit import MisfitError, check_job

    runtimes = [body.runtime] + ([body.options.runtime_b] if body.options.runtime_b else [])
    try:
        check_job(manifest.ref, manifest.text, dataset, runtimes, list(body.options.variants or []))
    except MisfitError as exc:
        where = f"body.options.{exc.field}" if exc.field in ("runtime_b", "variants") else f"body.{exc.field}"
        raise ApiError(422, exc.message, field=where, code="misfit") from None


def _placeable(executor: JobExecutor, spec: Any) -> None:
    """``executor.check(spec)``: a bad placement option (``requires``/``hardware`` entry) -> 422 naming it; no
    live agent qualifies (NoAgentMatches) -> 422 with every agent's reasons."""
    from repliscope.agents.placement import InvalidPlacementOption, NoAgentMatches

    try:
        executor.check(spec)
    except InvalidPlacementOption as exc:
        raise ApiError(422, str(exc), field=f"body.options.{exc.option}", code="invalid") from None
    except NoAgentMatches as exc:
        raise ApiError(
            422,
            str(exc),
            field="body.options",
            code="no_agent_matches",
            reasons={agent: list(r) for agent, r in exc.reasons.items()},
        ) from None
    except OSError as exc:  # the scheduler went away
        raise ApiError(503, f"the agents' scheduler is not reachable: {exc}", code="unavailable") from None


LIST_QUERY_PARAMS = frozenset({"status", "kind", "user", "limit"})


@router.get("", response_model=list[JobOut])
def list_jobs(
    request: Request,
    principal: Annotated[Any, Depends(require("viewer"))],
    status: Status | None = None,
    kind: Kind | None = None,
    user: Annotated[
        str | None, Query(min_length=1, max_length=200, description="the submitter's token name (exact)")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> Any:
    """Jobs, newest first, filtered by status, kind and submitter; errors without server paths below the role
    admin (as ``GET /jobs/{id}``)."""
    from repliscope.store.service_tables import list_jobs as list_stored

    unknown = sorted(set(request.query_params) - LIST_QUERY_PARAMS)
    if unknown:  # a misspelt filter must not silently return every job
        raise ApiError(
            422,
            f"unknown query parameter {unknown[0]!r} (allowed: {', '.join(sorted(LIST_QUERY_PARAMS))})",
            field=f"query.{unknown[0]}",
        )
    roots = request_roots(request, principal)
    with store_errors():
        jobs = list_stored(store_of(request), status=status, limit=limit, kind=kind, created_by=user)
    return [_out(j, roots) for j in jobs]


@router.get("/{job_id}", response_model=JobOut)
def get_job(request: Request, job_id: str, principal: Annotated[Any, Depends(require("viewer"))]) -> Any:
    """A job's status, progress (done/total samples) and result ids (its log is not read: a poll costs no more for
    a long log; ``GET /jobs/{id}/log`` has it). Below the role admin its error shows no
    absolute server path (job folder, cache, environment: relative to named roots or ``…/<last two parts>``)."""
    from repliscope.store.service_tables import get_job as get_stored

    with store_errors("job"):
        return _out(get_stored(store_of(request), job_id, log=False), request_roots(request, principal))


MAX_LOG_BYTES = 8 << 20
"""``GET /jobs/{id}/log`` serves at most this many bytes of messages (as the web's ``/jobs/{id}/log.txt``): the
newest lines, the first saying how many earlier ones were left out."""
LOG_QUERY_PARAMS = frozenset({"tail"})
LEFT_OUT_HEADER = "X-Log-Lines-Left-Out"


@router.get(
    "/{job_id}/log",
    responses={
        200: {
            "content": {"text/plain": {"schema": {"type": "string"}}},
            "headers": {
                LEFT_OUT_HEADER: {
                    "description": "how many earlier lines the text leaves out (0: the whole log)",
                    "schema": {"type": "integer", "minimum": 0},
                }
            },
        }
    },
)
def get_job_log(
    request: Request,
    job_id: str,
    principal: Annotated[Any, Depends(require("viewer"))],
    tail: Annotated[
        int | None, Query(ge=1, le=1_000_000, description="only the newest N lines (default: as many as fit)")
    ] = None,
) -> Any:
    """The job's log messages, one a line (plain text; database URLs read "the run store"; below the role admin,
    server paths as in ``GET /jobs/{id}``); each line's time, level and source are in the web's
    ``/jobs/{id}/log.txt``. Bounded: the newest lines within 8 MiB (``tail``: at most the newest N); when earlier
    lines are left out, the text starts with a line saying how many and the ``X-Log-Lines-Left-Out`` header holds
    the number."""
    from repliscope.service.errors import redact
    from repliscope.service.job_log import messages_tail
    from repliscope.store.service_tables import get_job as get_stored

    unknown = sorted(set(request.query_params) - LOG_QUERY_PARAMS)
    if unknown:  # a misspelt tail must not silently return the whole log
        raise ApiError(
            422,
            f"unknown query parameter {unknown[0]!r} (allowed: {', '.join(sorted(LOG_QUERY_PARAMS))})",
            field=f"query.{unknown[0]}",
        )
    with store_errors("job"):
        text, left_out = messages_tail(get_stored(store_of(request), job_id).log, MAX_LOG_BYTES, tail)
    log = redact(text)
    return PlainTextResponse(
        hide_paths_in(log, request_roots(request, principal)), headers={LEFT_OUT_HEADER: str(left_out)}
    )


@router.post("/{job_id}/cancel", response_model=JobOut)
def cancel_job(request: Request, job_id: str, principal: Annotated[Any, Depends(require("runner"))]) -> Any:
    """Cancel a queued or running job (a running one stops at its next progress step); 409 once finished. Any
    runner may cancel any job (not only their own); the log records who asked and when."""
    from repliscope.service.job_log import entries
    from repliscope.store.service_tables import get_job as get_stored
    from repliscope.store.service_tables import update_job

    store = store_of(request)
    with store_errors("job"):
        job = get_stored(store, job_id, log=False)
        if job.status in ("succeeded", "failed", "cancelled"):
            raise ApiError(409, f"job {job_id} already {job.status}", field="job_id", code="conflict")
        asked = f"cancel requested by {principal.name}"
        update_job(store, job_id, append_log=entries(asked, level="warning", event="cancel", by=principal.name))
        if not executor_of(request).cancel(job_id):  # not this process's job (e.g. left by a restart)
            update_job(store, job_id, status="cancelled", append_log=entries("cancelled (no executor was running it)"))
        return _out(get_stored(store, job_id, log=False), request_roots(request, principal))
