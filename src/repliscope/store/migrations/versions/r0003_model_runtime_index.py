"""runs: index (manifest_name, runtime, created_at) for the runs query filtered by model and runtime.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_runs_model_runtime", "runs", ["manifest_name", "runtime", "created_at"])


def downgrade() -> None:
    op.drop_index("ix_runs_model_runtime", table_name="runs")
