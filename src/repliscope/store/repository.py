"""``RunStore``: the facade over the per-domain stores of one run database (MLflow's ``SqlAlchemyStore`` shape).

One :class:`~repliscope.store.database.Database` (the engine, and the one session wrapper that turns database
failures into :mod:`repliscope.store.errors`) is shared by the stores, each in its module:

=====================  ==================================================  =====================================
attribute              store                                               module
=====================  ==================================================  =====================================
``runs``               evaluation records and their samples                :mod:`repliscope.store.runs`
``sweeps``             pitfall sweep summaries                             :mod:`repliscope.store.sweeps`
``benchmarks``         benchmark records                                   :mod:`repliscope.store.benchmarks`
``traces``             Chrome traces of runs and benchmarks                :mod:`repliscope.store.traces`
``job_results``        a job's results, once per idempotency key           :mod:`repliscope.store.job_results`
``stack_matrices``     ``repliscope stacks`` matrices                      :mod:`repliscope.store.stack_matrices`
``datasets``           the dataset registry                                :mod:`repliscope.store.datasets`
``manifests``          uploaded manifests (name@version)                   :mod:`repliscope.store.manifests`
``jobs``               the service's jobs                                  :mod:`repliscope.store.jobs`
``tokens``             API tokens                                          :mod:`repliscope.store.accounts`
``diffs``              stored diffs                                        :mod:`repliscope.store.diffs`
``annotations``        runs' tags, notes, display names, their audit       :mod:`repliscope.store.annotations`
=====================  ==================================================  =====================================

The methods of :class:`RunStore` are those its callers have always used (``save``, ``get``, ``query_runs``,
``save_sweep``...); each is one line into its store. A record whose write fails is kept as JSON
(:func:`keep_unsaved`) for ``repliscope runs import``.
"""

from __future__ import annotations

import builtins
import contextlib
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from repliscope.bench.record import BenchmarkRecord
from repliscope.evaluation.record import EvaluationRecord
from repliscope.pitfalls.result import SweepResult
from repliscope.records.stack_matrix import StackMatrix
from repliscope.store.accounts import TokenStore
from repliscope.store.annotations import AnnotationStore
from repliscope.store.benchmarks import BenchmarkStore
from repliscope.store.database import (
    ENV_VAR,
    MIN_PREFIX,
    Database,
    default_url,
    hide_password,
    sqlite_folder,
    sqlite_url,
    user_data_url,
)
from repliscope.store.datasets import DatasetStore
from repliscope.store.diffs import DiffStore
from repliscope.store.errors import DatabaseError
from repliscope.store.job_results import JobResults, JobResultStore, StoredOutcome
from repliscope.store.jobs import JobStore
from repliscope.store.manifests import ManifestStore
from repliscope.store.runs import (
    MAX_PAGE_SIZE,
    SAMPLE_CHUNK,
    SEARCHED_COLUMNS,
    SORT_FIELDS,
    SORTS,
    VERDICTS,
    LatestRun,
    RunQuery,
    RunRepository,
    RunSummary,
    run_row,
    run_verdict,
)
from repliscope.store.stack_matrices import StackMatrixStore
from repliscope.store.sweeps import SweepStore, SweepSummary
from repliscope.store.traces import TraceStore

__all__ = [
    "ENV_VAR",
    "MAX_PAGE_SIZE",
    "MIN_PREFIX",
    "SAMPLE_CHUNK",
    "SEARCHED_COLUMNS",
    "SORTS",
    "SORT_FIELDS",
    "VERDICTS",
    "JobResults",
    "LatestRun",
    "RunQuery",
    "RunStore",
    "RunSummary",
    "StoredOutcome",
    "default_url",
    "hide_password",
    "keep_unsaved",
    "run_verdict",
    "sqlite_url",
    "unsaved_folders",
]

# the names earlier callers import from here (cli/db_cmd.py, benchmarks/bench_store_queries.py)
_sqlite_folder = sqlite_folder
_user_data_url = user_data_url
_run_row = run_row


