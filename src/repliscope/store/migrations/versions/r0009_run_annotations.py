"""run annotations: ``run_tags`` (a run's tags, who added each and when), ``run_labels`` (a run's display name and
its current note, who set each and when) and ``run_audit`` (every tag, untag, note, rename and delete: who, when,
through what, before and after; the entries of a deleted run stay). The records and their result hashes are not
touched: a rename is a display name beside the record (:mod:`repliscope.store.annotations`).

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "run_tags",
        sa.Column("run_id", sa.String, sa.ForeignKey("runs.run_id", ondelete="CASCADE"), primary_key=True),
        sa.Column("tag", sa.String(64), primary_key=True),
        sa.Column("added_by", sa.String, nullable=False),
        sa.Column("added_at", sa.DateTime, nullable=False),
    )
    op.create_index("ix_run_tags_tag", "run_tags", ["tag"])
    op.create_table(
        "run_labels",
        sa.Column("run_id", sa.String, sa.ForeignKey("runs.run_id", ondelete="CASCADE"), primary_key=True),
        sa.Column("display_name", sa.String(200), nullable=True),
        sa.Column("named_by", sa.String, nullable=True),
        sa.Column("named_at", sa.DateTime, nullable=True),
        sa.Column("note", sa.Text, nullable=True),
        sa.Column("note_by", sa.String, nullable=True),
        sa.Column("note_at", sa.DateTime, nullable=True),
    )
    op.create_table(
        "run_audit",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("at", sa.DateTime, nullable=False),
        sa.Column("actor", sa.String, nullable=False),
        sa.Column("via", sa.String, nullable=False),
        sa.Column("action", sa.String, nullable=False),
        sa.Column("run_id", sa.String, nullable=False),
        sa.Column("before", sa.JSON, nullable=True),
        sa.Column("after", sa.JSON, nullable=True),
    )
    op.create_index("ix_run_audit_at", "run_audit", ["at"])
    op.create_index("ix_run_audit_run_at", "run_audit", ["run_id", "at"])


def downgrade() -> None:
    op.drop_index("ix_run_audit_run_at", table_name="run_audit")
    op.drop_index("ix_run_audit_at", table_name="run_audit")
    op.drop_table("run_audit")
    op.drop_table("run_labels")
    op.drop_index("ix_run_tags_tag", table_name="run_tags")
    op.drop_table("run_tags")
