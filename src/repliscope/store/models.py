"""ORM tables: one ``runs`` row per evaluation record, one ``sample_predictions`` row per sample, one
``benchmarks`` row per benchmark record, one ``traces`` row per stored trace.

``runs.record`` holds the whole record as JSON (minus ``samples``); the other columns are copies of it for
listing and filtering. ``sqlalchemy.JSON`` keeps the schema portable between SQLite and PostgreSQL.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, DateTime, Float, ForeignKey, Index, Integer, LargeBinary, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    """Declarative base of the store's tables."""


class RunRow(Base):
    """One stored run. ``created_at`` is UTC without tzinfo (the record's own value is in ``record``)."""

    __tablename__ = "runs"

    run_id: Mapped[str] = mapped_column(String, primary_key=True)
    created_at: Mapped[datetime] = mapped_column(DateTime, index=True)
    kind: Mapped[str] = mapped_column(String, index=True)
    manifest_name: Mapped[str] = mapped_column(String)
    manifest_version: Mapped[str] = mapped_column(String)
    manifest_sha256: Mapped[str] = mapped_column(String)
    runtime: Mapped[str] = mapped_column(String)
    dataset_identity: Mapped[str] = mapped_column(String, index=True)
    dataset_name: Mapped[str] = mapped_column(String)
    num_samples: Mapped[int] = mapped_column(Integer)
    num_failed: Mapped[int] = mapped_column(Integer)
    top1: Mapped[float | None] = mapped_column(Float)
    top5: Mapped[float | None] = mapped_column(Float)
    ap: Mapped[float | None] = mapped_column(Float, nullable=True)
    """Object detection's COCO AP (.50:.95); NULL for classification (added to older stores on open)."""
    result_hash: Mapped[str] = mapped_column(String)
    sweep_id: Mapped[str | None] = mapped_column(String, index=True)
    variant: Mapped[str | None] = mapped_column(String)
    record: Mapped[dict[str, Any]] = mapped_column(JSON)
    framework_version: Mapped[str | None] = mapped_column(String, nullable=True)
    """``record.runtime["framework_version"]`` (migration 0002; filled from the record for older rows)."""
    cpu_model: Mapped[str | None] = mapped_column(String, nullable=True)
    """``record.hardware["cpu_model"]``."""
    verdict: Mapped[str | None] = mapped_column(String, nullable=True)
    """The run's claim verdict: inconsistent if any claim is, else consistent if any is, else not comparable;
    NULL without claims."""
    metric_name: Mapped[str | None] = mapped_column(String, nullable=True)
    """The task's headline metric: the first of its ``metric_specs`` (top1, AP, mIoU; migration 0007)."""
    metric_value: Mapped[float | None] = mapped_column(Float, nullable=True)
    metric_low: Mapped[float | None] = mapped_column(Float, nullable=True)
    """The headline metric's 95 % interval as the record states it (Wilson or bootstrap, per the task)."""
    metric_high: Mapped[float | None] = mapped_column(Float, nullable=True)

    __table_args__ = (
        Index("ix_runs_model_created", "manifest_name", "created_at"),
        Index("ix_runs_manifest", "manifest_name", "manifest_version", "created_at"),
        Index("ix_runs_model_runtime", "manifest_name", "runtime", "created_at"),
        Index("ix_runs_runtime_created", "runtime", "created_at"),
        Index("ix_runs_runtime_framework", "runtime", "framework_version", "created_at"),
        Index("ix_runs_dataset_created", "dataset_name", "created_at"),
        Index("ix_runs_dataset_runtime", "dataset_name", "runtime", "created_at"),
        Index("ix_runs_kind_created", "kind", "created_at"),
        Index("ix_runs_verdict_created", "verdict", "created_at"),
        Index("ix_runs_framework_version", "framework_version", "created_at"),
        Index("ix_runs_cpu_model", "cpu_model", "created_at"),
    )


class SampleRow(Base):
    """One sample's prediction; ``position`` keeps the record's sample order. ``detections``: object detection's
    ``[{"box", "score", "class_id"}, ...]`` (NULL for classification and failed samples; added to stores created
    before it by the baseline migration, :mod:`repliscope.store.migrate`)."""

    __tablename__ = "sample_predictions"

    run_id: Mapped[str] = mapped_column(ForeignKey("runs.run_id", ondelete="CASCADE"), primary_key=True, index=True)
    position: Mapped[int] = mapped_column(Integer, primary_key=True)
    sample_id: Mapped[str] = mapped_column(Text)
    label: Mapped[int | None] = mapped_column(Integer)
    topk_indices: Mapped[list[int]] = mapped_column(JSON)
    topk_probs: Mapped[list[float]] = mapped_column(JSON)
    error: Mapped[str | None] = mapped_column(Text)
    detections: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON(none_as_null=True), nullable=True)


