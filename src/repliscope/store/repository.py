"""``RunStore``: save, fetch, list and delete evaluation records in a SQL database (SQLite by default).

A record is stored as one ``runs`` row (the record minus its samples, as JSON, plus summary columns) and
one ``sample_predictions`` row per sample; :meth:`RunStore.get` rebuilds a record equal to the saved one.
Records must hold JSON-native values (a tuple inside ``options`` comes back as a list).
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import json
import os
import re
import time
import zlib
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import orjson
import platformdirs
from pydantic import BaseModel, ConfigDict
from sqlalchemy import (
    DateTime,
    Engine,
    Integer,
    String,
    Text,
    bindparam,
    cast,
    create_engine,
    delete,
    event,
    func,
    insert,
    or_,
    select,
)
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, IntegrityError, SQLAlchemyError
from sqlalchemy.orm import Session

from repliscope.bench.record import BenchmarkRecord
from repliscope.errors import StoreError
from repliscope.evaluation.record import Detection, EvaluationRecord, SamplePrediction, SegmentationSample
from repliscope.pitfalls.result import SweepResult
from repliscope.store import revision
from repliscope.store.models import (
    BenchmarkRow,
    JobResultRow,
    RunRow,
    SampleRow,
    StackMatrixRow,
    SweepRow,
    TraceRow,
)

if TYPE_CHECKING:
    from repliscope.stacks.matrix import StackMatrix

ENV_VAR = "REPLISCOPE_DB"
SAMPLE_CHUNK = 5_000
"""Sample rows per bulk insert and per decoded read chunk."""
MIN_PREFIX = 6
_TOP1_NAMES = ("top1", "top1_accuracy")
_TOP5_NAMES = ("top5", "top5_accuracy")


class RunSummary(BaseModel):
    """The summary columns of one stored run (what ``repliscope runs list`` shows); ``created_at`` is UTC."""

    model_config = ConfigDict(frozen=True)

    run_id: str
    created_at: datetime
    kind: str
    manifest_name: str
    manifest_version: str
    manifest_sha256: str
    runtime: str
    dataset_identity: str
    dataset_name: str
    num_samples: int
    num_failed: int
    top1: float | None
    top5: float | None
    result_hash: str
    sweep_id: str | None
    variant: str | None
    ap: float | None = None
    """Object detection's COCO AP (None for classification)."""
    framework_version: str | None = None
    cpu_model: str | None = None
    verdict: str | None = None
    """The run's claim verdict (see :func:`run_verdict`); None without claims."""


_SUMMARY_COLUMNS = [getattr(RunRow, name) for name in RunSummary.model_fields]

VERDICTS = ("consistent", "inconsistent", "not comparable")


class RunQuery(BaseModel):
    """Filters of :meth:`RunStore.query_runs`; None = any. ``model`` is the manifest name, ``version`` its
    version, ``dataset`` the dataset name, ``hardware`` the CPU model (as recorded: ``hardware.cpu_model``);
    ``created_from`` (inclusive) / ``created_to`` (exclusive) compare UTC times."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str | None = None
    version: str | None = None
    runtime: str | None = None
    framework_version: str | None = None
    dataset: str | None = None
    hardware: str | None = None
    kind: str | None = None
    verdict: str | None = None
    created_from: datetime | None = None
    created_to: datetime | None = None
    sweep_id: str | None = None
    search: str | None = None
    """Case-insensitive text found in the model name, its version (the tag), the dataset name, the runtime or
    the sweep variant's name (the runs page's search box)."""


SEARCHED_COLUMNS = (
    RunRow.manifest_name,
    RunRow.manifest_version,
    RunRow.dataset_name,
    RunRow.runtime,
    RunRow.variant,
)
"""What :attr:`RunQuery.search` looks in."""


SORT_FIELDS: dict[str, Any] = {
    "created_at": RunRow.created_at,
    "top1": RunRow.top1,
    "top5": RunRow.top5,
    "ap": RunRow.ap,
    "model": RunRow.manifest_name,
    "runtime": RunRow.runtime,
    "dataset": RunRow.dataset_name,
    "kind": RunRow.kind,
    "verdict": RunRow.verdict,
    "samples": RunRow.num_samples,
    "hardware": RunRow.cpu_model,
    "variant": RunRow.variant,
}
"""What :meth:`RunStore.query_runs` sorts by: a name ascending, ``-name`` descending."""
_NULLABLE_SORTS = ("top1", "top5", "ap", "verdict", "hardware", "variant")
SORTS = tuple(x for name in SORT_FIELDS for x in (name, f"-{name}"))
MAX_PAGE_SIZE = 500


def default_url() -> str:
    """``$REPLISCOPE_DB`` (a URL, or a path to a SQLite file), else ``repliscope.db`` in the user data dir."""
    env = os.environ.get(ENV_VAR)
    if env:
        return env if "://" in env else sqlite_url(Path(env))
    return _user_data_url()


def _user_data_url() -> str:
    return sqlite_url(Path(platformdirs.user_data_dir("repliscope")) / "repliscope.db")


def sqlite_url(path: Path) -> str:
    """SQLAlchemy URL of a SQLite database file."""
    return URL.create("sqlite", database=str(path.expanduser().resolve())).render_as_string()


def _enable_sqlite_foreign_keys(dbapi_conn: Any, _record: Any) -> None:
    """Foreign keys on; a writer waits up to 30 s for a lock (the service's job thread and its API write at
    once) and WAL lets readers go on while one writes."""
    cursor = dbapi_conn.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=30000")
    # switching a new file to WAL can answer "database is locked" at once while another connection migrates it
    # (the busy handler is not always consulted for the journal-mode change): retry for up to 30 s
    deadline = time.monotonic() + 30.0
    while True:
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            break
        except Exception as exc:  # sqlite3.OperationalError; the DBAPI module is the driver's
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    cursor.close()


def hide_password(url: str) -> str:
    """``url`` with any password replaced by ``***`` (also when it does not parse)."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", url)


