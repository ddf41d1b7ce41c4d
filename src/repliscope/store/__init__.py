"""Persist evaluation records (SQLite by default, any SQLAlchemy URL) and compare two runs.

:class:`RunStore` is the facade; behind it one :class:`~repliscope.store.database.Database` and its per-domain
stores (:mod:`repliscope.store.repository` lists them); :mod:`repliscope.store.errors` the errors they raise."""

from repliscope.store.compare import MetricDelta, RunComparison, Top1Flip, compare_runs
from repliscope.store.database import Database
from repliscope.store.repository import RunQuery, RunStore, RunSummary, default_url

__all__ = [
    "Database",
    "MetricDelta",
    "RunComparison",
    "RunQuery",
    "RunStore",
    "RunSummary",
    "Top1Flip",
    "compare_runs",
    "default_url",
]
