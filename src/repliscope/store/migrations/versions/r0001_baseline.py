"""baseline: the store schema of the release before migrations (runs, sample_predictions, sweeps, benchmarks,
traces, incl. the detection columns ``sample_predictions.detections`` and ``runs.ap``).

Revision ID: 0001
Revises:
"""

from __future__ import annotations

from alembic import op
from sqlalchemy import (
    JSON,
    Column,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
)

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

BASELINE = MetaData()
"""The tables exactly as ``Base.metadata.create_all`` of the release before migrations created them."""

Table(
    "runs",
    BASELINE,
    Column("run_id", String, primary_key=True),
    Column("created_at", DateTime, nullable=False, index=True),
    Column("kind", String, nullable=False, index=True),
    Column("manifest_name", String, nullable=False),
    Column("manifest_version", String, nullable=False),
    Column("manifest_sha256", String, nullable=False),
    Column("runtime", String, nullable=False),
    Column("dataset_identity", String, nullable=False, index=True),
    Column("dataset_name", String, nullable=False),
    Column("num_samples", Integer, nullable=False),
    Column("num_failed", Integer, nullable=False),
    Column("top1", Float, nullable=True),
    Column("top5", Float, nullable=True),
    Column("ap", Float, nullable=True),
    Column("result_hash", String, nullable=False),
    Column("sweep_id", String, nullable=True, index=True),
    Column("variant", String, nullable=True),
    Column("record", JSON, nullable=False),
)
Table(
    "sample_predictions",
    BASELINE,
    Column("run_id", String, ForeignKey("runs.run_id", ondelete="CASCADE"), primary_key=True, index=True),
    Column("position", Integer, primary_key=True),
    Column("sample_id", Text, nullable=False),
    Column("label", Integer, nullable=True),
    Column("topk_indices", JSON, nullable=False),
    Column("topk_probs", JSON, nullable=False),
    Column("error", Text, nullable=True),
    Column("detections", JSON(none_as_null=True), nullable=True),
)
Table(
    "sweeps",
    BASELINE,
    Column("sweep_id", String, primary_key=True),
    Column("created_at", DateTime, nullable=False, index=True),
    Column("manifest_name", String, nullable=False),
    Column("runtime", String, nullable=False),
    Column("dataset_identity", String, nullable=False, index=True),
    Column("num_variants", Integer, nullable=False),
    Column("result", JSON, nullable=False),
)
Table(
    "benchmarks",
    BASELINE,
    Column("benchmark_id", String, primary_key=True),
    Column("created_at", DateTime, nullable=False, index=True),
    Column("manifest_name", String, nullable=False),
    Column("runtime", String, nullable=False),
    Column("scenario", String, nullable=False, index=True),
    Column("threads", Integer, nullable=True),
    Column("queries", Integer, nullable=False),
    Column("p90_ms", Float, nullable=True),
    Column("throughput", Float, nullable=False),
    Column("matrix_id", String, nullable=True, index=True),
    Column("record", JSON, nullable=False),
    Column("latencies", LargeBinary, nullable=False),
)
Table(
    "traces",
    BASELINE,
    Column("run_id", String, primary_key=True),
    Column("created_at", DateTime, nullable=False, index=True),
    Column("level", String, nullable=False),
    Column("trace", LargeBinary, nullable=False),
)

ADDED_COLUMNS = (("sample_predictions", "detections", "JSON"), ("runs", "ap", "FLOAT"))
"""Columns releases before migrations added on open; a pre-migration store may lack them (added before it is
stamped at this revision)."""


def upgrade() -> None:
    BASELINE.create_all(op.get_bind())


def downgrade() -> None:
    BASELINE.drop_all(op.get_bind())
