"""service: tokens, datasets_registry, manifests, jobs; runs gain framework_version, cpu_model and verdict
(filled from each stored record) and the run-query indexes.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

_RUN_COLUMNS = ("framework_version", "cpu_model", "verdict")
_RUN_INDEXES = (
    ("ix_runs_model_created", ("manifest_name", "created_at")),
    ("ix_runs_manifest", ("manifest_name", "manifest_version", "created_at")),
    ("ix_runs_runtime_created", ("runtime", "created_at")),
    ("ix_runs_runtime_framework", ("runtime", "framework_version", "created_at")),
    ("ix_runs_dataset_created", ("dataset_name", "created_at")),
    ("ix_runs_dataset_runtime", ("dataset_name", "runtime", "created_at")),
    ("ix_runs_kind_created", ("kind", "created_at")),
    ("ix_runs_verdict_created", ("verdict", "created_at")),
    ("ix_runs_framework_version", ("framework_version", "created_at")),
    ("ix_runs_cpu_model", ("cpu_model", "created_at")),
)
_ORDER = (
    "run_id",
    "created_at",
    "kind",
    "manifest_name",
    "manifest_version",
    "manifest_sha256",
    "runtime",
    "dataset_identity",
    "dataset_name",
    "num_samples",
    "num_failed",
    "top1",
    "top5",
    "ap",
    "result_hash",
    "sweep_id",
    "variant",
    "framework_version",
    "cpu_model",
    "verdict",
    "record",
)
"""``runs`` columns in order: on SQLite the table is rebuilt so the large ``record`` JSON comes last (columns
after it would be read from its overflow pages on every filtered query)."""
_BATCH = 2000

NEW = sa.MetaData()
sa.Table(
    "tokens",
    NEW,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("name", sa.String, nullable=False),
    sa.Column("role", sa.String, nullable=False),
    sa.Column("token_sha256", sa.String(64), nullable=False, unique=True),
    sa.Column("created_at", sa.DateTime, nullable=False),
    sa.Column("revoked_at", sa.DateTime, nullable=True),
)
sa.Table(
    "datasets_registry",
    NEW,
    sa.Column("name", sa.String, primary_key=True),
    sa.Column("spec", sa.Text, nullable=False),
    sa.Column("description", sa.Text, nullable=False),
    sa.Column("created_by", sa.String, nullable=False),
    sa.Column("created_at", sa.DateTime, nullable=False),
)
sa.Table(
    "manifests",
    NEW,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("name", sa.String, nullable=False, index=True),
    sa.Column("version", sa.String, nullable=False),
    sa.Column("text", sa.Text, nullable=False),
    sa.Column("sha256", sa.String(64), nullable=False),
    sa.Column("uploaded_at", sa.DateTime, nullable=False),
    sa.Column("uploaded_by", sa.String, nullable=False),
    sa.UniqueConstraint("name", "version", name="uq_manifests_name_version"),
)
sa.Table(
    "jobs",
    NEW,
    sa.Column("id", sa.String, primary_key=True),
    sa.Column("kind", sa.String, nullable=False),
    sa.Column("manifest", sa.String, nullable=False),
    sa.Column("runtime", sa.String, nullable=True),
    sa.Column("dataset", sa.String, nullable=True),
    sa.Column("options", sa.JSON, nullable=False),
    sa.Column("status", sa.String, nullable=False, index=True),
    sa.Column("progress_done", sa.Integer, nullable=False),
    sa.Column("progress_total", sa.Integer, nullable=True),
    sa.Column("log", sa.Text, nullable=False),
    sa.Column("result_ids", sa.JSON, nullable=False),
    sa.Column("error", sa.Text, nullable=True),
    sa.Column("created_at", sa.DateTime, nullable=False, index=True),
    sa.Column("started_at", sa.DateTime, nullable=True),
    sa.Column("finished_at", sa.DateTime, nullable=True),
    sa.Column("created_by", sa.String, nullable=False),
)


def run_verdict(claims: list[dict[str, Any]]) -> str | None:
    """inconsistent if any claim is, else consistent if any is, else not comparable; None without claims."""
    verdicts = {c.get("verdict") for c in claims}
    for v in ("inconsistent", "consistent", "not comparable"):
        if v in verdicts:
            return v
    return None


def upgrade() -> None:
    bind = op.get_bind()
    present = [c["name"] for c in sa.inspect(bind).get_columns("runs")]
    missing = [name for name in _RUN_COLUMNS if name not in present]
    if bind.dialect.name == "sqlite" and (missing or present[-1] != "record"):
        # foreign keys are off during migrations (migrate.upgrade_engine), so the copy keeps sample rows
        with op.batch_alter_table("runs", recreate="always", partial_reordering=[_ORDER]) as batch:
            for name in missing:
                batch.add_column(sa.Column(name, sa.String, nullable=True))
    else:
        for name in missing:
            op.add_column("runs", sa.Column(name, sa.String, nullable=True))
    runs = sa.table(
        "runs",
        sa.column("run_id", sa.String),
        sa.column("record", sa.JSON),
        sa.column("framework_version", sa.String),
        sa.column("cpu_model", sa.String),
        sa.column("verdict", sa.String),
    )
    last = ""
    while True:  # fill the new columns from the stored records, in batches of run ids
        rows = bind.execute(
            sa.select(runs.c.run_id, runs.c.record).where(runs.c.run_id > last).order_by(runs.c.run_id).limit(_BATCH)
        ).all()
        if not rows:
            break
        values = []
        for run_id, record in rows:
            record = record or {}
            fv = (record.get("runtime") or {}).get("framework_version")
            cpu = (record.get("hardware") or {}).get("cpu_model")
            values.append(
                {
                    "rid": run_id,
                    "fv": None if fv is None else str(fv),
                    "cpu": None if cpu is None else str(cpu),
                    "verdict": run_verdict(record.get("claims") or []),
                }
            )
        bind.execute(
            sa.update(runs)
            .where(runs.c.run_id == sa.bindparam("rid"))
            .values(
                framework_version=sa.bindparam("fv"), cpu_model=sa.bindparam("cpu"), verdict=sa.bindparam("verdict")
            ),
            values,
        )
        last = rows[-1][0]
    indexes = {i["name"] for i in sa.inspect(bind).get_indexes("runs")}
    for name, columns in _RUN_INDEXES:
        if name not in indexes:
            op.create_index(name, "runs", list(columns))
    NEW.create_all(bind, checkfirst=True)


def downgrade() -> None:
    NEW.drop_all(op.get_bind())
    for name, _ in _RUN_INDEXES:
        op.drop_index(name, table_name="runs")
    with op.batch_alter_table("runs") as batch:
        for name in _RUN_COLUMNS:
            batch.drop_column(name)