class SweepRow(Base):
    """One pitfall sweep: the whole SweepResult as JSON; its variants' runs point here by ``sweep_id``."""

    __tablename__ = "sweeps"

    sweep_id: Mapped[str] = mapped_column(String, primary_key=True)
    created_at: Mapped[datetime] = mapped_column(DateTime, index=True)
    manifest_name: Mapped[str] = mapped_column(String)
    runtime: Mapped[str] = mapped_column(String)
    dataset_identity: Mapped[str] = mapped_column(String, index=True)
    num_variants: Mapped[int] = mapped_column(Integer)
    result: Mapped[dict[str, Any]] = mapped_column(JSON)


class BenchmarkRow(Base):
    """One benchmark record (``repliscope bench``): the record minus its latencies as JSON; ``latencies`` holds
    the per-query latencies as little-endian float32 microseconds, zlib-compressed (4 bytes a query before
    compression)."""

    __tablename__ = "benchmarks"

    benchmark_id: Mapped[str] = mapped_column(String, primary_key=True)
    created_at: Mapped[datetime] = mapped_column(DateTime, index=True)
    manifest_name: Mapped[str] = mapped_column(String)
    runtime: Mapped[str] = mapped_column(String)
    scenario: Mapped[str] = mapped_column(String, index=True)
    threads: Mapped[int | None] = mapped_column(Integer)
    queries: Mapped[int] = mapped_column(Integer)
    p90_ms: Mapped[float | None] = mapped_column(Float)
    throughput: Mapped[float] = mapped_column(Float)
    matrix_id: Mapped[str | None] = mapped_column(String, index=True)
    record: Mapped[dict[str, Any]] = mapped_column(JSON)
    latencies: Mapped[bytes] = mapped_column(LargeBinary)


class TraceRow(Base):
    """One Chrome-trace JSON (``{"traceEvents": [...], ...}``), zlib-compressed UTF-8, of a run or benchmark
    (``run_id`` is any run / benchmark id; it is not a foreign key); ``level`` is the tracing level it was
    recorded at."""

    __tablename__ = "traces"

    run_id: Mapped[str] = mapped_column(String, primary_key=True)
    created_at: Mapped[datetime] = mapped_column(DateTime, index=True)
    level: Mapped[str] = mapped_column(String)
    trace: Mapped[bytes] = mapped_column(LargeBinary)


class TokenRow(Base):
    """One API token: only its sha256 is stored; ``role`` is viewer | runner | admin."""

    __tablename__ = "tokens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String)
    role: Mapped[str] = mapped_column(String)
    token_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(DateTime)
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)


class DatasetRegistryRow(Base):
    """A dataset registered server-side: ``spec`` is what ``--dataset`` takes (a folder, a built-in name or
    NAME:PATH); clients refer to it by ``name`` only."""

    __tablename__ = "datasets_registry"

    name: Mapped[str] = mapped_column(String, primary_key=True)
    spec: Mapped[str] = mapped_column(Text)
    description: Mapped[str] = mapped_column(Text)
    created_by: Mapped[str] = mapped_column(String)
    created_at: Mapped[datetime] = mapped_column(DateTime)
    declared_as: Mapped[str | None] = mapped_column(String, nullable=True)
    """What the data is, ``NAME/SPLIT`` (e.g. ``imagenet-1k/val``): runs of it are judged against claims on it."""
    declared_by: Mapped[str | None] = mapped_column(String, nullable=True)
    declared_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    annotates: Mapped[str | None] = mapped_column(String, nullable=True)
    """What its samples carry, comma-separated: ``labels``, ``boxes``, ``masks`` (None: registered before 0006)."""


class ManifestRow(Base):
    """An uploaded manifest, immutable once stored under name@version."""

    __tablename__ = "manifests"
    __table_args__ = (UniqueConstraint("name", "version", name="uq_manifests_name_version"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String, index=True)
    version: Mapped[str] = mapped_column(String)
    text: Mapped[str] = mapped_column(Text)
    sha256: Mapped[str] = mapped_column(String(64))
    uploaded_at: Mapped[datetime] = mapped_column(DateTime)
    uploaded_by: Mapped[str] = mapped_column(String)


class JobRow(Base):
    """A background job (evaluate | pitfalls | bench | diff) and its progress."""

    __tablename__ = "jobs"

    id: Mapped[str] = mapped_column(String, primary_key=True)
    kind: Mapped[str] = mapped_column(String)
    manifest: Mapped[str] = mapped_column(String)
    runtime: Mapped[str | None] = mapped_column(String, nullable=True)
    dataset: Mapped[str | None] = mapped_column(String, nullable=True)
    options: Mapped[dict[str, Any]] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String, index=True)
    progress_done: Mapped[int] = mapped_column(Integer)
    progress_total: Mapped[int | None] = mapped_column(Integer, nullable=True)
    log: Mapped[str] = mapped_column(Text)
    result_ids: Mapped[list[str]] = mapped_column(JSON)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime, index=True)
    started_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    created_by: Mapped[str] = mapped_column(String)


