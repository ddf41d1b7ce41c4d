"""agents and stacks: ``job_results`` (one row per idempotency key: a job's results are stored exactly once, however
often Dask re-ran it or a client re-submitted it) and ``stack_matrices`` (``repliscope stacks`` results).

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "job_results",
        sa.Column("idempotency_key", sa.String, primary_key=True),
        sa.Column("kind", sa.String, nullable=False),
        sa.Column("result_ids", sa.JSON, nullable=False),
        sa.Column("created_at", sa.DateTime, nullable=False),
    )
    op.create_table(
        "stack_matrices",
        sa.Column("matrix_id", sa.String, primary_key=True),
        sa.Column("created_at", sa.DateTime, nullable=False),
        sa.Column("manifest_name", sa.String, nullable=False),
        sa.Column("runtime", sa.String, nullable=False),
        sa.Column("dataset_identity", sa.String, nullable=False),
        sa.Column("result", sa.JSON, nullable=False),
    )
    op.create_index("ix_stack_matrices_created_at", "stack_matrices", ["created_at"])
    op.create_index("ix_stack_matrices_model_created", "stack_matrices", ["manifest_name", "created_at"])


def downgrade() -> None:
    op.drop_index("ix_stack_matrices_model_created", table_name="stack_matrices")
    op.drop_index("ix_stack_matrices_created_at", table_name="stack_matrices")
    op.drop_table("stack_matrices")
    op.drop_table("job_results")
