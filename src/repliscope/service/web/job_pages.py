"""The job page and the jobs list, and what the wizard (:mod:`repliscope.service.web.wizard`) shares with them: the
live agents it offers and :class:`WizardError`. Submissions go through the API's own ``submit_job`` (the same
validation, the same jobs table, the same executor: ``app.state.executor``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from repliscope.service.executor import KINDS


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
class JobView:
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
    log: str
    created_at: str
    created_by: str
    result_base: str
    """The page prefix the job's results open under (:func:`result_page`)."""


def job_view(store: Any, job_id: str) -> JobView | None:
    """The job ``job_id`` from the jobs table, or None when there is none."""
    from repliscope.store.service_tables import NotFoundError, get_job

    try:
        job = get_job(store, job_id)
    except NotFoundError:
        return None
    return _view(job)


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

    return [
        _view(j)
        for j in list_jobs(
            store,
            status=filters.status or None,
            limit=JOBS_PAGE_LIMIT,
            kind=filters.kind or None,
            created_by=filters.user or None,
        )
    ]


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
        log=redact(job.log),
        created_at=f"{job.created_at:%Y-%m-%d %H:%M:%S} UTC",
        created_by=job.created_by,
        result_base=result_page(job.kind),
    )
