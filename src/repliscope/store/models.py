"""ORM tables: one ``runs`` row per evaluation record, one ``sample_predictions`` row per sample.

``runs.record`` holds the whole record as JSON (minus ``samples``); the other columns are copies of it for
listing and filtering. ``sqlalchemy.JSON`` keeps the schema portable between SQLite and PostgreSQL.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, DateTime, Float, ForeignKey, Integer, String, Text
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
    result_hash: Mapped[str] = mapped_column(String)
    sweep_id: Mapped[str | None] = mapped_column(String, index=True)
    variant: Mapped[str | None] = mapped_column(String)
    record: Mapped[dict[str, Any]] = mapped_column(JSON)


class SampleRow(Base):
    """One sample's prediction; ``position`` keeps the record's sample order."""

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