def _sqlite_folder(url: str, create: bool) -> None:
    """The folder of a SQLite file must exist: created for the default location, else a StoreError (a typo in
    ``--db`` or ``$REPLISCOPE_DB`` must not silently create a new, empty database somewhere)."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        return  # reported by _open_engine
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return
    folder = Path(parsed.database).expanduser().parent
    if folder.is_dir():
        return
    if create:
        folder.mkdir(parents=True, exist_ok=True)
        return
    what = "is not a folder" if folder.exists() else "does not exist"
    raise StoreError(
        f"the folder {folder} of the run database {hide_password(url)} {what}; create it first "
        f"or choose another --db / ${ENV_VAR}"
    )


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


def _open_engine(url: str) -> Engine:
    """An engine on ``url`` whose database is at the newest schema revision (migrated when it is not: Alembic is
    imported only then, :mod:`repliscope.store.revision`)."""
    try:
        parsed = make_url(url)
        engine = create_engine(parsed)
        if parsed.get_backend_name() == "sqlite":
            event.listen(engine, "connect", _enable_sqlite_foreign_keys)
        if not revision.check(engine):
            try:
                from repliscope.store.migrate import upgrade_engine
            except ImportError as exc:  # alembic is a dependency; a broken install says so
                raise StoreError(f"cannot migrate the run database: {exc}; pip install alembic") from exc
            upgrade_engine(engine)
    except ImportError as exc:
        raise StoreError(
            f"the database driver for {hide_password(url)!r} is not installed ({exc}); for PostgreSQL: "
            f"pip install 'repliscope[postgres]'"
        ) from exc
    except (SQLAlchemyError, OSError) as exc:
        raise StoreError(f"cannot open the run database {hide_password(url)}: {exc}") from exc
    return engine


def _utc_naive(dt: datetime) -> datetime:
    return dt.astimezone(UTC).replace(tzinfo=None) if dt.tzinfo is not None else dt


def _metric_value(record: EvaluationRecord, names: tuple[str, ...]) -> float | None:
    for name in names:
        metric = record.metric(name)
        if metric is not None:
            return metric.value
    return None


def _str_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def run_verdict(verdicts: builtins.list[str]) -> str | None:
    """A run's verdict from its claims' verdicts: inconsistent if any is, else consistent if any is, else not
    comparable; None without claims (migration 0002 fills older rows the same way)."""
    for verdict in ("inconsistent", "consistent", "not comparable"):
        if verdict in verdicts:
            return verdict
    return None


def _run_row(record: EvaluationRecord) -> RunRow:
    return RunRow(
        run_id=record.run_id,
        created_at=_utc_naive(record.created_at),
        kind=record.kind,
        manifest_name=record.manifest.name,
        manifest_version=record.manifest.version,
        manifest_sha256=record.manifest.sha256,
        runtime=str(record.runtime.get("runtime", "")),
        dataset_identity=str(record.dataset.get("identity", "")),
        dataset_name=str(record.dataset.get("name", "")),
        num_samples=len(record.samples),
        num_failed=sum(1 for s in record.samples if s.error is not None),
        top1=_metric_value(record, _TOP1_NAMES),
        top5=_metric_value(record, _TOP5_NAMES),
        ap=_metric_value(record, ("AP",)),
        framework_version=_str_or_none(record.runtime.get("framework_version")),
        cpu_model=_str_or_none(record.hardware.get("cpu_model")),
        verdict=run_verdict([c.verdict for c in record.claims]),
        result_hash=record.result_hash,
        sweep_id=record.sweep_id,
        variant=record.variant,
        record={**record.model_dump(mode="json", exclude={"samples"}), **_segmentation_of(record)},
    )


def _segmentation_of(record: EvaluationRecord) -> dict[str, Any]:
    """Semantic segmentation: the samples' :class:`SegmentationSample` (by position) for the run row's JSON, so
    the ``sample_predictions`` table needs no column for them; {} for other tasks."""
    if all(s.segmentation is None for s in record.samples):
        return {}
    return {
        "sample_segmentation": [
            None if s.segmentation is None else s.segmentation.model_dump(mode="json") for s in record.samples
        ]
    }


_FILTER_COLUMNS: dict[str, Any] = {
    "model": RunRow.manifest_name,
    "version": RunRow.manifest_version,
    "runtime": RunRow.runtime,
    "dataset": RunRow.dataset_name,
    "framework_version": RunRow.framework_version,
    "kind": RunRow.kind,
    "verdict": RunRow.verdict,
    "sweep_id": RunRow.sweep_id,
    "hardware": RunRow.cpu_model,
}
"""The :class:`RunQuery` fields that must equal a column."""


def _run_query_params(filters: RunQuery, sort: str, page: int, page_size: int) -> dict[str, Any]:
    """The bound values of a runs query (:func:`_runs_statements`), keyed by filter name plus ``_offset`` and
    ``_limit``; bad input is an InvalidInputError naming the field."""
    from repliscope.store.service_tables import InvalidInputError

    if sort not in SORTS:
        raise InvalidInputError(f"sort {sort!r} is not allowed (allowed: {', '.join(SORTS)})", "sort")
    if page < 1:
        raise InvalidInputError(f"page {page} must be at least 1", "page")
    if not 1 <= page_size <= MAX_PAGE_SIZE:
        raise InvalidInputError(f"page_size {page_size} must be 1..{MAX_PAGE_SIZE}", "page_size")
    if filters.verdict is not None and filters.verdict not in VERDICTS:
        raise InvalidInputError(
            f"verdict {filters.verdict!r} is not a verdict (allowed: {', '.join(VERDICTS)})", "verdict"
        )
    params: dict[str, Any] = {
        name: getattr(filters, name) for name in _FILTER_COLUMNS if getattr(filters, name) is not None
    }
    if not filters.hardware:
        params.pop("hardware", None)
    if filters.search:  # LIKE with '/' escaping, as ``contains(..., autoescape=True)``
        escaped = filters.search.lower().replace("/", "//").replace("%", "/%").replace("_", "/_")
        params["search"] = f"%{escaped}%"
    if filters.created_from is not None:
        params["created_from"] = _utc_naive(filters.created_from)
    if filters.created_to is not None:
        params["created_to"] = _utc_naive(filters.created_to)
    params["_offset"], params["_limit"] = (page - 1) * page_size, page_size
    return params


@functools.lru_cache(maxsize=512)
def _runs_statements(columns: tuple[str, ...], sort: str, filters: tuple[str, ...]) -> tuple[Any, Any]:
    """(page SELECT of ``columns``, COUNT) of a runs query whose ``filters`` (names of :class:`RunQuery` fields,
    sorted) are set, every value a bound parameter: built once per shape, so SQLAlchemy neither rebuilds the
    statement nor re-adapts its cached result metadata on every call."""
    conditions: builtins.list[Any] = []
    for name in filters:
        if name in _FILTER_COLUMNS:
            conditions.append(_FILTER_COLUMNS[name] == bindparam(name))
        elif name == "search":
            needle = bindparam("search", type_=String)
            conditions.append(or_(*(func.lower(c).like(needle, escape="/") for c in SEARCHED_COLUMNS)))
        elif name == "created_from":
            conditions.append(RunRow.created_at >= bindparam(name, type_=DateTime))
        elif name == "created_to":
            conditions.append(RunRow.created_at < bindparam(name, type_=DateTime))
    sort_column = SORT_FIELDS[sort.lstrip("-")]
    order = (
        [sort_column.desc(), RunRow.run_id.desc()] if sort.startswith("-") else [sort_column.asc(), RunRow.run_id.asc()]
    )
    if sort.lstrip("-") in _NULLABLE_SORTS:  # NULL last on SQLite and PostgreSQL alike
        order[0] = order[0].nulls_last()
    page = (
        select(*(getattr(RunRow, c) for c in columns))
        .where(*conditions)
        .order_by(*order)
        .offset(bindparam("_offset", type_=Integer))
        .limit(bindparam("_limit", type_=Integer))
    )
    return page, select(func.count()).select_from(RunRow).where(*conditions)


_RECORD_AND_COUNT = select(
    RunRow.record,
    select(func.count()).select_from(SampleRow).where(SampleRow.run_id == RunRow.run_id).scalar_subquery(),
).where(RunRow.run_id == bindparam("run_id"))
"""A run's record JSON and its number of sample rows, one statement (:meth:`RunStore.get_without_samples`)."""


