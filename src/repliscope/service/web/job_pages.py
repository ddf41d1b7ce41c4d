"""The job page and the jobs list (their views; ``/jobs/{id}/log.txt``, a job's whole log as text, is routed here),
and what the wizard (:mod:`repliscope.service.web.wizard`) shares with them: the live agents it offers and
:class:`WizardError`. Submissions go through the API's own ``submit_job`` (the same validation, the same jobs
table, the same executor: ``app.state.executor``)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from repliscope.service import job_log
from repliscope.service.executor import KINDS
from repliscope.service.job_log import CancelNote, LogLine
from repliscope.service.web import page_kit as kit
from repliscope.service.web.page_kit import SignedIn


class WizardError(Exception):
    """A refused submission: ``field`` names the wizard field, ``status`` the HTTP status of the page."""

    def __init__(self, status: int, field: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.field = field
        self.message = message


@dataclass(frozen=True)
class AgentChoice:
    """A live agent the wizard offers (the job is then placed on it only: hardware ``agent_id=ID``)."""

    agent_id: str
    label: str


def agent_choices(agents: list[Any]) -> list[AgentChoice]:
    """The live ones of ``agents`` (``AgentInfo``) as wizard choices: id, host, CPU, cores, stack."""
    from repliscope.service.web.agents import stack_label

    return [
        AgentChoice(
            a.capabilities.agent_id,
            f"{a.capabilities.agent_id} — {a.capabilities.hostname}, {a.capabilities.cpu_model}, "
            f"{a.capabilities.cores} cores, stack {stack_label(a.capabilities.stack)}",
        )
        for a in agents
        if a.alive
    ]


RESULT_PAGES: dict[str, str] = {
    "evaluate": "/runs/",
    "pitfalls": "/runs/",
    "bench": "/benchmarks/",
    "diff": "/diffs/",
}
"""Where a job kind's results open, by the kind's name in the job-kind registry (:mod:`repliscope.job_kinds`):
an evaluation's runs and a pitfall sweep's runs and sweep at ``/runs/{id}`` (a sweep id opens its reference run),
a benchmark at ``/benchmarks/{id}``, a diff at ``/diffs/{id}``. ``tests/service/test_result_links.py`` checks that
every registered kind has its page."""


def result_page(kind: str) -> str:
    """The page prefix the results of a job of ``kind`` open under (:data:`RESULT_PAGES`)."""
    from repliscope.job_kinds import kind_names

    try:
        return RESULT_PAGES[kind]
    except KeyError:
        raise ValueError(
            f"job kind {kind!r} has no result page (kinds with one: {', '.join(RESULT_PAGES)}; "
            f"registered kinds: {', '.join(kind_names())})"
        ) from None


@dataclass(frozen=True)
class ResultLink:
    """One result of a job as its pages show it: ``id``; ``name``: the run's display name (``runs rename``), None
    without one; ``deleted``: when the run was deleted (``2026-11-29 12:00 UTC``, from the audit): shown without a
    link, as its page is gone; None for a stored result (or one that is not a run: a sweep, a benchmark, a diff)."""

    id: str
    name: str | None = None
    deleted: str | None = None


@dataclass(frozen=True)
class JobView:
    """A job as the jobs list and the job page show it (the page's details: :func:`job_view`)."""

    id: str
    kind: str
    manifest: str
    runtime: str | None
    dataset: str | None
    status: str
    done: int
    total: int | None
    results: list[str]
    error: str | None
    created_at: str
    created_by: str
    result_base: str
    """The page prefix the job's results open under (:func:`result_page`)."""
    final: bool = False
    lines: list[LogLine] = field(default_factory=list)
    """The last :data:`LOG_LINES_SHOWN` lines of its log (time, level, source, message; inert)."""
    lines_total: int = 0
    options: list[tuple[str, str]] = field(default_factory=list)
    """Its options as (name, value) text, sorted by name."""
    started_at: str | None = None
    finished_at: str | None = None
    rate: str | None = None
    """Samples a second over its running time (``12.5 samples/s``), None before the first sample."""
    eta: str | None = None
    """While running with a known total: the time left at that rate (``about 2 min 10 s``)."""
    cancel: CancelNote | None = None
    """Who asked to cancel it and when (from its log)."""
    links: list[ResultLink] = field(default_factory=list)
    """Its results with the runs' display names, a deleted run marked (:func:`result_links`)."""


MAX_JOB_ID = 100
"""A longer job id is no job's (404 before the store is asked)."""
LOG_LINES_SHOWN = 500
"""The job page shows this many of the newest log lines (``/jobs/{id}/log.txt`` has them all, up to
:data:`MAX_LOG_BYTES_SERVED`)."""
MAX_LOG_BYTES_SERVED = 8 << 20
"""``/jobs/{id}/log.txt`` serves at most this many bytes: the newest lines, the first saying how many earlier ones
were left out."""


def job_view(store: Any, job_id: str) -> JobView | None:
    """The job ``job_id`` from the jobs table with what its page shows (log lines, options, rate, ETA, who
    cancelled it), or None when there is none."""
    from repliscope.store.service_tables import NotFoundError, get_job

    try:
        job = get_job(store, job_id)
    except NotFoundError:
        return None
    return _details(job, _with_links(store, [_view(job)])[0])


def result_links(store: Any, views: list[JobView]) -> dict[str, ResultLink]:
    """What the pages show of the results of ``views`` that open at ``/runs/`` (an evaluation's or a sweep's runs),
    by id: the display name of each stored run, and each run deleted since (the audit's delete entry: its page
    is gone, so no link to it). A sweep's id is not a run's and keeps its link (it opens the reference run).
    Three queries, however many jobs and results."""
    ids = list(dict.fromkeys(r for v in views if v.result_base == "/runs/" for r in v.results))
    if not ids:
        return {}
    links = {rid: ResultLink(rid, name=label.display_name) for rid, label in store.annotations.labels(ids).items()}
    for rid, at in store.annotations.deleted(ids).items():
        links[rid] = ResultLink(rid, deleted=f"{_naive(at):%Y-%m-%d %H:%M} UTC")
    return links


def _with_links(store: Any, views: list[JobView]) -> list[JobView]:
    """``views`` with their :attr:`JobView.links` (:func:`result_links`)."""
    import dataclasses

    known = result_links(store, views)
    return [dataclasses.replace(v, links=[known.get(r, ResultLink(r)) for r in v.results]) for v in views]


def job_log_text(store: Any, job_id: str, max_bytes: int = MAX_LOG_BYTES_SERVED) -> str | None:
    """The log of job ``job_id`` as text, one ``TIME LEVEL [SOURCE] MESSAGE`` a line (database URLs read "the run
    store"): its newest lines within ``max_bytes`` (:func:`~repliscope.service.job_log.as_text_tail`), or None
    when there is no such job."""
    from repliscope.service.errors import redact
    from repliscope.store.service_tables import NotFoundError, get_job

    try:
        job = get_job(store, job_id)
    except NotFoundError:
        return None
    return str(redact(job_log.as_text_tail(job.log, max_bytes)))


def _stamp(value: datetime | None) -> str | None:
    return None if value is None else f"{value:%Y-%m-%d %H:%M:%S} UTC"


def _duration(seconds: float) -> str:
    """``45 s``, ``2 min 10 s``, ``1 h 3 min``."""
    whole = max(0, round(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes} min"
    if minutes:
        return f"{minutes} min {secs} s"
    return f"{secs} s"


def _option_text(value: Any) -> str:
    if isinstance(value, list | tuple):
        return ", ".join(_option_text(v) for v in value) or "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if value is None:
        return "—"
    return str(value)


def _details(job: Any, view: JobView) -> JobView:
    """``view`` with the job page's details: the last log lines, options, times, rate, ETA and cancel note."""
    import dataclasses

    from repliscope.service.errors import redact

    lines, total = job_log.parse_tail(job.log, LOG_LINES_SHOWN)
    shown = [dataclasses.replace(line, message=redact(line.message)) for line in lines]
    rate = eta = None
    if job.started_at is not None and job.progress_done > 0:
        end = job.finished_at or datetime.now(UTC).replace(tzinfo=None)
        seconds = max((_naive(end) - _naive(job.started_at)).total_seconds(), 1e-3)
        per_second = job.progress_done / seconds
        rate = f"{per_second:.3g} samples/s"
        if job.status == "running" and job.progress_total:
            eta = f"about {_duration((job.progress_total - job.progress_done) / per_second)}"
    return dataclasses.replace(
        view,
        final=job.status in FINAL_STATUSES,
        lines=shown,
        lines_total=total,
        options=[(key, _option_text(value)) for key, value in sorted(job.options.items())],
        started_at=_stamp(job.started_at),
        finished_at=_stamp(job.finished_at),
        rate=rate,
        eta=eta,
        cancel=job_log.cancel_note(job.log),
    )


def _naive(value: datetime) -> datetime:
    """``value`` as a naive UTC datetime (the store's are naive UTC; an aware one is converted)."""
    return value.astimezone(UTC).replace(tzinfo=None) if value.tzinfo is not None else value


FINAL_STATUSES = ("succeeded", "failed", "cancelled")
JOBS_PAGE_LIMIT = 200
"""The jobs page lists this many of the newest matching jobs."""


@dataclass(frozen=True)
class JobsFilter:
    """The jobs page's filters (empty string: any)."""

    status: str = ""
    kind: str = ""
    user: str = ""

    def problem(self) -> str | None:
        """Why a filter value is not allowed (None: all are)."""
        from repliscope.store.service_tables import JOB_STATUSES

        if self.status and self.status not in JOB_STATUSES:
            return f"status {self.status!r} is not a job status (allowed: {', '.join(JOB_STATUSES)})"
        if self.kind and self.kind not in KINDS:
            return f"kind {self.kind!r} is not a job kind (allowed: {', '.join(KINDS)})"
        if len(self.user) > 200:
            return "user: a token name has at most 200 characters"
        return None


def job_list(store: Any, filters: JobsFilter) -> list[JobView]:
    """The newest :data:`JOBS_PAGE_LIMIT` jobs matching ``filters`` (all exact)."""
    from repliscope.store.service_tables import list_jobs

    views = [
        _view(j)
        for j in list_jobs(
            store,
            status=filters.status or None,
            limit=JOBS_PAGE_LIMIT,
            kind=filters.kind or None,
            created_by=filters.user or None,
        )
    ]
    return _with_links(store, views)


def job_users(store: Any) -> list[str]:
    """The token names that submitted a job (the user filter's choices)."""
    from repliscope.store.jobs import job_submitters

    return job_submitters(store)


def _view(job: Any) -> JobView:
    from repliscope.service.errors import redact

    return JobView(
        id=job.id,
        kind=job.kind,
        manifest=job.manifest,
        runtime=job.runtime,
        dataset=job.dataset,
        status=job.status,
        done=job.progress_done,
        total=job.progress_total,
        results=list(job.result_ids),
        error=redact(job.error) if job.error else None,
        created_at=f"{job.created_at:%Y-%m-%d %H:%M:%S} UTC",
        created_by=job.created_by,
        result_base=result_page(job.kind),
    )


# --- routes (included by :func:`repliscope.service.app.create_app` beside the web router) ---------------------

router = APIRouter(include_in_schema=False)
LOG_CSP = "sandbox; default-src 'none'; frame-ancestors 'none'"
"""``/jobs/{id}/log.txt`` is text an agent wrote: were a browser ever to render it, it runs and loads nothing."""
_FILENAME_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


@router.get("/jobs/{job_id}/log.txt")
def job_log_download(request: Request, job_id: str, principal: SignedIn) -> Response:
    """The job's whole log as a text file (role viewer): ``TIME LEVEL [SOURCE] MESSAGE`` a line, terminal escapes
    removed, database URLs as "the run store", below the role admin no absolute server path; 404 for an unknown
    job."""
    from repliscope.service.web.page_kit import for_viewer

    store, budget = kit.store_of(request), MAX_LOG_BYTES_SERVED * 7 // 8  # room for what redaction adds
    text = job_log_text(store, job_id, budget) if len(job_id) <= MAX_JOB_ID else None
    if text is None:
        return kit.error_page(principal, 404, f"unknown job id '{job_id[:MAX_JOB_ID]}'")
    body = str(for_viewer(request, principal, text)).encode()
    while len(body) > MAX_LOG_BYTES_SERVED:  # paths rewritten longer than they were: fewer lines
        budget //= 2
        body = str(for_viewer(request, principal, job_log_text(store, job_id, budget) or "")).encode()
    name = _FILENAME_UNSAFE.sub("_", job_id[:32])
    return Response(
        body,
        media_type="text/plain; charset=utf-8",
        headers={
            "Content-Disposition": f'attachment; filename="job-{name}.log.txt"',
            "Content-Security-Policy": LOG_CSP,
        },
    )
