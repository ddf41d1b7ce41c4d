"""The jobs table: a background job's status, progress, log and result ids. :class:`JobStore` is the store; the
module functions take a :class:`~repliscope.store.repository.RunStore` (anything holding a ``db``)."""

from __future__ import annotations

import builtins
import re
import uuid
from datetime import datetime
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict
from sqlalchemy import select

from repliscope.job_kinds import kind_names
from repliscope.store.database import Database, HasDatabase, now
from repliscope.store.errors import InvalidInputError, NotFoundError
from repliscope.store.manifests import parse_ref
from repliscope.store.models import JobRow

JobKind = str
"""A job kind: a name of the job-kind registry (:data:`repliscope.job_kinds.JOB_KINDS`)."""
JobStatus = Literal["queued", "running", "succeeded", "failed", "cancelled"]
JOB_KINDS: tuple[str, ...] = kind_names()
JOB_STATUSES: tuple[str, ...] = get_args(JobStatus)
FINISHED: tuple[str, ...] = ("succeeded", "failed", "cancelled")
MAX_STORED_LOG_BYTES = 8 << 20
"""A job's stored log is at most this many bytes (UTF-8): an append past it drops the oldest lines (an agent that
logs forever cannot grow its row without bound). As much as the API and ``/jobs/{id}/log.txt`` serve."""
KEPT_AFTER_DROP_BYTES = 6 << 20
"""What a log past :data:`MAX_STORED_LOG_BYTES` is cut to (its newest lines), so the next appends write no cut."""
_DROPPED = re.compile(r"warning: ([0-9]+) earlier log lines dropped: ")


class Job(BaseModel):
    """A background job and its progress (``progress_total`` None until known; ``log`` "" in a listing,
    :meth:`JobStore.list`)."""

    model_config = ConfigDict(frozen=True, from_attributes=True)

    id: str
    kind: str
    manifest: str
    runtime: str | None
    dataset: str | None
    options: dict[str, Any]
    status: str
    progress_done: int
    progress_total: int | None
    log: str
    result_ids: list[str]
    error: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    created_by: str


def new_job_id() -> str:
    """A new job id (32 hex digits)."""
    return uuid.uuid4().hex


def _check_status(status: str | None) -> None:
    if status is not None and status not in JOB_STATUSES:
        raise InvalidInputError(f"status {status!r} is not a job status (allowed: {', '.join(JOB_STATUSES)})", "status")


_WITHOUT_LOG = [c for c in JobRow.__table__.columns if c.name != "log"]
"""Every column of the jobs table but the log (a listing, a status poll)."""


def capped_log(log: str) -> str:
    """``log`` (lines each ending in a newline) when it is within :data:`MAX_STORED_LOG_BYTES`, else its newest
    lines within :data:`KEPT_AFTER_DROP_BYTES` after a first line ``warning: N earlier log lines dropped: ...``
    (N counts the lines dropped by earlier cuts too; the line is plain text, as a log read before lines were JSON,
    so it reads as a warning without a time)."""
    if len(log) <= MAX_STORED_LOG_BYTES // 4 or len(log.encode()) <= MAX_STORED_LOG_BYTES:
        return log
    lines = log.splitlines(keepends=True)
    dropped_before = 0
    if lines and (marker := _DROPPED.match(lines[0])):
        dropped_before = int(marker.group(1))
        lines = lines[1:]
    budget = KEPT_AFTER_DROP_BYTES - 200  # the marker line
    size = 0
    start = len(lines)
    while start > 0 and size + len(lines[start - 1].encode()) <= budget:
        start -= 1
        size += len(lines[start].encode())
    dropped = dropped_before + start
    limit = (
        f"{MAX_STORED_LOG_BYTES >> 20} MiB"
        if MAX_STORED_LOG_BYTES % (1 << 20) == 0
        else f"{MAX_STORED_LOG_BYTES >> 10} KiB"
    )
    marker_line = (
        f"warning: {dropped} earlier log lines dropped: the stored log keeps its newest lines within {limit}\n"
    )
    return marker_line + "".join(lines[start:])


