"""Alembic ``env.py``: migrations run on the connection :mod:`repliscope.store.migrate` passes in
``config.attributes["connection"]`` (there is no alembic.ini and no URL here)."""

from __future__ import annotations

from alembic import context

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=None, transaction_per_migration=False)
with context.begin_transaction():
    context.run_migrations()
