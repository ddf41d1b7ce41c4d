"""Charts of the web pages, drawn once: a bounded in-memory LRU of rendered report views.

A run's page embeds matplotlib charts (claim, latency, per-layer time; detection overlays) as PNG data URIs;
drawing them takes 0.5-2 s for a 1000-sample run, and redrawing them on every view made run pages slow. Runs,
benchmarks and sweeps are immutable once stored, so the report view built from one (its charts and the tables
beside them) is a function of the stored object and of the code that draws it. It is cached under

    (kind, store URL, object id, renderer version[, trace digest, result hash, created at, manifest sha256])

- the **renderer version** (:func:`renderer_version`) hashes the source of :mod:`repliscope.report` with the
  repliscope and matplotlib versions: a changed chart or template-facing view invalidates every entry (entries of
  another version are dropped at the next lookup);
- a run's **trace digest**: a run's trace may be stored (or replaced) after the run, and its per-layer chart is
  part of the page;
- a run's **result hash, creation time and manifest sha256**: a run id names one record only until the run is
  deleted; a record stored again under it (``runs import`` keeps ids) is drawn anew, even when another process
  deleted the first (a deletion through this server also drops the run's entries: :meth:`ChartCache.forget`).

The cache holds at most ``max_entries`` views and ``max_bytes`` of embedded images (the least recently used go
first; a view larger than ``max_bytes`` is returned without being kept). Concurrent first views of one object
draw it once (the others wait for it). Cached views are shared: callers treat them as read-only (copy with
:func:`dataclasses.replace` to change one, as :func:`repliscope.service.web.redact.redact_view` does).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from repliscope.evaluation.record import EvaluationRecord
    from repliscope.pitfalls.result import SweepResult
    from repliscope.report.view import FigureView, ReportView
    from repliscope.store.repository import RunStore

T = TypeVar("T")

DEFAULT_MAX_ENTRIES = 256
DEFAULT_MAX_BYTES = 96 << 20
"""96 MiB of embedded images (a 1000-sample classification run's page holds ~100 KiB)."""


@functools.cache
def renderer_version() -> str:
    """``<repliscope>+mpl<matplotlib>+<sha256 of repliscope/report/*.py, 12 hex>``: what the cached charts were
    drawn with (any change to the report code makes a new version)."""
    import repliscope.report
    from repliscope import __version__

    digest = hashlib.sha256()
    for path in sorted(Path(repliscope.report.__file__).parent.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    try:
        mpl = metadata.version("matplotlib")
    except metadata.PackageNotFoundError:
        mpl = "none"
    return f"{__version__}+mpl{mpl}+{digest.hexdigest()[:12]}"


def image_bytes(value: Any) -> int:
    """Characters of the image ``src`` strings and data URIs (and bytes of PNGs) held in ``value``: dataclasses,
    lists, tuples and dicts are walked; what a cached view costs in memory, to a good approximation."""
    from repliscope.report.view import Image

    if isinstance(value, Image):
        return len(value.src)
    if isinstance(value, str | bytes):
        return len(value) if value[:5] in ("data:", b"\x89PNG") else 0
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return sum(image_bytes(getattr(value, f.name)) for f in dataclasses.fields(value))
    if isinstance(value, list | tuple):
        return sum(image_bytes(v) for v in value)
    if isinstance(value, dict):
        return sum(image_bytes(v) for v in value.values())
    return 0


@dataclasses.dataclass
class CacheStats:
    """``renders``: views drawn (misses); ``hits``: views served from the cache; ``evictions``: entries dropped
    for room; ``entries`` / ``bytes``: held now."""

    renders: int = 0
    hits: int = 0
    evictions: int = 0
    entries: int = 0
    bytes: int = 0


class ChartCache:
    """A thread-safe LRU of rendered values keyed by a tuple whose 4th item is the renderer version (see the
    module). ``max_entries`` >= 1 values and ``max_bytes`` of images (:func:`image_bytes`) at most."""

    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        if max_entries < 1 or max_bytes < 1:
            raise ValueError(f"max_entries and max_bytes must be >= 1 (got {max_entries}, {max_bytes})")
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._entries: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._bytes = 0
        self._version: str | None = None
        self._lock = threading.Lock()
        self._drawing: dict[Hashable, threading.Lock] = {}
        self._stats = CacheStats()

    @property
    def stats(self) -> CacheStats:
        with self._lock:
            return dataclasses.replace(self._stats, entries=len(self._entries), bytes=self._bytes)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0

    def forget(self, drop: Callable[[tuple[Hashable, ...]], bool]) -> int:
        """Drop every entry whose key ``drop`` accepts (a deleted run's views): how many were dropped."""
        with self._lock:
            keys = [k for k in self._entries if drop(k)]  # type: ignore[arg-type]
            for key in keys:
                _, size = self._entries.pop(key)
                self._bytes -= size
            return len(keys)

    def get(self, key: tuple[Hashable, ...], render: Callable[[], T]) -> T:
        """The value cached under ``key``, else ``render()`` (called once however many threads ask at once),
        kept when it fits."""
        found, value = self._lookup(key)
        if found:
            return value
        with self._lock:
            drawing = self._drawing.setdefault(key, threading.Lock())
        try:
            with drawing:
                found, value = self._lookup(key)  # drawn by another thread while this one waited
                if found:
                    return value
                value = render()
                self._keep(key, value, image_bytes(value))
                return value
        finally:
            with self._lock:
                self._drawing.pop(key, None)

    def _lookup(self, key: tuple[Hashable, ...]) -> tuple[bool, Any]:
        with self._lock:
            version = key[3] if len(key) > 3 else None
            if version != self._version:  # the code that draws changed: nothing cached is current
                self._entries.clear()
                self._bytes = 0
                self._version = version  # type: ignore[assignment]
            entry = self._entries.get(key)
            if entry is None:
                return False, None
            self._entries.move_to_end(key)
            self._stats.hits += 1
            return True, entry[0]

    def _keep(self, key: Hashable, value: Any, size: int) -> None:
        with self._lock:
            self._stats.renders += 1
            if size > self.max_bytes:
                return
            while self._entries and (len(self._entries) >= self.max_entries or self._bytes + size > self.max_bytes):
                _, (_, dropped) = self._entries.popitem(last=False)
                self._bytes -= dropped
                self._stats.evictions += 1
            self._entries[key] = (value, size)
            self._bytes += size


CHARTS = ChartCache()
"""The process's cache of the web pages' rendered views."""


def trace_digest(trace: dict[str, Any] | None) -> str:
    """sha256 (16 hex) of a stored Chrome trace's canonical JSON; ``none`` without a trace."""
    if trace is None:
        return "none"
    text = json.dumps(trace, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def run_view(store: RunStore, record: EvaluationRecord, cache: ChartCache | None = None) -> ReportView:
    """The report view of an evaluation run with its trace's per-layer chart (drawn once per run, trace and
    renderer version)."""
    trace = store.load_trace(record.run_id)

    def render() -> ReportView:
        from repliscope.report.build import build_run_view

        extra = None
        if trace is not None:
            from repliscope.report.trace_sections import trace_figures

            extra = trace_figures(trace)
        return build_run_view(record, extra_figures=extra)

    key = (
        "run",
        store.url,
        record.run_id,
        renderer_version(),
        trace_digest(trace),
        record.result_hash,
        record.created_at.isoformat(),
        record.manifest.sha256,
    )
    return dataclasses.replace((cache or CHARTS).get(key, render))


def bench_view(store: RunStore, record: Any, cache: ChartCache | None = None) -> ReportView:
    """The report view of one benchmark record (its latency ECDF drawn once per benchmark and renderer version)."""

    def render() -> ReportView:
        from repliscope.report.build import build_benchmark_view

        return build_benchmark_view([record])

    key = ("bench", store.url, record.benchmark_id, renderer_version())
    return dataclasses.replace((cache or CHARTS).get(key, render))


def sweep_deltas(store: RunStore, sweep: SweepResult, cache: ChartCache | None = None) -> FigureView | None:
    """A pitfall sweep's Δ top-1 chart (drawn once per sweep and renderer version)."""

    def render() -> FigureView | None:
        from repliscope.report import pitfall_sections as ps
        from repliscope.report.sections import embed_sink

        return ps.delta_figure(sweep, embed_sink)[0]

    key = ("sweep-deltas", store.url, sweep.sweep_id, renderer_version())
    return (cache or CHARTS).get(key, render)