class RunStore:
    """Evaluation records in a database. ``url=None`` -> :func:`default_url`. On open the schema is migrated to
    the newest revision (:func:`repliscope.store.migrate.upgrade_engine`).

    The folder of a SQLite file is created only for the default location (the user data dir); for any other
    URL (``--db``, ``$REPLISCOPE_DB``) a missing folder is a StoreError.
    """

    def __init__(self, url: str | None = None) -> None:
        self.url = url or default_url()
        _sqlite_folder(self.url, create=self.url == _user_data_url())
        self.engine = _open_engine(self.url)

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.engine.dispose()

    def save(self, record: EvaluationRecord) -> None:
        """Store ``record`` and its samples in one transaction; an already stored run id is a StoreError.

        A write that fails (a full disk, a read-only database, a lost server) keeps the record as JSON
        (:func:`keep_unsaved`) and raises a StoreError naming the database, the error and that file, which
        ``repliscope runs import FILE`` stores later."""
        try:
            with Session(self.engine) as session, session.begin():
                _add_record(session, record)
        except IntegrityError as exc:
            raise StoreError(f"run {record.run_id} could not be stored: {exc.orig}") from exc
        except (SQLAlchemyError, OSError) as exc:
            reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
            kept, problems = keep_unsaved(record, self.url)
            where = (
                f"the record is kept in {kept}: store it later with `repliscope runs import {kept}`"
                if kept is not None
                else f"the record could not be kept either ({'; '.join(problems)})"
            )
            raise StoreError(
                f"run {record.run_id} could not be written to the run database "
                f"{hide_password(self.url)}: {reason}; {where}"
            ) from exc

    def save_outcome(self, outcome: JobResults, idempotency_key: str, kind: str = "evaluate") -> StoredOutcome:
        """Store a job's results exactly once per ``idempotency_key``: every record, sweep and benchmark of
        ``outcome`` (JSON dumps, as they travel back from an agent) and the key, in one transaction. A key already
        stored stores nothing and returns the earlier ids with ``duplicate=True`` (also when another process
        stores the same key at the same moment: the key is the primary key)."""
        earlier = self.get_job_result(idempotency_key)
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
            with Session(self.engine) as session, session.begin():
                session.add(
                    JobResultRow(
                        idempotency_key=idempotency_key,
                        kind=kind,
                        result_ids=ids,
                        created_at=_utc_naive(datetime.now(UTC)),
                    )
                )
                session.flush()  # the key first: a concurrent duplicate fails here, before any record
                for record in records:
                    _add_record(session, record)
                for sweep in sweeps:
                    session.add(_sweep_row(sweep))
                for bench in benchmarks:
                    session.add(_benchmark_row(bench))
                session.add_all(diffs)
        except IntegrityError as exc:
            again = self.get_job_result(idempotency_key)
            if again is not None:
                return again
            raise StoreError(f"the results of job {idempotency_key} could not be stored: {exc.orig}") from exc
        return StoredOutcome(duplicate=False, **ids)

    def get_job_result(self, idempotency_key: str) -> StoredOutcome | None:
        """The ids stored under ``idempotency_key`` (``duplicate=True``), None when the key is not stored."""
        with Session(self.engine) as session:
            row = session.get(JobResultRow, idempotency_key)
            if row is None:
                return None
            return StoredOutcome(duplicate=True, **row.result_ids)

    def count_job_results(self) -> int:
        """How many idempotency keys (jobs with stored results) there are."""
        with Session(self.engine) as session:
            return int(session.scalar(select(func.count()).select_from(JobResultRow)) or 0)

    def save_stack_matrix(self, matrix: StackMatrix) -> None:
        """Store a ``repliscope stacks`` matrix (its runs are stored with :meth:`save` / :meth:`save_outcome`)."""
        row = StackMatrixRow(
            matrix_id=matrix.matrix_id,
            created_at=_utc_naive(matrix.created_at),
            manifest_name=matrix.manifest.name,
            runtime=matrix.runtime,
            dataset_identity=str(matrix.dataset.identity),
            result=matrix.model_dump(mode="json"),
        )
        self._add_once(row, "stack matrix", matrix.matrix_id)

    def get_stack_matrix(self, matrix_id: str) -> StackMatrix:
        """The stack matrix ``matrix_id`` (or a unique prefix of at least 6 characters)."""
        from repliscope.stacks.matrix import StackMatrix

        with Session(self.engine) as session:
            full_id = self._resolve(session, matrix_id, StackMatrixRow, "stack matrix")
            return StackMatrix.model_validate(session.get_one(StackMatrixRow, full_id).result)

    def list_stack_matrices(self, limit: int = 50, manifest_name: str | None = None) -> builtins.list[StackMatrix]:
        """Stack matrices, newest first (of one model with ``manifest_name``)."""
        from repliscope.stacks.matrix import StackMatrix

        query = select(StackMatrixRow.result).order_by(StackMatrixRow.created_at.desc())
        if manifest_name is not None:
            query = query.where(StackMatrixRow.manifest_name == manifest_name)
        with Session(self.engine) as session:
            return [StackMatrix.model_validate(r) for r in session.scalars(query.limit(limit))]

    def get(self, run_id: str) -> EvaluationRecord:
        """The record of ``run_id`` (or of a unique prefix of at least 6 characters).

        The samples are read as plain columns (their JSON decoded in one call per :data:`SAMPLE_CHUNK` rows, no
        ORM object per row) and built without re-validation: they were validated when the record was saved."""
        with Session(self.engine) as session:
            full_id = self._resolve(session, run_id)
            data = dict(session.get_one(RunRow, full_id).record)
            segmentation = data.pop("sample_segmentation", None)
            samples = _load_samples(session, full_id)
        if segmentation is not None and len(segmentation) != len(samples):
            raise StoreError(f"run {full_id}: {len(segmentation)} segmentation entries for {len(samples)} samples")
        if segmentation is not None:
            for sample, seg in zip(samples, segmentation, strict=True):
                if seg is not None:
                    sample.segmentation = SegmentationSample.model_validate(seg)
        record = EvaluationRecord.model_validate({**data, "samples": []})
        record.samples = samples
        return record

    def get_head(self, run_id: str, failed: int = 20) -> tuple[EvaluationRecord, int]:
        """The record of ``run_id`` with only its first ``failed`` failed samples (in sample order) as
        ``samples``, and the number of failed samples: what ``runs show`` prints, without reading the others.
        The sample count and the failed count are SQL aggregates (the record's ``counts`` say the same)."""
        with Session(self.engine) as session:
            full_id = self._resolve(session, run_id)
            data = dict(session.get_one(RunRow, full_id).record)
            data.pop("sample_segmentation", None)
            n_failed = self.sample_counts(full_id, session)["failed"]
            samples = _load_samples(session, full_id, failed_only=True, limit=failed)
        record = EvaluationRecord.model_validate({**data, "samples": []})
        record.samples = samples
        return record, n_failed

    def sample_counts(self, run_id: str, session: Session | None = None) -> dict[str, int]:
        """SQL aggregates of a stored run's sample rows, as the record's ``counts``: ``{"total", "evaluated",
        "failed", "labelled"}`` (``run_id``: the full id)."""
        query = select(func.count(), func.count(SampleRow.error), func.count(SampleRow.label)).where(
            SampleRow.run_id == run_id
        )
        with contextlib.ExitStack() as stack:
            if session is None:
                session = stack.enter_context(Session(self.engine))
            total, failed, labelled = session.execute(query).one()
        return {"total": total, "evaluated": total - failed, "failed": failed, "labelled": labelled}

    def list(self, limit: int = 50, kind: str | None = None, sweep_id: str | None = None) -> builtins.list[RunSummary]:
        """Summaries of stored runs, newest first, optionally filtered by kind and sweep."""
        query = select(*_SUMMARY_COLUMNS).order_by(RunRow.created_at.desc(), RunRow.run_id.desc())
        if kind is not None:
            query = query.where(RunRow.kind == kind)
        if sweep_id is not None:
            query = query.where(RunRow.sweep_id == sweep_id)
        with Session(self.engine) as session:
            rows = session.execute(query.limit(limit)).all()
        return [RunSummary.model_validate(dict(r._mapping)) for r in rows]

    def query_runs(
        self, filters: RunQuery | None = None, sort: str = "-created_at", page: int = 1, page_size: int = 50
    ) -> tuple[builtins.list[RunSummary], int]:
        """One page of the runs matching ``filters`` -> (summaries, total matching). ``sort``: one of
        :data:`SORTS` (ties broken by run id); ``page`` from 1; ``page_size`` 1..500."""
        names = builtins.list(RunSummary.model_fields)
        rows, total = self.query_run_rows(filters, sort, page, page_size, names)
        return [RunSummary.model_validate(dict(zip(names, row, strict=True))) for row in rows], total

    def query_run_rows(
        self,
        filters: RunQuery | None,
        sort: str,
        page: int,
        page_size: int,
        columns: Sequence[str],
    ) -> tuple[builtins.list[tuple[Any, ...]], int]:
        """:meth:`query_runs` as plain tuples of the summary ``columns`` (names of :class:`RunSummary` fields, in
        that order; ``created_at`` naive UTC) -> (rows, total matching), no model per row; the statements are
        built once per query shape (:func:`_runs_statements`); a first page that is not full needs no count."""
        from repliscope.store.service_tables import InvalidInputError

        unknown = [c for c in columns if c not in RunSummary.model_fields]
        if unknown:
            allowed = ", ".join(RunSummary.model_fields)
            raise InvalidInputError(f"unknown run column {unknown[0]!r} (allowed: {allowed})", "columns")
        params = _run_query_params(filters or RunQuery(), sort, page, page_size)
        filtered = tuple(sorted(k for k in params if not k.startswith("_")))
        page_query, count_query = _runs_statements(tuple(columns), sort, filtered)
        with self.engine.connect() as connection:  # Core rows: no ORM bookkeeping per row
            rows = connection.execute(page_query, params).all()
            if page == 1 and len(rows) < page_size:
                total = len(rows)  # the whole result is on this page
            else:
                total = int(connection.scalar(count_query, params) or 0)
        return [tuple(row) for row in rows], total

    def get_without_samples(self, run_id: str) -> tuple[EvaluationRecord, int]:
        """The record of ``run_id`` (or a unique prefix of at least 6 characters) with no samples, and the number
        of its samples (an SQL count, in the same statement): what ``GET /runs/{id}`` serves, without reading the
        sample rows."""
        with Session(self.engine) as session:
            found = session.connection().execute(_RECORD_AND_COUNT, {"run_id": run_id}).first()
            if found is None:  # a prefix, or unknown (a StoreError)
                full_id = self._resolve(session, run_id)
                found = session.connection().execute(_RECORD_AND_COUNT, {"run_id": full_id}).one()
        data = dict(found[0])
        data.pop("sample_segmentation", None)
        return EvaluationRecord.model_validate({**data, "samples": []}), int(found[1])

    def delete(self, run_id: str) -> str:
        """Delete a run and its samples (full id or unique prefix); returns the full id deleted."""
        with Session(self.engine) as session, session.begin():
            full_id = self._resolve(session, run_id)
            session.execute(delete(SampleRow).where(SampleRow.run_id == full_id))
            session.execute(delete(RunRow).where(RunRow.run_id == full_id))
        return full_id

    def save_sweep(self, sweep: SweepResult) -> None:
        """Store a sweep summary (its variants' records are stored with :meth:`save`)."""
        self._add_once(_sweep_row(sweep), "sweep", sweep.sweep_id)

    def _add_once(self, row: SweepRow | BenchmarkRow | StackMatrixRow, what: str, object_id: str) -> None:
        """Insert ``row`` (a sweep or a benchmark); stored objects are immutable, so an existing id is an error."""
        try:
            with Session(self.engine) as session, session.begin():
                if session.get(type(row), object_id) is not None:
                    raise StoreError(f"{what} {object_id} is already stored")
                session.add(row)
        except IntegrityError as exc:
            raise StoreError(f"{what} {object_id} could not be stored: {exc.orig}") from exc

    def get_sweep(self, sweep_id: str) -> SweepResult:
        """The sweep ``sweep_id`` (or a unique prefix of at least 6 characters)."""
        with Session(self.engine) as session:
            full_id = self._resolve(session, sweep_id, SweepRow, "sweep")
            return SweepResult.model_validate(session.get_one(SweepRow, full_id).result)

    def list_sweeps(self, limit: int = 50) -> builtins.list[SweepRow]:
        with Session(self.engine, expire_on_commit=False) as session:
            return list(session.scalars(select(SweepRow).order_by(SweepRow.created_at.desc()).limit(limit)))

    def save_benchmark(self, record: BenchmarkRecord) -> None:
        """Store a benchmark record; its latencies as zlib-compressed little-endian float32 microseconds."""
        self._add_once(_benchmark_row(record), "benchmark", record.benchmark_id)

    def get_benchmark(self, benchmark_id: str) -> BenchmarkRecord:
        """The benchmark record ``benchmark_id`` (or a unique prefix of at least 6 characters)."""
        with Session(self.engine) as session:
            full_id = self._resolve(session, benchmark_id, BenchmarkRow, "benchmark")
            row = session.get_one(BenchmarkRow, full_id)
            data = dict(row.record)
            latencies = np.frombuffer(zlib.decompress(row.latencies), dtype="<f4")
        data["latencies_us"] = latencies.astype(np.float64).tolist()
        return BenchmarkRecord.model_validate(data)

    def count_benchmarks(self) -> int:
        """How many benchmark records are stored."""
        with Session(self.engine) as session:
            return int(session.scalar(select(func.count()).select_from(BenchmarkRow)) or 0)

    def list_benchmarks(self, limit: int = 50, matrix_id: str | None = None) -> builtins.list[BenchmarkRecord]:
        """Benchmark records, newest first (all of one matrix run with ``matrix_id``)."""
        query = select(BenchmarkRow.benchmark_id).order_by(BenchmarkRow.created_at.desc())
        if matrix_id is not None:
            query = query.where(BenchmarkRow.matrix_id == matrix_id)
        with Session(self.engine) as session:
            ids = session.scalars(query.limit(limit)).all()
        return [self.get_benchmark(i) for i in ids]

    def save_trace(self, run_id: str, level: str, chrome: dict[str, Any]) -> None:
        """Store the Chrome-trace JSON ``chrome`` of run / benchmark ``run_id`` (zlib-compressed); a trace
        already stored under ``run_id`` is replaced (one trace per id, the latest)."""
        blob = zlib.compress(json.dumps(chrome, separators=(",", ":")).encode(), 6)
        row = TraceRow(run_id=run_id, created_at=_utc_naive(datetime.now(UTC)), level=level, trace=blob)
        with Session(self.engine) as session, session.begin():
            session.merge(row)

    def load_trace(self, run_id: str) -> dict[str, Any] | None:
        """The Chrome-trace JSON stored for ``run_id`` (exact id, or a unique prefix of at least 6 characters);
        None when no trace matches; an ambiguous prefix is a StoreError."""
        with Session(self.engine) as session:
            row = session.get(TraceRow, run_id)
            if row is None and len(run_id) >= MIN_PREFIX:
                matches = session.scalars(
                    select(TraceRow).where(TraceRow.run_id.startswith(run_id, autoescape=True)).limit(11)
                ).all()
                if len(matches) > 1:
                    names = ", ".join(m.run_id for m in matches[:10])
                    raise StoreError(f"trace id prefix '{run_id}' is ambiguous; candidates: {names}")
                row = matches[0] if matches else None
            if row is None:
                return None
            data: dict[str, Any] = json.loads(zlib.decompress(row.trace))
        return data

    def _resolve(
        self,
        session: Session,
        run_id: str,
        table: type[RunRow] | type[SweepRow] | type[BenchmarkRow] | type[StackMatrixRow] = RunRow,
        what: str = "run",
    ) -> str:
        """Full id for an exact id or a unique prefix of at least MIN_PREFIX characters."""
        id_col = {
            RunRow: RunRow.run_id,
            SweepRow: SweepRow.sweep_id,
            BenchmarkRow: BenchmarkRow.benchmark_id,
            StackMatrixRow: StackMatrixRow.matrix_id,
        }[table]
        if session.get(table, run_id) is not None:
            return run_id
        if len(run_id) < MIN_PREFIX:
            raise StoreError(f"unknown {what} id '{run_id}' (a prefix needs at least {MIN_PREFIX} characters)")
        matches = session.scalars(
            select(id_col).where(id_col.startswith(run_id, autoescape=True)).order_by(table.created_at.desc()).limit(11)
        ).all()
        if len(matches) == 1:
            return matches[0]
        if not matches:
            recent = session.scalars(select(id_col).order_by(table.created_at.desc()).limit(5)).all()
            hint = f"; most recent: {', '.join(recent)}" if recent else "; none stored"
            raise StoreError(f"unknown {what} id '{run_id}' in {hide_password(self.url)}{hint}")
        more = " and more" if len(matches) > 10 else ""
        raise StoreError(f"{what} id prefix '{run_id}' is ambiguous; candidates: {', '.join(matches[:10])}{more}")