class JobResultRow(Base):
    """The results of one job, stored once per ``idempotency_key``: ``result_ids`` is ``{"run_ids": [...],
    "sweep_ids": [...], "benchmark_ids": [...]}`` (a re-run or re-submitted job with the same key stores nothing)."""

    __tablename__ = "job_results"

    idempotency_key: Mapped[str] = mapped_column(String, primary_key=True)
    kind: Mapped[str] = mapped_column(String)
    result_ids: Mapped[dict[str, list[str]]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(DateTime)


class StackMatrixRow(Base):
    """One ``repliscope stacks`` matrix (the whole StackMatrix as JSON); its runs are ordinary ``runs`` rows."""

    __tablename__ = "stack_matrices"
    __table_args__ = (Index("ix_stack_matrices_model_created", "manifest_name", "created_at"),)

    matrix_id: Mapped[str] = mapped_column(String, primary_key=True)
    created_at: Mapped[datetime] = mapped_column(DateTime, index=True)
    manifest_name: Mapped[str] = mapped_column(String)
    runtime: Mapped[str] = mapped_column(String)
    dataset_identity: Mapped[str] = mapped_column(String)
    result: Mapped[dict[str, Any]] = mapped_column(JSON)


class DiffRow(Base):
    """One stored diff (migration 0005): a task-level, layer-level or pipeline diff as ``repliscope diff --json``
    prints it (``result``), with copies of its identifying fields for listing; ``figure`` holds a PNG the diff
    page shows (a pipeline diff's heatmap panels; NULL otherwise)."""

    __tablename__ = "diffs"
    __table_args__ = (
        Index("ix_diffs_kind_created", "kind", "created_at"),
        Index("ix_diffs_model_created", "manifest_name", "created_at"),
    )

    diff_id: Mapped[str] = mapped_column(String, primary_key=True)
    created_at: Mapped[datetime] = mapped_column(DateTime, index=True)
    kind: Mapped[str] = mapped_column(String)
    """``task_diff`` | ``layer_diff`` | ``pipeline_diff``."""
    manifest_name: Mapped[str] = mapped_column(String)
    a: Mapped[str] = mapped_column(String)
    b: Mapped[str] = mapped_column(String)
    dataset: Mapped[str] = mapped_column(String)
    samples: Mapped[int] = mapped_column(Integer)
    verdict: Mapped[str] = mapped_column(String)
    """pipeline: match / explained / unexplained; layer: passed / failed; task: agree / differ."""
    summary: Mapped[str] = mapped_column(Text)
    created_by: Mapped[str | None] = mapped_column(String, nullable=True)
    result: Mapped[dict[str, Any]] = mapped_column(JSON)
    figure: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)


class RunTagRow(Base):
    """One tag of a run (migration 0009): :mod:`repliscope.store.annotations` checks its charset and length."""

    __tablename__ = "run_tags"
    __table_args__ = (Index("ix_run_tags_tag", "tag"),)

    run_id: Mapped[str] = mapped_column(ForeignKey("runs.run_id", ondelete="CASCADE"), primary_key=True)
    tag: Mapped[str] = mapped_column(String(64), primary_key=True)
    added_by: Mapped[str] = mapped_column(String)
    added_at: Mapped[datetime] = mapped_column(DateTime)


class RunLabelRow(Base):
    """A run's editable labels (migration 0009): its display name (a rename; the record and its result hash stay
    as stored) and its current note, each with who set it and when. Earlier notes are in ``run_audit``."""

    __tablename__ = "run_labels"

    run_id: Mapped[str] = mapped_column(ForeignKey("runs.run_id", ondelete="CASCADE"), primary_key=True)
    display_name: Mapped[str | None] = mapped_column(String(200), nullable=True)
    named_by: Mapped[str | None] = mapped_column(String, nullable=True)
    named_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    note: Mapped[str | None] = mapped_column(Text, nullable=True)
    note_by: Mapped[str | None] = mapped_column(String, nullable=True)
    note_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)


class RunAuditRow(Base):
    """One change to a run's annotations, or its deletion (migration 0009): who (``actor``, through ``via``: cli,
    api or web), when, what (``action``: tag, untag, note, rename, delete), and the values ``before`` / ``after``.
    Not a foreign key: the entry of a deleted run stays, with what was deleted in ``before``."""

    __tablename__ = "run_audit"
    __table_args__ = (Index("ix_run_audit_run_at", "run_id", "at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(DateTime, index=True)
    actor: Mapped[str] = mapped_column(String)
    via: Mapped[str] = mapped_column(String)
    action: Mapped[str] = mapped_column(String)
    run_id: Mapped[str] = mapped_column(String)
    before: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True), nullable=True)
    after: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True), nullable=True)
