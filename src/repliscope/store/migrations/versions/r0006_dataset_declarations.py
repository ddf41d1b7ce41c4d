"""dataset declarations: a registered dataset says what its data is (``declared_as`` NAME/SPLIT, e.g.
``imagenet-1k/val``, set by an admin: ``declared_by``, ``declared_at``) and what its samples annotate
(``annotates``: ``labels``, ``boxes`` or ``masks``, comma-separated; found when it is registered).

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("datasets_registry") as batch:
        batch.add_column(sa.Column("declared_as", sa.String, nullable=True))
        batch.add_column(sa.Column("declared_by", sa.String, nullable=True))
        batch.add_column(sa.Column("declared_at", sa.DateTime, nullable=True))
        batch.add_column(sa.Column("annotates", sa.String, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("datasets_registry") as batch:
        batch.drop_column("annotates")
        batch.drop_column("declared_at")
        batch.drop_column("declared_by")
        batch.drop_column("declared_as")