UNSAVED_FOLDER = "unsaved-runs"
"""Where a record whose store write failed is kept as ``<run_id>.json``, first beside the SQLite file, else in
the cache (``$REPLISCOPE_CACHE``), else in the temporary folder."""


def unsaved_folders(url: str) -> list[Path]:
    """The folders :func:`keep_unsaved` tries, in order."""
    from repliscope.paths import default_cache_dir

    folders = []
    try:
        parsed = make_url(url)
        if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
            folders.append(
                Path(str(parsed.database).removeprefix("file:").split("?")[0]).expanduser().parent / UNSAVED_FOLDER
            )
    except ArgumentError:
        pass
    import tempfile

    temporary = Path(tempfile.gettempdir()) / f"repliscope-{UNSAVED_FOLDER}"
    return [*folders, default_cache_dir() / UNSAVED_FOLDER, temporary]


def keep_unsaved(record: EvaluationRecord, url: str) -> tuple[Path | None, list[str]]:
    """Write ``record`` as JSON into the first of :func:`unsaved_folders` that takes it (written whole, then
    renamed: never a partial file): (that file, []) or (None, the error of every folder)."""
    from repliscope.evaluation.record import RUN_ID_PATTERN

    if not re.fullmatch(RUN_ID_PATTERN, record.run_id):  # the id names the file: never a path out of the folder
        return None, [f"run id {record.run_id!r} is not of the id alphabet ({RUN_ID_PATTERN}): not kept as a file"]
    text = record.model_dump_json()
    problems = []
    for folder in unsaved_folders(url):
        target = folder / f"{record.run_id}.json"
        part = target.with_suffix(".json.part")
        try:
            folder.mkdir(parents=True, exist_ok=True)
            part.write_text(text, encoding="utf-8")
            os.replace(part, target)
            return target, []
        except OSError as exc:
            problems.append(f"{folder}: {exc.strerror or exc}")
            with contextlib.suppress(OSError):
                part.unlink(missing_ok=True)
    return None, problems


