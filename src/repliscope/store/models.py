"""ORM tables: one ``runs`` row per evaluation record, one ``sample_predictions`` row per sample, one
``benchmarks`` row per benchmark record, one ``traces`` row per stored trace.

``runs.record`` holds the whole record as JSON (minus ``samples``); the other columns are copies of it for
listing and filtering. ``sqlalchemy.JSON`` keeps the schema portable between SQLite and PostgreSQL.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, DateTime, Float, ForeignKey, Integer, LargeBinary, String, Text
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


class SampleRow(Base):
    """One sample's prediction; ``position`` keeps the record's sample order. ``detections``: object detection's
    ``[{"box", "score", "class_id"}, ...]`` (NULL for classification and failed samples; added to stores created
    before it by :func:`repliscope.store.repository.upgrade_schema`)."""

    __tablename__ = "sample_predictions"

    run_id: Mapped[str] = mapped_column(
        ForeignKey("runs.run_id", ondelete="CASCADE"), primary_key=True, index=True
    )
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
