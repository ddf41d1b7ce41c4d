"""The runs store: evaluation records as one ``runs`` row (the record minus its samples, as JSON, plus summary
columns) and one ``sample_predictions`` row per sample; :meth:`RunRepository.get` rebuilds a record equal to the
saved one. Records must hold JSON-native values (a tuple inside ``options`` comes back as a list).

Besides records, it answers the queries the pages and the API make of the runs table, as typed results
(:class:`RunSummary`, :class:`LatestRun`, plain value lists): no caller sees a row.
"""

from __future__ import annotations

import builtins
import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict
from sqlalchemy import DateTime, Integer, String, Text, bindparam, cast, delete, func, insert, or_, select
from sqlalchemy.orm import Session

from repliscope.errors import StoreError
from repliscope.evaluation.claims import shown_verdict
from repliscope.evaluation.record import Detection, EvaluationRecord, SamplePrediction, SegmentationSample
from repliscope.store.database import Database, resolve_id, utc_naive
from repliscope.store.errors import InvalidInputError, UnknownIdError
from repliscope.store.models import RunLabelRow, RunRow, RunTagRow, SampleRow

SAMPLE_CHUNK = 5_000
"""Sample rows per bulk insert and per decoded read chunk."""
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
    metric_name: str | None = None
    """The task's headline metric (:func:`headline_of`: top1, AP, mIoU); None when the run has none."""
    metric_value: float | None = None
    metric_low: float | None = None
    metric_high: float | None = None
    """The headline metric's 95 % interval as the record states it."""


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
    """Case-insensitive text found in the model name, its version (the tag), the dataset name, the runtime,
    the sweep variant's name, or the run's annotations: a tag, its display name or its note (the runs page's
    search box; :mod:`repliscope.store.annotations`)."""
    tag: str | None = None
    """Runs carrying this tag (exact; :data:`repliscope.store.annotations.TAG_RULE`)."""


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
    "metric": RunRow.metric_value,
}
"""What :meth:`RunStore.query_runs` sorts by: a name ascending, ``-name`` descending (``metric``: the headline
metric's value, whatever the task)."""
_NULLABLE_SORTS = ("top1", "top5", "ap", "verdict", "hardware", "variant", "metric")
SORTS = tuple(x for name in SORT_FIELDS for x in (name, f"-{name}"))
MAX_PAGE_SIZE = 500


def _metric_value(record: EvaluationRecord, names: tuple[str, ...]) -> float | None:
    for name in names:
        metric = record.metric(name)
        if metric is not None:
            return metric.value
    return None


Headline = tuple[str | None, float | None, float | None, float | None]
"""(metric name, value, 95 % interval low, high)."""


def headline_name(task: str) -> str | None:
    """The headline metric of ``task``: the first of its ``metric_specs`` (None for a task not registered)."""
    from repliscope.tasks.base import TASKS, get_task

    return get_task(task).metric_specs[0].name if task in TASKS else None


def headline_of(record: EvaluationRecord) -> Headline:
    """The record's headline metric with its interval (:func:`headline_name`); its name and Nones when the record
    has no such metric (every sample failed)."""
    name = headline_name(record.task)
    metric = record.metric(name) if name is not None else None
    if metric is None:
        return name, None, None, None
    return name, metric.value, metric.ci_low, metric.ci_high


def headline_of_json(record: dict[str, Any]) -> Headline:
    """:func:`headline_of` of a record's stored JSON (migration 0007 fills older rows with it)."""
    name = headline_name(str(record.get("task") or EvaluationRecord.model_fields["task"].default))
    for metric in record.get("metrics") or []:
        if metric.get("name") == name:
            return name, metric.get("value"), metric.get("ci_low"), metric.get("ci_high")
    return name, None, None, None


def _str_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def run_verdict(verdicts: builtins.list[str]) -> str | None:
    """A run's verdict from its claims' verdicts: inconsistent if any is, else consistent if any is, else not
    comparable; None without claims (migration 0002 fills older rows the same way)."""
    for verdict in ("inconsistent", "consistent", "not comparable"):
        if verdict in verdicts:
            return verdict
    return None


