"""Persist evaluation records (SQLite by default, any SQLAlchemy URL) and compare two runs."""

from repliscope.store.compare import MetricDelta, RunComparison, Top1Flip, compare_runs
from repliscope.store.repository import RunQuery, RunStore, RunSummary, default_url

__all__ = [
    "MetricDelta",
    "RunComparison",
    "RunQuery",
    "RunStore",
    "RunSummary",
    "Top1Flip",
    "compare_runs",
    "default_url",
]
