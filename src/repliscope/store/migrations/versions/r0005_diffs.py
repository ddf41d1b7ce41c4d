"""diffs: one row per stored ``repliscope diff`` result (task level, layer level, pipeline), with its PNG figure.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "diffs",
        sa.Column("diff_id", sa.String, primary_key=True),
        sa.Column("created_at", sa.DateTime, nullable=False),
        sa.Column("kind", sa.String, nullable=False),
        sa.Column("manifest_name", sa.String, nullable=False),
        sa.Column("a", sa.String, nullable=False),
        sa.Column("b", sa.String, nullable=False),
        sa.Column("dataset", sa.String, nullable=False),
        sa.Column("samples", sa.Integer, nullable=False),
        sa.Column("verdict", sa.String, nullable=False),
        sa.Column("summary", sa.Text, nullable=False),
        sa.Column("created_by", sa.String, nullable=True),
        sa.Column("result", sa.JSON, nullable=False),
        sa.Column("figure", sa.LargeBinary, nullable=True),
    )
    op.create_index("ix_diffs_created_at", "diffs", ["created_at"])
    op.create_index("ix_diffs_kind_created", "diffs", ["kind", "created_at"])
    op.create_index("ix_diffs_model_created", "diffs", ["manifest_name", "created_at"])


def downgrade() -> None:
    op.drop_index("ix_diffs_model_created", table_name="diffs")
    op.drop_index("ix_diffs_kind_created", table_name="diffs")
    op.drop_index("ix_diffs_created_at", table_name="diffs")
    op.drop_table("diffs")