class RunStore:
    """Evaluation records and everything else stored beside them, in the database at ``url`` (None:
    :func:`default_url`), migrated to the newest schema revision on open
    (:func:`repliscope.store.migrate.upgrade_engine`).

    The folder of a SQLite file is created only for the default location (the user data dir); for any other
    URL (``--db``, ``$REPLISCOPE_DB``) a missing folder is a StoreError.
    """

    def __init__(self, url: str | None = None) -> None:
        self.db = Database(url)
        self.runs = RunRepository(self.db)
        self.sweeps = SweepStore(self.db)
        self.benchmarks = BenchmarkStore(self.db)
        self.traces = TraceStore(self.db)
        self.job_results = JobResultStore(self.db)
        self.stack_matrices = StackMatrixStore(self.db)
        self.datasets = DatasetStore(self.db)
        self.manifests = ManifestStore(self.db)
        self.jobs = JobStore(self.db)
        self.tokens = TokenStore(self.db)
        self.diffs = DiffStore(self.db)
        self.annotations = AnnotationStore(self.db)

    @property
    def url(self) -> str:
        return self.db.url

    @property
    def engine(self) -> Engine:
        return self.db.engine

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.db.close()

    # ---- runs ----

    def save(self, record: EvaluationRecord) -> None:
        """Store ``record`` and its samples in one transaction; an already stored run id is a StoreError.

        A write that fails (a full disk, a read-only database, a lost server) keeps the record as JSON
        (:func:`keep_unsaved`) and raises a DatabaseError naming the database, the error and that file, which
        ``repliscope runs import FILE`` stores later."""
        try:
            self.runs.add(record)
        except DatabaseError as exc:
            kept, problems = keep_unsaved(record, self.url)
            where = (
                f"the record is kept in {kept}: store it later with `repliscope runs import {kept}`"
                if kept is not None
                else f"the record could not be kept either ({'; '.join(problems)})"
            )
            raise DatabaseError(f"{exc}; {where}", exc.reason) from exc

    def get(self, run_id: str) -> EvaluationRecord:
        """:meth:`RunRepository.get <repliscope.store.runs.RunRepository.get>`."""
        return self.runs.get(run_id)

    def get_head(self, run_id: str, failed: int = 20) -> tuple[EvaluationRecord, int]:
        """:meth:`RunRepository.get_head <repliscope.store.runs.RunRepository.get_head>`."""
        return self.runs.get_head(run_id, failed)

    def get_without_samples(self, run_id: str) -> tuple[EvaluationRecord, int]:
        """:meth:`RunRepository.get_without_samples <repliscope.store.runs.RunRepository.get_without_samples>`."""
        return self.runs.get_without_samples(run_id)

    def sample_counts(self, run_id: str) -> dict[str, int]:
        """:meth:`RunRepository.sample_counts <repliscope.store.runs.RunRepository.sample_counts>`."""
        return self.runs.sample_counts(run_id)

    def list(self, limit: int = 50, kind: str | None = None, sweep_id: str | None = None) -> builtins.list[RunSummary]:
        """Summaries of stored runs, newest first, optionally filtered by kind and sweep."""
        return self.runs.list(limit, kind, sweep_id)

    def query_runs(
        self, filters: RunQuery | None = None, sort: str = "-created_at", page: int = 1, page_size: int = 50
    ) -> tuple[builtins.list[RunSummary], int]:
        """:meth:`RunRepository.query_runs <repliscope.store.runs.RunRepository.query_runs>`."""
        return self.runs.query_runs(filters, sort, page, page_size)

    def query_run_rows(
        self, filters: RunQuery | None, sort: str, page: int, page_size: int, columns: Sequence[str]
    ) -> tuple[builtins.list[tuple[Any, ...]], int]:
        """:meth:`RunRepository.query_run_rows <repliscope.store.runs.RunRepository.query_run_rows>`."""
        return self.runs.query_run_rows(filters, sort, page, page_size, columns)

    def delete(self, run_id: str) -> str:
        """Delete a run and its samples (full id or unique prefix); returns the full id deleted."""
        return self.runs.delete(run_id)

    # ---- sweeps, benchmarks, traces, stack matrices ----

    def save_sweep(self, sweep: SweepResult) -> None:
        self.sweeps.save(sweep)

    def get_sweep(self, sweep_id: str) -> SweepResult:
        return self.sweeps.get(sweep_id)

    def list_sweeps(self, limit: int = 50) -> builtins.list[SweepSummary]:
        return self.sweeps.list(limit)

    def save_benchmark(self, record: BenchmarkRecord) -> None:
        self.benchmarks.save(record)

    def get_benchmark(self, benchmark_id: str) -> BenchmarkRecord:
        return self.benchmarks.get(benchmark_id)

    def count_benchmarks(self) -> int:
        return self.benchmarks.count()

    def list_benchmarks(self, limit: int = 50, matrix_id: str | None = None) -> builtins.list[BenchmarkRecord]:
        return self.benchmarks.list(limit, matrix_id)

    def save_trace(self, run_id: str, level: str, chrome: dict[str, Any]) -> None:
        self.traces.save(run_id, level, chrome)

    def load_trace(self, run_id: str) -> dict[str, Any] | None:
        return self.traces.load(run_id)

    def save_stack_matrix(self, matrix: StackMatrix) -> None:
        self.stack_matrices.save(matrix)

    def get_stack_matrix(self, matrix_id: str) -> StackMatrix:
        return self.stack_matrices.get(matrix_id)

    def list_stack_matrices(self, limit: int = 50, manifest_name: str | None = None) -> builtins.list[StackMatrix]:
        return self.stack_matrices.list(limit, manifest_name)

    # ---- job results ----

    def save_outcome(self, outcome: JobResults, idempotency_key: str, kind: str = "evaluate") -> StoredOutcome:
        """:meth:`JobResultStore.save_outcome <repliscope.store.job_results.JobResultStore.save_outcome>`."""
        return self.job_results.save_outcome(outcome, idempotency_key, kind)

    def get_job_result(self, idempotency_key: str) -> StoredOutcome | None:
        return self.job_results.get(idempotency_key)

    def count_job_results(self) -> int:
        return self.job_results.count()
