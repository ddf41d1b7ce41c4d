"""The job results store: a job's records, sweeps, benchmarks and diff stored exactly once per idempotency key
(``job_results`` table: the key and the ids it stored).

Its sessions are :meth:`~repliscope.store.database.Database.raw_session`: a failing database reaches the caller
as SQLAlchemy's own exception, because the service's executor (``service/executor.py``) tells a failed write
(it keeps the records as files) from a concurrent duplicate (``IntegrityError``) by those types.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError

from repliscope.bench.record import BenchmarkRecord
from repliscope.errors import StoreError
from repliscope.evaluation.record import EvaluationRecord
from repliscope.pitfalls.result import SweepResult
from repliscope.store.benchmarks import benchmark_row
from repliscope.store.database import Database, now
from repliscope.store.diffs import diff_row
from repliscope.store.models import DiffRow, JobResultRow
from repliscope.store.runs import add_record
from repliscope.store.sweeps import sweep_row


class JobResults(Protocol):
    """What :meth:`JobResultStore.save_outcome` stores: JSON dumps of records, sweeps and benchmark records
    (``repliscope.job_execution.JobOutcome``)."""

    records: list[dict[str, Any]]
    sweeps: list[dict[str, Any]]
    benchmarks: list[dict[str, Any]]


class StoredOutcome(BaseModel):
    """The ids a job's results are stored under; ``duplicate``: stored earlier under the same key (nothing new)."""

    model_config = ConfigDict(frozen=True)

    run_ids: list[str]
    sweep_ids: list[str]
    benchmark_ids: list[str]
    duplicate: bool
    diff_ids: list[str] = []
    """A diff job's stored diff (``repliscope.store.diffs``)."""

    @property
    def all_ids(self) -> list[str]:
        return [*self.run_ids, *self.sweep_ids, *self.benchmark_ids, *self.diff_ids]


def _diff_rows(outcome: JobResults, kind: str) -> list[DiffRow]:
    """A diff job's result (``outcome.summary``, the diff's JSON) as a ``diffs`` row to store with the job."""
    summary = getattr(outcome, "summary", None)
    if kind != "diff" or not summary:
        return []
    return [diff_row(json.loads(summary))]


class JobResultStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    def save_outcome(self, outcome: JobResults, idempotency_key: str, kind: str = "evaluate") -> StoredOutcome:
        """Store a job's results exactly once per ``idempotency_key``: every record, sweep and benchmark of
        ``outcome`` (JSON dumps, as they travel back from an agent) and the key, in one transaction. A key already
        stored stores nothing and returns the earlier ids with ``duplicate=True`` (also when another process
        stores the same key at the same moment: the key is the primary key)."""
        earlier = self.get(idempotency_key)
        if earlier is not None:
            return earlier
        records = [EvaluationRecord.model_validate(r) for r in outcome.records]
        sweeps = [SweepResult.model_validate(r) for r in outcome.sweeps]
        benchmarks = [BenchmarkRecord.model_validate(r) for r in outcome.benchmarks]
        ids = {
            "run_ids": [r.run_id for r in records],
            "sweep_ids": [s.sweep_id for s in sweeps],
            "benchmark_ids": [b.benchmark_id for b in benchmarks],
        }
        diffs = _diff_rows(outcome, kind)
        if diffs:
            ids["diff_ids"] = [d.diff_id for d in diffs]
        try:
            with self.db.raw_session(write=True) as session:
                session.add(JobResultRow(idempotency_key=idempotency_key, kind=kind, result_ids=ids, created_at=now()))
                session.flush()  # the key first: a concurrent duplicate fails here, before any record
                for record in records:
                    add_record(session, record)
                for sweep in sweeps:
                    session.add(sweep_row(sweep))
                for bench in benchmarks:
                    session.add(benchmark_row(bench))
                session.add_all(diffs)
        except IntegrityError as exc:
            again = self.get(idempotency_key)
            if again is not None:
                return again
            raise StoreError(f"the results of job {idempotency_key} could not be stored: {exc.orig}") from exc
        return StoredOutcome(duplicate=False, **ids)

    def get(self, idempotency_key: str) -> StoredOutcome | None:
        """The ids stored under ``idempotency_key`` (``duplicate=True``), None when the key is not stored."""
        with self.db.raw_session() as session:
            row = session.get(JobResultRow, idempotency_key)
            if row is None:
                return None
            return StoredOutcome(duplicate=True, **row.result_ids)

    def count(self) -> int:
        """How many idempotency keys (jobs with stored results) there are."""
        with self.db.raw_session() as session:
            return int(session.scalar(select(func.count()).select_from(JobResultRow)) or 0)