class JobResults(Protocol):
    """What :meth:`RunStore.save_outcome` stores: JSON dumps of records, sweeps and benchmark records
    (``repliscope.job_execution.JobOutcome``)."""

    records: builtins.list[dict[str, Any]]
    sweeps: builtins.list[dict[str, Any]]
    benchmarks: builtins.list[dict[str, Any]]


class StoredOutcome(BaseModel):
    """The ids a job's results are stored under; ``duplicate``: stored earlier under the same key (nothing new)."""

    model_config = ConfigDict(frozen=True)

    run_ids: builtins.list[str]
    sweep_ids: builtins.list[str]
    benchmark_ids: builtins.list[str]
    duplicate: bool
    diff_ids: builtins.list[str] = []
    """A diff job's stored diff (``repliscope.store.diffs``)."""

    @property
    def all_ids(self) -> builtins.list[str]:
        return [*self.run_ids, *self.sweep_ids, *self.benchmark_ids, *self.diff_ids]


def _diff_rows(outcome: JobResults, kind: str) -> builtins.list[Any]:
    """A diff job's result (``outcome.summary``, the diff's JSON) as a ``diffs`` row to store with the job."""
    summary = getattr(outcome, "summary", None)
    if kind != "diff" or not summary:
        return []
    from repliscope.store.diffs import diff_row

    return [diff_row(json.loads(summary))]


