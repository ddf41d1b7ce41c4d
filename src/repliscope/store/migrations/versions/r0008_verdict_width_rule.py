"""runs.verdict follows the interval-width rule (``repliscope.evaluation.claims.shown_verdict``): a run stored
before the rule whose claim says ``consistent`` inside an interval wider than ±2 pt is listed, filtered and compared
as ``not comparable``, as every page already shows it. The record's JSON is left as it was judged.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

_BATCH = 2000


def upgrade() -> None:
    from repliscope.evaluation.claims import shown_verdict
    from repliscope.store.runs import run_verdict

    bind = op.get_bind()
    runs = sa.table(
        "runs",
        sa.column("run_id", sa.String),
        sa.column("record", sa.JSON),
        sa.column("verdict", sa.String),
    )
    last = ""
    while True:  # in batches of run ids; only the runs whose verdict changes are written
        rows = bind.execute(
            sa.select(runs.c.run_id, runs.c.record, runs.c.verdict)
            .where(runs.c.run_id > last)
            .order_by(runs.c.run_id)
            .limit(_BATCH)
        ).all()
        if not rows:
            break
        values: list[dict[str, Any]] = []
        for run_id, record, stored in rows:
            claims = (record or {}).get("claims") or []
            verdict = run_verdict([shown_verdict(c)[0] for c in claims])
            if verdict != stored:
                values.append({"rid": run_id, "v": verdict})
        if values:
            bind.execute(
                sa.update(runs).where(runs.c.run_id == sa.bindparam("rid")).values(verdict=sa.bindparam("v")), values
            )
        last = rows[-1][0]


def downgrade() -> None:
    """The old verdicts are not kept: a downgrade leaves the rule's verdicts (the records are unchanged)."""
