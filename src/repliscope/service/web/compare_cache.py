"""Compare results computed once: the paired statistics of two stored runs, and the figures of an N-run compare.

Two runs' comparison (:func:`repliscope.store.compare.compare_runs`) re-scores nothing when both runs evaluated the
same samples (the stored metrics are the paired ones), but its task's paired statistics are a bootstrap (detection:
ΔAP with its paired interval, ~1 s for 158 COCO images) and the N-run page draws a chart and, for segmentation,
decodes every kept mask. A stored run is immutable, so each is a function of the runs' ``(run_id, result_hash)``
and of the code: they are kept in the web pages' LRU (:data:`repliscope.service.web.chart_cache.CHARTS`, keyed with
the renderer version), shared by the compare page and ``GET /api/v1/runs/compare``.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from repliscope.service.web import chart_cache
from repliscope.service.web.chart_cache import ChartCache, renderer_version

if TYPE_CHECKING:
    from repliscope.evaluation.record import EvaluationRecord
    from repliscope.store.compare import RunComparison

T = TypeVar("T")


def runs_key(records: Sequence[EvaluationRecord]) -> tuple[str, ...]:
    """What a derived result of ``records`` depends on: each run's id and result hash, in order."""
    return tuple(f"{r.run_id}:{r.result_hash}" for r in records)


def derived(
    what: str, records: Sequence[EvaluationRecord], compute: Callable[[], T], cache: ChartCache | None = None
) -> T:
    """``compute()`` for ``records``, computed once per (``what``, :func:`runs_key`, renderer version)."""
    key: tuple[Any, ...] = (what, runs_key(records), "", renderer_version())
    return (cache or chart_cache.CHARTS).get(key, compute)


def comparison_of(
    a: EvaluationRecord,
    b: EvaluationRecord,
    cache: ChartCache | None = None,
    full: Callable[[EvaluationRecord], EvaluationRecord] | None = None,
) -> RunComparison:
    """:func:`~repliscope.store.compare.compare_runs` of ``b`` against ``a``, computed once per pair of stored
    runs. ``full``: the whole record of a record read without its samples (``RunStore.get``), called only when
    the comparison is computed; None when ``a`` and ``b`` are whole. MixedTasksError (the API's 422) for runs of
    different tasks, before any record is read whole."""
    from repliscope.store.compare import check_one_task, compare_runs

    check_one_task([a, b])

    def compute() -> RunComparison:
        return compare_runs(full(a), full(b)) if full is not None else compare_runs(a, b)

    return derived("compare", [a, b], compute, cache)


class _Heads:
    """The last :attr:`size` runs read without their samples, by (store URL, id as asked): a 12-run compare
    viewed again reads no record (each is 10-100 ms of JSON, a detection run's ground truth included). A stored
    run is immutable until it is deleted, and another process (``repliscope runs delete``) cannot tell this
    cache: each hit is checked against the runs table (one indexed row: the id's result hash and manifest
    sha256): one stored again with other contents is read anew (a run deleted since is kept: its callers ask
    :meth:`~repliscope.store.annotations.AnnotationStore.ensure_stored` and answer "unknown run id (deleted)")."""

    def __init__(self, size: int = 64) -> None:
        self.size = size
        self.items: OrderedDict[tuple[str, str], EvaluationRecord] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, store: Any, run_id: str) -> EvaluationRecord:
        """The run ``run_id`` (full id or unique prefix) without its samples (StoreError when unknown)."""
        key = (store.url, run_id)
        with self.lock:
            kept = self.items.get(key)
        if kept is not None and stored_state(store, kept) != "changed":
            # "gone": every caller asks the store (``AnnotationStore.ensure_stored``) and answers "(deleted)"
            with self.lock:
                if key in self.items:
                    self.items.move_to_end(key)
            return kept
        record: EvaluationRecord = store.get_without_samples(run_id)[0]
        with self.lock:
            self.items[key] = record
            while len(self.items) > self.size:
                self.items.popitem(last=False)
        return record


def stored_state(store: Any, record: EvaluationRecord) -> str:
    """``same`` when the runs table holds ``record`` (its id with its result hash and manifest sha256), ``gone``
    when its id is no longer stored (deleted), ``changed`` when another record was stored again under its id: what
    a cache of records by id asks on a hit (a run deleted by another process is told no cache of this server)."""
    stored = store.runs.identity(record.run_id)
    if stored is None:
        return "gone"
    return "same" if stored == (record.result_hash, record.manifest.sha256) else "changed"


HEADS = _Heads()
"""The process's recently read runs without their samples (the compare pages and ``GET /runs/compare``)."""
