"""Alembic revisions of the run store, oldest first: ``r0001_baseline`` (the schema of the release before
migrations), ``r0002_service`` (the service's tables and the run-query columns and indexes),
``r0003_model_runtime_index`` (the index for runs filtered by model and runtime)."""