def _add_record(session: Session, record: EvaluationRecord) -> None:
    """Add ``record``'s run row and sample rows to ``session`` (an already stored run id is a StoreError); the
    sample rows go in bulk inserts of :data:`SAMPLE_CHUNK` rows (one executemany each), so no more than one
    chunk of row dicts exists at a time."""
    if session.get(RunRow, record.run_id) is not None:
        raise StoreError(f"run {record.run_id} is already stored; delete it first to replace it")
    session.add(_run_row(record))
    session.flush()
    for start in range(0, len(record.samples), SAMPLE_CHUNK):
        chunk = record.samples[start : start + SAMPLE_CHUNK]
        session.execute(insert(SampleRow), [_sample_row(record.run_id, start + i, s) for i, s in enumerate(chunk)])


def _sample_row(run_id: str, position: int, s: SamplePrediction) -> dict[str, Any]:
    """One ``sample_predictions`` row (the segmentation lives in the run row: :func:`_segmentation_of`)."""
    return {
        "run_id": run_id,
        "position": position,
        "sample_id": s.sample_id,
        "label": s.label,
        "topk_indices": s.topk_indices,
        "topk_probs": s.topk_probs,
        "error": s.error,
        "detections": None if s.detections is None else [d.model_dump() for d in s.detections],
    }


