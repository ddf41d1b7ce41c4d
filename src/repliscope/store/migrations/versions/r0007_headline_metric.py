"""runs gain the task's headline metric with its 95 % interval: ``metric_name`` (the first of the task's
``metric_specs``: top1, AP, mIoU), ``metric_value``, ``metric_low``, ``metric_high`` (filled from each stored
record), so the runs list and its downloads show every task's metric and interval without reading records.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

_COLUMNS = (
    ("metric_name", sa.String),
    ("metric_value", sa.Float),
    ("metric_low", sa.Float),
    ("metric_high", sa.Float),
)
_BATCH = 2000


def upgrade() -> None:
    from repliscope.store.runs import headline_of_json

    bind = op.get_bind()
    present = [c["name"] for c in sa.inspect(bind).get_columns("runs")]
    missing = [(name, kind) for name, kind in _COLUMNS if name not in present]
    if bind.dialect.name == "sqlite" and missing:
        # the large record JSON stays the last column (see 0002); foreign keys are off during migrations
        order = [c for c in present if c != "record"] + [name for name, _ in missing] + ["record"]
        with op.batch_alter_table("runs", recreate="always", partial_reordering=[tuple(order)]) as batch:
            for name, kind in missing:
                batch.add_column(sa.Column(name, kind, nullable=True))
    else:
        for name, kind in missing:
            op.add_column("runs", sa.Column(name, kind, nullable=True))
    runs = sa.table(
        "runs",
        sa.column("run_id", sa.String),
        sa.column("record", sa.JSON),
        *(sa.column(name, kind) for name, kind in _COLUMNS),
    )
    last = ""
    while True:  # fill the new columns from the stored records, in batches of run ids
        rows = bind.execute(
            sa.select(runs.c.run_id, runs.c.record).where(runs.c.run_id > last).order_by(runs.c.run_id).limit(_BATCH)
        ).all()
        if not rows:
            break
        values: list[dict[str, Any]] = []
        for run_id, record in rows:
            metric, value, low, high = headline_of_json(record or {})
            values.append({"rid": run_id, "n": metric, "v": value, "lo": low, "hi": high})
        bind.execute(
            sa.update(runs)
            .where(runs.c.run_id == sa.bindparam("rid"))
            .values(
                metric_name=sa.bindparam("n"),
                metric_value=sa.bindparam("v"),
                metric_low=sa.bindparam("lo"),
                metric_high=sa.bindparam("hi"),
            ),
            values,
        )
        last = rows[-1][0]


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        for name, _ in _COLUMNS:
            batch.drop_column(name)