class JobStore:
    """The jobs of ``db``."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def create(
        self,
        kind: str,
        manifest: str,
        runtime: str | None,
        dataset: str | None,
        options: dict[str, Any],
        created_by: str = "",
        job_id: str | None = None,
    ) -> Job:
        """A queued job (``manifest`` is ``name@version``); ``job_id``: its id (default: a new one)."""
        if kind not in JOB_KINDS:
            raise InvalidInputError(f"kind {kind!r} is not a job kind (allowed: {', '.join(JOB_KINDS)})", "kind")
        parse_ref(manifest)
        row = JobRow(
            id=job_id or new_job_id(),
            kind=kind,
            manifest=manifest,
            runtime=runtime,
            dataset=dataset,
            options=dict(options),
            status="queued",
            progress_done=0,
            progress_total=None,
            log="",
            result_ids=[],
            error=None,
            created_at=now(),
            started_at=None,
            finished_at=None,
            created_by=created_by,
        )
        with self.db.session(write=True, failing=f"job {row.id} could not be created in") as session:
            session.add(row)
        return Job.model_validate(row)

    def update(
        self,
        job_id: str,
        *,
        status: str | None = None,
        progress_done: int | None = None,
        progress_total: int | None = None,
        append_log: str | None = None,
        result_ids: list[str] | None = None,
        error: str | None = None,
    ) -> Job:
        """Change a job: ``status`` running sets ``started_at``, a finished status sets ``finished_at``;
        ``append_log`` adds its lines to the log, the oldest dropped past :data:`MAX_STORED_LOG_BYTES`
        (:func:`capped_log`). A write that fails (a full disk, a read-only database, a lost
        server) is a DatabaseError naming the job, the database and the reason; nothing of the change is
        written."""
        _check_status(status)
        with self.db.session(write=True, failing=f"job {job_id} could not be updated in") as session:
            row = session.get(JobRow, job_id, with_for_update=True)
            if row is None:
                raise NotFoundError(f"job {job_id!r} does not exist", "job")
            if status is not None:
                row.status = status
                if status == "running" and row.started_at is None:
                    row.started_at = now()
                if status in FINISHED:
                    row.finished_at = now()
            if progress_done is not None:
                row.progress_done = progress_done
            if progress_total is not None:
                row.progress_total = progress_total
            if append_log is not None:
                row.log = capped_log(row.log + append_log.rstrip("\n") + "\n")
            if result_ids is not None:
                row.result_ids = list(result_ids)
            if error is not None:
                row.error = error
        return Job.model_validate(row)

    def get(self, job_id: str, *, log: bool = True) -> Job:
        """The job ``job_id``; ``log=False``: without reading its log (``log`` is ""), as a status poll needs."""
        with self.db.session() as session:
            if not log:
                found = session.execute(select(*_WITHOUT_LOG).where(JobRow.id == job_id)).first()
                if found is None:
                    raise NotFoundError(f"job {job_id!r} does not exist", "job")
                return Job.model_validate({**found._mapping, "log": ""})
            row = session.get(JobRow, job_id)
            if row is None:
                raise NotFoundError(f"job {job_id!r} does not exist", "job")
            return Job.model_validate(row)

    def list(
        self,
        status: str | None = None,
        limit: int = 100,
        *,
        kind: str | None = None,
        created_by: str | None = None,
    ) -> list[Job]:
        """Jobs, newest first; optionally of one status, one kind, one submitter (token name), all exact. Their
        logs are not read (each ``log`` is ""; :meth:`get` has it): a listing of many long-running jobs must not
        read up to :data:`MAX_STORED_LOG_BYTES` a job."""
        _check_status(status)
        query = select(*_WITHOUT_LOG).order_by(JobRow.created_at.desc(), JobRow.id).limit(limit)
        for value, column in ((status, JobRow.status), (kind, JobRow.kind), (created_by, JobRow.created_by)):
            if value is not None:
                query = query.where(column == value)
        with self.db.session() as session:
            return [Job.model_validate({**r._mapping, "log": ""}) for r in session.execute(query).all()]

    def submitters(self) -> builtins.list[str]:
        """The token names that submitted a job, sorted (the jobs page's user filter)."""
        with self.db.session() as session:
            return sorted(session.scalars(select(JobRow.created_by).distinct()).all())


# ---- the function API ---------------------------------------------------------------------------------------


def create_job(
    store: HasDatabase,
    kind: str,
    manifest: str,
    runtime: str | None,
    dataset: str | None,
    options: dict[str, Any],
    created_by: str = "",
    job_id: str | None = None,
) -> Job:
    """:meth:`JobStore.create`."""
    return JobStore(store.db).create(kind, manifest, runtime, dataset, options, created_by, job_id)


def update_job(
    store: HasDatabase,
    job_id: str,
    *,
    status: str | None = None,
    progress_done: int | None = None,
    progress_total: int | None = None,
    append_log: str | None = None,
    result_ids: list[str] | None = None,
    error: str | None = None,
) -> Job:
    """:meth:`JobStore.update`."""
    return JobStore(store.db).update(
        job_id,
        status=status,
        progress_done=progress_done,
        progress_total=progress_total,
        append_log=append_log,
        result_ids=result_ids,
        error=error,
    )


def get_job(store: HasDatabase, job_id: str, *, log: bool = True) -> Job:
    """:meth:`JobStore.get`."""
    return JobStore(store.db).get(job_id, log=log)


def list_jobs(
    store: HasDatabase,
    status: str | None = None,
    limit: int = 100,
    *,
    kind: str | None = None,
    created_by: str | None = None,
) -> list[Job]:
    """:meth:`JobStore.list`."""
    return JobStore(store.db).list(status, limit, kind=kind, created_by=created_by)


def job_submitters(store: HasDatabase) -> list[str]:
    """:meth:`JobStore.submitters`."""
    return JobStore(store.db).submitters()