def _load_samples(
    session: Session, run_id: str, *, failed_only: bool = False, limit: int | None = None
) -> builtins.list[SamplePrediction]:
    """The sample rows of run ``run_id`` in order (``failed_only``: those with an error; at most ``limit``), read
    in chunks of :data:`SAMPLE_CHUNK` rows as plain Core rows whose JSON columns are fetched as text and decoded
    by :func:`_json` (orjson: a 50,000-sample run's top-k lists in ~40 ms, a quarter of ``json``'s time)."""
    query = (
        select(
            SampleRow.sample_id,
            SampleRow.label,
            SampleRow.error,
            cast(SampleRow.topk_indices, Text),
            cast(SampleRow.topk_probs, Text),
            cast(SampleRow.detections, Text),
        )
        .where(SampleRow.run_id == run_id)
        .order_by(SampleRow.position)
    )
    if failed_only:
        query = query.where(SampleRow.error.is_not(None))
    if limit is not None:
        query = query.limit(limit)
    samples: builtins.list[SamplePrediction] = []
    append, build, decode = samples.append, _stored_sample, _json
    result = session.connection().execute(query)  # Core rows: no ORM bookkeeping per row
    while rows := result.fetchmany(SAMPLE_CHUNK):
        for sample_id, label, error, indices, probs, detections in rows:
            found = None if detections is None else decode(detections)  # SQL NULL, or JSON null: None
            dets = None if found is None else [Detection.model_construct(**d) for d in found]
            append(build(sample_id, label, decode(indices), decode(probs), error, dets))
    return samples