def run_row(record: EvaluationRecord) -> RunRow:
    metric_name, metric_value, metric_low, metric_high = headline_of(record)
    return RunRow(
        metric_name=metric_name,
        metric_value=metric_value,
        metric_low=metric_low,
        metric_high=metric_high,
        run_id=record.run_id,
        created_at=utc_naive(record.created_at),
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
        verdict=run_verdict([shown_verdict(c.model_dump())[0] for c in record.claims]),
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
    if filters.tag is not None:
        from repliscope.store.annotations import check_tag

        params["tag"] = check_tag(filters.tag)
    if filters.search:  # LIKE with '/' escaping, as ``contains(..., autoescape=True)``
        escaped = filters.search.lower().replace("/", "//").replace("%", "/%").replace("_", "/_")
        params["search"] = f"%{escaped}%"
    if filters.created_from is not None:
        params["created_from"] = utc_naive(filters.created_from)
    if filters.created_to is not None:
        params["created_to"] = utc_naive(filters.created_to)
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
            # the annotations as two uncorrelated IN lists (each table scanned once), not a probe per run
            tagged = select(RunTagRow.run_id).where(func.lower(RunTagRow.tag).like(needle, escape="/"))
            labelled = select(RunLabelRow.run_id).where(
                or_(
                    func.lower(RunLabelRow.display_name).like(needle, escape="/"),
                    func.lower(RunLabelRow.note).like(needle, escape="/"),
                )
            )
            conditions.append(
                or_(
                    *(func.lower(c).like(needle, escape="/") for c in SEARCHED_COLUMNS),
                    RunRow.run_id.in_(tagged),
                    RunRow.run_id.in_(labelled),
                )
            )
        elif name == "tag":
            # the few runs of a tag through its index (ix_run_tags_tag), not a probe per run
            conditions.append(RunRow.run_id.in_(select(RunTagRow.run_id).where(RunTagRow.tag == bindparam("tag"))))
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


def add_record(session: Session, record: EvaluationRecord) -> None:
    """Add ``record``'s run row and sample rows to ``session`` (an already stored run id is a StoreError); the
    sample rows go in bulk inserts of :data:`SAMPLE_CHUNK` rows (one executemany each), so no more than one
    chunk of row dicts exists at a time."""
    if session.get(RunRow, record.run_id) is not None:
        raise StoreError(f"run {record.run_id} is already stored; delete it first to replace it")
    session.add(run_row(record))
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


@dataclass(frozen=True)
class LatestRun:
    """The newest plain run (no sweep variant) of one model version on one runtime and CPU: what the models
    page shows per cell. ``claims``: the record's judged claims as stored (JSON objects)."""

    manifest_name: str
    manifest_version: str
    runtime: str
    cpu_model: str | None
    run_id: str
    created_at: datetime
    verdict: str | None
    claims: tuple[dict[str, Any], ...]


class RunRepository:
    """The runs and their samples in ``db``."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def resolve(self, session: Session, run_id: str) -> str:
        """The full id of run ``run_id`` (an exact id or a unique prefix of at least 6 characters)."""
        return resolve_id(
            session, RunRow.run_id, run_id, "run", newest_first=RunRow.created_at, recent_in=self.db.shown_url
        )

    def add(self, record: EvaluationRecord) -> None:
        """Store ``record`` and its samples in one transaction; an already stored run id is a StoreError, a
        failing database a :class:`~repliscope.store.errors.DatabaseError` (the caller keeps the record:
        :meth:`repliscope.store.repository.RunStore.save`)."""
        with self.db.session(
            write=True,
            failing=f"run {record.run_id} could not be written to",
            conflict=f"run {record.run_id} could not be stored",
        ) as session:
            add_record(session, record)

    def get(self, run_id: str) -> EvaluationRecord:
        """The record of ``run_id`` (or of a unique prefix of at least 6 characters).

        The samples are read as plain columns (their JSON decoded in one call per :data:`SAMPLE_CHUNK` rows, no
        ORM object per row) and built without re-validation: they were validated when the record was saved."""
        with self.db.session() as session:
            full_id = self.resolve(session, run_id)
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
        with self.db.session() as session:
            full_id = self.resolve(session, run_id)
            data = dict(session.get_one(RunRow, full_id).record)
            data.pop("sample_segmentation", None)
            n_failed = _sample_counts(session, full_id)["failed"]
            samples = _load_samples(session, full_id, failed_only=True, limit=failed)
        record = EvaluationRecord.model_validate({**data, "samples": []})
        record.samples = samples
        return record, n_failed

    def sample_counts(self, run_id: str) -> dict[str, int]:
        """SQL aggregates of a stored run's sample rows, as the record's ``counts``: ``{"total", "evaluated",
        "failed", "labelled"}`` (``run_id``: the full id)."""
        with self.db.session() as session:
            return _sample_counts(session, run_id)

    def identity(self, run_id: str) -> tuple[str, str] | None:
        """(result hash, manifest sha256) of the run stored under the full id ``run_id``, None when none is: one
        indexed row, what a cache of records by id asks on a hit (the record may have been deleted or stored again
        by another process)."""
        with self.db.session() as session:
            row = session.execute(
                select(RunRow.result_hash, RunRow.manifest_sha256).where(RunRow.run_id == run_id)
            ).first()
        return None if row is None else (row[0], row[1])

    def get_without_samples(self, run_id: str) -> tuple[EvaluationRecord, int]:
        """The record of ``run_id`` (or a unique prefix of at least 6 characters) with no samples, and the number
        of its samples (an SQL count, in the same statement): what ``GET /runs/{id}`` serves, without reading the
        sample rows."""
        with self.db.session() as session:
            found = session.connection().execute(_RECORD_AND_COUNT, {"run_id": run_id}).first()
            if found is None:  # a prefix, or unknown (a StoreError)
                full_id = self.resolve(session, run_id)
                found = session.connection().execute(_RECORD_AND_COUNT, {"run_id": full_id}).one()
        data = dict(found[0])
        data.pop("sample_segmentation", None)
        return EvaluationRecord.model_validate({**data, "samples": []}), int(found[1])

    def delete(self, run_id: str) -> str:
        """Delete a run and its samples (full id or unique prefix); returns the full id deleted."""
        with self.db.session(write=True, failing=f"run {run_id} could not be deleted from") as session:
            full_id = self.resolve(session, run_id)
            session.execute(delete(SampleRow).where(SampleRow.run_id == full_id))
            session.execute(delete(RunRow).where(RunRow.run_id == full_id))
        return full_id

    def list(self, limit: int = 50, kind: str | None = None, sweep_id: str | None = None) -> builtins.list[RunSummary]:
        """Summaries of stored runs, newest first, optionally filtered by kind and sweep."""
        query = select(*_SUMMARY_COLUMNS).order_by(RunRow.created_at.desc(), RunRow.run_id.desc())
        if kind is not None:
            query = query.where(RunRow.kind == kind)
        if sweep_id is not None:
            query = query.where(RunRow.sweep_id == sweep_id)
        with self.db.session() as session:
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
        unknown = [c for c in columns if c not in RunSummary.model_fields]
        if unknown:
            allowed = ", ".join(RunSummary.model_fields)
            raise InvalidInputError(f"unknown run column {unknown[0]!r} (allowed: {allowed})", "columns")
        params = _run_query_params(filters or RunQuery(), sort, page, page_size)
        filtered = tuple(sorted(k for k in params if not k.startswith("_")))
        page_query, count_query = _runs_statements(tuple(columns), sort, filtered)
        with self.db.session() as session:
            connection = session.connection()  # Core rows: no ORM bookkeeping per row
            rows = connection.execute(page_query, params).all()
            if page == 1 and len(rows) < page_size:
                total = len(rows)  # the whole result is on this page
            else:
                total = int(connection.scalar(count_query, params) or 0)
        return [tuple(row) for row in rows], total

    def latest_per_model(self, name: str | None = None) -> builtins.list[LatestRun]:
        """The newest plain run (sweep variants left out: a variant is not the model as claimed) per (model,
        version, runtime, CPU), by model name; ``name``: of that model only. Two runs stored at the same instant:
        the greater run id."""
        key = (RunRow.manifest_name, RunRow.manifest_version, RunRow.runtime, RunRow.cpu_model)
        latest = select(*key, func.max(RunRow.created_at).label("at")).where(RunRow.variant.is_(None)).group_by(*key)
        if name is not None:
            latest = latest.where(RunRow.manifest_name == name)
        found: builtins.list[LatestRun] = []
        with self.db.session() as session:
            for model, version, runtime, cpu, at in session.execute(latest.order_by(RunRow.manifest_name)).all():
                run = session.execute(
                    select(RunRow.run_id, RunRow.created_at, RunRow.verdict, RunRow.record)
                    .where(
                        RunRow.manifest_name == model,
                        RunRow.manifest_version == version,
                        RunRow.runtime == runtime,
                        RunRow.cpu_model.is_(None) if cpu is None else RunRow.cpu_model == cpu,
                        RunRow.created_at == at,
                        RunRow.variant.is_(None),
                    )
                    .order_by(RunRow.run_id.desc())
                    .limit(1)
                ).first()
                if run is None:
                    continue
                run_id, created_at, verdict, record = run
                found.append(
                    LatestRun(
                        manifest_name=model,
                        manifest_version=version,
                        runtime=runtime,
                        cpu_model=cpu,
                        run_id=run_id,
                        created_at=created_at,
                        verdict=verdict,
                        claims=tuple(record.get("claims") or ()),
                    )
                )
        return found

    def filter_values(self, names: Sequence[str], limit: int = 200) -> dict[str, builtins.list[str]]:
        """The distinct non-empty values of each :class:`RunQuery` filter in ``names`` (at most ``limit`` each,
        sorted): the runs page's filter lists."""
        unknown = [n for n in names if n not in _FILTER_COLUMNS]
        if unknown:
            allowed = ", ".join(_FILTER_COLUMNS)
            raise InvalidInputError(f"unknown run filter {unknown[0]!r} (allowed: {allowed})", "filters")
        with self.db.session() as session:
            return {
                name: [
                    v
                    for v in session.scalars(
                        select(_FILTER_COLUMNS[name]).distinct().order_by(_FILTER_COLUMNS[name]).limit(limit)
                    )
                    if v
                ]
                for name in names
            }

    def count_by_dataset(self, names: Sequence[str]) -> dict[str, int]:
        """How many runs are stored under each dataset name of ``names`` (names without runs left out)."""
        with self.db.session() as session:
            rows = session.execute(
                select(RunRow.dataset_name, func.count())
                .where(RunRow.dataset_name.in_(builtins.list(names)))
                .group_by(RunRow.dataset_name)
            ).all()
        return {str(name): int(count) for name, count in rows}

    def resolve_sweep_id(self, sweep_id: str) -> str:
        """The sweep id of stored runs that ``sweep_id`` is, or uniquely starts (at least 6 characters);
        ``sweep_id`` itself when no run's sweep id matches; several matches: an AmbiguousIdError."""
        with self.db.session() as session:
            try:
                return resolve_id(session, RunRow.sweep_id, sweep_id, "sweep", distinct=True)
            except UnknownIdError:
                return sweep_id


def _sample_counts(session: Session, run_id: str) -> dict[str, int]:
    query = select(func.count(), func.count(SampleRow.error), func.count(SampleRow.label)).where(
        SampleRow.run_id == run_id
    )
    total, failed, labelled = session.execute(query).one()
    return {"total": total, "evaluated": total - failed, "failed": failed, "labelled": labelled}