def _json(text: str) -> Any:
    """A stored JSON column's value: orjson, or ``json`` for what orjson refuses and the standard library wrote
    (``NaN`` / ``Infinity``: SQLite keeps a model's non-finite output as it was; PostgreSQL's ``json`` type
    refuses it when the record is saved). orjson reads an integer of 2**64 or more as a float: class ids and
    indices are far below."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


_SAMPLE_FIELDS = frozenset(SamplePrediction.model_fields)


def _stored_sample(
    sample_id: str,
    label: int | None,
    indices: list[int],
    probs: list[float],
    error: str | None,
    detections: list[Detection] | None,
) -> SamplePrediction:
    """``SamplePrediction.model_construct`` of a stored row (every field set, no validation: the row was
    validated when saved), three times faster: a 50,000-sample run builds 50,000 of them."""
    sample = SamplePrediction.__new__(SamplePrediction)
    values = {
        "sample_id": sample_id,
        "label": label,
        "topk_indices": indices,
        "topk_probs": probs,
        "error": error,
        "detections": detections,
        "segmentation": None,
    }
    object.__setattr__(sample, "__dict__", values)
    object.__setattr__(sample, "__pydantic_fields_set__", set(_SAMPLE_FIELDS))
    object.__setattr__(sample, "__pydantic_extra__", None)
    object.__setattr__(sample, "__pydantic_private__", None)
    return sample


def _sweep_row(sweep: SweepResult) -> SweepRow:
    return SweepRow(
        sweep_id=sweep.sweep_id,
        created_at=_utc_naive(sweep.created_at),
        manifest_name=sweep.manifest.name,
        runtime=str(sweep.runtime.get("runtime")),
        dataset_identity=str(sweep.dataset.get("identity")),
        num_variants=len(sweep.variants),
        result=sweep.model_dump(mode="json"),
    )


def _benchmark_row(record: BenchmarkRecord) -> BenchmarkRow:
    blob = zlib.compress(np.asarray(record.latencies_us, dtype="<f4").tobytes(), 6)
    p90 = record.latency.percentiles.get("p90")
    return BenchmarkRow(
        benchmark_id=record.benchmark_id,
        created_at=_utc_naive(record.created_at),
        manifest_name=record.manifest.name,
        runtime=str(record.runtime.get("runtime", "")),
        scenario=record.scenario,
        threads=record.threads,
        queries=record.queries,
        p90_ms=p90.value if p90 else None,
        throughput=record.throughput_samples_per_second,
        matrix_id=record.matrix_id,
        record=record.model_dump(mode="json", exclude={"latencies_us"}),
        latencies=blob,
    )
