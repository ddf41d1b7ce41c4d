"""What a stored result has, as files: ``/runs/{id}/artifacts`` lists a run's (its HTML and Markdown report, its
samples as CSV and JSON, its evaluation record as JSON, its stored trace as Chrome / Perfetto JSON and as OTLP/JSON,
and for a run of a pitfall sweep the sweep's report, result and trace), a benchmark's (its record, its trace) and
``/diffs/{id}/artifacts`` a diff's (its result, its figure, its Markdown report); ``.../artifacts/{name}`` serves
one, inline (view) or with ``?download=1`` as an attachment.

Every artifact is produced from the store (the record, the trace, the diff rows), never read from a path: a name is
one of :data:`ARTIFACTS`' keys the object has (anything else, ``..`` or an encoded slash included, is a 404), and no
URL or page names a file of the server's disk. Below the role admin, absolute server paths inside an artifact read
as on the run's page (:func:`repliscope.service.redaction.hide_paths_in`). Responses carry their media type,
``Content-Disposition`` (``inline`` or ``attachment`` with a file name made of the object's id) and
``X-Content-Type-Options: nosniff``; an HTML report is served sandboxed (its own Content-Security-Policy: no script,
no request, images from data: URLs only). Role viewer (signed in)."""

from __future__ import annotations

import functools
import json
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from repliscope.errors import StoreError
from repliscope.service.web import page_kit as kit
from repliscope.service.web.page_kit import (
    SignedIn,
)

router = APIRouter(include_in_schema=False)

MAX_ID = 100
"""A longer id is no stored object's: 404 before the store is asked."""
REPORT_CSP = "sandbox; default-src 'none'; img-src data:; style-src 'unsafe-inline'; frame-ancestors 'none'"
"""A served HTML report runs nothing and fetches nothing (its charts are data: URLs)."""
_ID = re.compile(r"[A-Za-z0-9_.:@+-]{1,100}")


@dataclass(frozen=True)
class Kind:
    """One kind of artifact: its label, media type and whether a browser shows it (a view link)."""

    label: str
    media_type: str
    viewable: bool


ARTIFACTS: dict[str, Kind] = {
    "report.html": Kind("Report (HTML, self-contained)", "text/html; charset=utf-8", True),
    "report.md": Kind("Report (Markdown, figures embedded)", "text/markdown; charset=utf-8", False),
    "samples.csv": Kind("Samples (CSV: one row per sample)", "text/csv; charset=utf-8", False),
    "samples.json": Kind("Samples (JSON: as the record stores them)", "application/json", True),
    "record.json": Kind("Evaluation record (JSON)", "application/json", True),
    "benchmark.json": Kind("Benchmark record (JSON)", "application/json", True),
    "trace.json": Kind("Trace (Chrome / Perfetto JSON)", "application/json", True),
    "trace.otlp.json": Kind("Trace (OTLP/JSON: Jaeger, Tempo, an OpenTelemetry Collector)", "application/json", True),
    "sweep-report.html": Kind("Sweep report (HTML: pitfall table, visual testing)", "text/html; charset=utf-8", True),
    "sweep.json": Kind("Sweep result (JSON)", "application/json", True),
    "sweep-trace.json": Kind("Sweep trace (Chrome / Perfetto JSON)", "application/json", True),
    "sweep-trace.otlp.json": Kind("Sweep trace (OTLP/JSON)", "application/json", True),
    "diff.json": Kind("Diff result (JSON)", "application/json", True),
    "diff-report.md": Kind("Diff report (Markdown, figure embedded)", "text/markdown; charset=utf-8", False),
    "figure.png": Kind("Diff figure (PNG)", "image/png", True),
}
"""Every artifact name a URL may hold; an object has some of them (:func:`run_artifacts`, :func:`diff_artifacts`)."""


@dataclass(frozen=True)
class Artifact:
    """One artifact of an object as its page lists it."""

    name: str
    label: str
    media_type: str
    size: int | None
    """None: not built within :data:`KEPT_SECONDS` (the listing builds nothing)"""
    viewable: bool

    @property
    def size_text(self) -> str:
        """``812 B``, ``14.2 KiB``, ``1.31 MiB``; ``made when opened`` before it was built."""
        if self.size is None:
            return "made when opened"
        if self.size < 1024:
            return f"{self.size} B"
        if self.size < 1024 * 1024:
            return f"{self.size / 1024:.1f} KiB"
        return f"{self.size / (1024 * 1024):.2f} MiB"


Builder = Callable[[], bytes]


@dataclass(frozen=True)
class Target:
    """An object whose artifacts are listed: what it is (``run``, ``benchmark``, ``diff``), its full id, its page,
    its artifacts' builders by name (each builds the bytes from the store), in the order they are listed."""

    what: str
    object_id: str
    page: str
    base: str
    builders: dict[str, Builder]


# --- what an object has ------------------------------------------------------------------------------------


def _json(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, indent=2).encode()


def run_artifacts(store: Any, record: Any, roots: Any) -> dict[str, Builder]:
    """A run's artifacts: its reports, samples, record, its trace when one is stored, its sweep's report and
    result when it belongs to a stored sweep. ``roots``: the caller's path roots (None: an admin, as stored)."""
    from repliscope.service.redaction import hide_paths_in

    run_id = record.run_id

    @functools.cache
    def view() -> Any:  # the report's view, built once for its HTML and its Markdown
        from repliscope.report.build import build_run_view

        return _redacted(build_run_view(record, _figures(store, run_id)), roots)

    def report_html() -> bytes:
        from repliscope.report.html import render_view_html

        return render_view_html(view()).encode()

    def report_md() -> bytes:
        from repliscope.report.markdown import render_view_markdown

        return render_view_markdown(view()).encode()

    def samples_csv() -> bytes:
        from repliscope.report.csv_safe import csv_lines
        from repliscope.service.routers.runs import SAMPLE_COLUMNS, sample_row

        rows = (hide_paths_in(sample_row(i, s), roots) for i, s in enumerate(record.samples))
        return (csv_lines([SAMPLE_COLUMNS]) + csv_lines([row[c] for c in SAMPLE_COLUMNS] for row in rows)).encode()

    def samples_json() -> bytes:
        return _json([hide_paths_in(s.model_dump(mode="json"), roots) for s in record.samples])

    def record_json() -> bytes:
        return _json(hide_paths_in(record.model_dump(mode="json"), roots))

    builders: dict[str, Builder] = {
        "report.html": report_html,
        "report.md": report_md,
        "samples.csv": samples_csv,
        "samples.json": samples_json,
        "record.json": record_json,
    }
    builders.update(_traces(store, run_id, roots, "trace"))
    if record.sweep_id:
        builders.update(_sweep_artifacts(store, record.sweep_id, roots))
    return builders


def _sweep_artifacts(store: Any, sweep_id: str, roots: Any) -> dict[str, Builder]:
    """The sweep ``sweep_id``'s report, result and stored trace ({} when the sweep is not stored)."""
    from repliscope.service.redaction import hide_paths_in

    try:
        sweep = store.get_sweep(sweep_id)
    except StoreError:
        return {}

    def report_html() -> bytes:
        from repliscope.report.build import build_sweep_view
        from repliscope.report.html import render_view_html
        from repliscope.service.routers.runs import _sweep_records

        figures = _figures(store, sweep.sweep_id)
        view = build_sweep_view(sweep, _sweep_records(store, sweep), figures)
        return render_view_html(_redacted(view, roots)).encode()

    def sweep_json() -> bytes:
        return _json(hide_paths_in(sweep.model_dump(mode="json"), roots))

    builders: dict[str, Builder] = {"sweep-report.html": report_html, "sweep.json": sweep_json}
    builders.update(_traces(store, sweep.sweep_id, roots, "sweep-trace"))
    return builders


def benchmark_artifacts(store: Any, bench: Any, roots: Any) -> dict[str, Builder]:
    """A benchmark's record and its trace when one is stored."""
    from repliscope.service.redaction import hide_paths_in

    builders: dict[str, Builder] = {
        "benchmark.json": lambda: _json(hide_paths_in(bench.model_dump(mode="json"), roots))
    }
    builders.update(_traces(store, bench.benchmark_id, roots, "trace"))
    return builders


def diff_artifacts(store: Any, stored: Any, roots: Any) -> dict[str, Builder]:
    """A stored diff's result, its Markdown report and its figure when it has one."""
    from repliscope.service.redaction import hide_paths_in
    from repliscope.store.diffs import get_figure

    def report_md() -> bytes:
        from repliscope.report.diff_report import render_diff_markdown

        return render_diff_markdown(hide_paths_in(stored, roots), get_figure(store, stored.diff_id)).encode()

    builders: dict[str, Builder] = {
        "diff.json": lambda: _json(hide_paths_in(stored.model_dump(mode="json"), roots)),
        "diff-report.md": report_md,
    }
    if stored.has_figure:
        builders["figure.png"] = lambda: get_figure(store, stored.diff_id) or b""
    return builders


def _traces(store: Any, object_id: str, roots: Any, stem: str) -> dict[str, Builder]:
    """The builders of the trace stored under exactly ``object_id`` ({} when there is none): ``<stem>.json`` as
    stored (Chrome / Perfetto JSON) and, when ``repliscope[tracing]`` is installed, ``<stem>.otlp.json`` rendered
    from it (:func:`repliscope.tracing.otlp_json.to_otlp_json`; rendered before the paths are hidden, so a viewer
    and an admin get the same ids; one line, as the Collector's ``otlpjsonfile`` receiver reads it)."""
    from repliscope.service.redaction import hide_paths_in
    from repliscope.tracing import otlp_json

    doc = store.load_trace(object_id)
    if doc is None:
        return {}
    builders: dict[str, Builder] = {f"{stem}.json": lambda: _json(hide_paths_in(doc, roots))}
    if otlp_json.available():
        builders[f"{stem}.otlp.json"] = lambda: otlp_json.dumps(hide_paths_in(otlp_json.to_otlp_json(doc), roots))
    return builders


def _figures(store: Any, object_id: str) -> Any:
    """The stored trace's per-layer chart for a report (None when no trace is stored)."""
    from repliscope.service.routers.runs import _trace_figures

    return _trace_figures(store, object_id) or None


def _redacted(view: Any, roots: Any) -> Any:
    if roots is None:
        return view
    from repliscope.service.redaction import redact_view

    return redact_view(view, roots)


# --- the bytes, kept a short while per object, caller kind and name -------------------------------------------

_BUILT: OrderedDict[tuple[str, str, bool, str], tuple[float, bytes]] = OrderedDict()
_BUILT_LOCK = threading.Lock()
MAX_CACHED_BYTES = 64 << 20
"""Artifacts built are kept up to this many bytes, the least recently used dropped first."""
KEPT_SECONDS = 120.0
"""How long a built artifact is served again (and its size listed): long enough for a view and a download that
follows to build it once, short enough that a trace replaced or a sweep's run deleted shows within two minutes (a
stored record never changes in place; a run deleted through this server is forgotten at once, :func:`forget`)."""


def kept(target: Target, name: str, admin: bool) -> bytes | None:
    """The bytes of ``target``'s artifact ``name`` built less than :data:`KEPT_SECONDS` ago, else None."""
    with _BUILT_LOCK:
        found = _BUILT.get((target.what, target.object_id, admin, name))
    return found[1] if found is not None and time.monotonic() - found[0] < KEPT_SECONDS else None


def built(target: Target, name: str, admin: bool) -> bytes:
    """The bytes of ``target``'s artifact ``name``, built again after :data:`KEPT_SECONDS` (a view and the
    download that follows build it once); an admin's copy and a redacted one are kept apart."""
    key = (target.what, target.object_id, admin, name)
    now = time.monotonic()
    with _BUILT_LOCK:
        kept = _BUILT.get(key)
        if kept is not None and now - kept[0] < KEPT_SECONDS:
            _BUILT.move_to_end(key)
            return kept[1]
    data = target.builders[name]()
    with _BUILT_LOCK:
        _BUILT[key] = (now, data)
        _BUILT.move_to_end(key)
        while sum(len(v[1]) for v in _BUILT.values()) > MAX_CACHED_BYTES and len(_BUILT) > 1:
            _BUILT.popitem(last=False)
    return data


def forget(what: str, object_id: str) -> None:
    """Drop every built artifact of the object ``object_id`` of kind ``what`` (``run``, ``benchmark``, ``diff``),
    for every caller kind and name: a deleted object stored again under its id never serves the withdrawn files."""
    with _BUILT_LOCK:
        for key in [k for k in _BUILT if k[0] == what and k[1] == object_id]:
            del _BUILT[key]


def listing(target: Target, admin: bool) -> list[Artifact]:
    """``target``'s artifacts in :data:`ARTIFACTS` order, building none of them (a viewer's listing costs the
    server no report, CSV or trace rendering): each has its size when it was built within :data:`KEPT_SECONDS`,
    else None ("made when opened")."""
    out = []
    for name, kind in ARTIFACTS.items():
        if name not in target.builders:
            continue
        data = kept(target, name, admin)
        out.append(Artifact(name, kind.label, kind.media_type, None if data is None else len(data), kind.viewable))
    return out


# --- resolving an id -------------------------------------------------------------------------------------------


def run_target(request: Request, principal: Any, run_id: str) -> Target | str | None:
    """The run or benchmark ``run_id`` (an id or a unique prefix) as a :class:`Target`; a sweep's id -> the path of
    its reference run's artifacts (a redirect); None when there is no such object."""
    from repliscope.service.redaction import request_roots

    if not _ID.fullmatch(run_id):
        return None
    store = kit.store_of(request)
    roots = request_roots(request, principal)
    try:
        record = store.get(run_id)
    except StoreError:
        pass
    else:
        base = f"/runs/{quote(record.run_id, safe='')}"
        return Target("run", record.run_id, base, f"{base}/artifacts", run_artifacts(store, record, roots))
    try:
        bench = store.get_benchmark(run_id)
    except StoreError:
        pass
    else:
        base = f"/benchmarks/{quote(bench.benchmark_id, safe='')}"
        own = f"/runs/{quote(bench.benchmark_id, safe='')}/artifacts"
        return Target("benchmark", bench.benchmark_id, base, own, benchmark_artifacts(store, bench, roots))
    reference = kit.sweep_reference(store, run_id)
    return None if reference is None else f"/runs/{quote(reference, safe='')}/artifacts"


def diff_target(request: Request, principal: Any, diff_id: str) -> Target | None:
    """The stored diff ``diff_id`` as a :class:`Target`, None when there is none."""
    from repliscope.service.redaction import request_roots
    from repliscope.store.diffs import get_diff

    if not _ID.fullmatch(diff_id):
        return None
    store = kit.store_of(request)
    try:
        stored = get_diff(store, diff_id)
    except StoreError:
        return None
    base = f"/diffs/{quote(stored.diff_id, safe='')}"
    roots = request_roots(request, principal)
    return Target("diff", stored.diff_id, base, f"{base}/artifacts", diff_artifacts(store, stored, roots))


# --- pages and files ---------------------------------------------------------------------------------------------


def _list_page(principal: Any, target: Target) -> Response:
    items = listing(target, principal.role == "admin")
    title = f"Artifacts of {target.what} {target.object_id[:12]}"
    return kit.page(principal, "artifacts.html", title=title, target=target, items=items)


def _file(principal: Any, target: Target, name: str, download: str) -> Response:
    if name not in target.builders:
        return kit.error_page(principal, 404, f"{target.what} {target.object_id[:12]} has no artifact '{name[:60]}'")
    kind = ARTIFACTS[name]
    data = built(target, name, principal.role == "admin")
    attach = download == "1" or not kind.viewable
    filename = f"{target.what}-{target.object_id[:32]}-{name}"
    headers = {
        "Content-Disposition": f'{"attachment" if attach else "inline"}; filename="{_safe_filename(filename)}"',
        "X-Content-Type-Options": "nosniff",
    }
    if kind.media_type.startswith("text/html"):
        headers["Content-Security-Policy"] = REPORT_CSP
    return Response(data, media_type=kind.media_type, headers=headers)


def _safe_filename(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def _bad_download(principal: Any, download: str) -> Response | None:
    if download in ("", "0", "1"):
        return None
    return kit.error_page(principal, 422, f"download must be 0 or 1, not '{download[:20]}'")


@router.get("/runs/{run_id}/artifacts", response_class=HTMLResponse)
def run_artifacts_page(request: Request, run_id: str, principal: SignedIn) -> Response:
    """What a run (or a benchmark) has: each artifact with its size, media type, view and download links; a
    sweep's id leads to its reference run's."""
    target = run_target(request, principal, run_id) if len(run_id) <= MAX_ID else None
    if target is None:
        return kit.error_page(principal, 404, f"unknown run id '{run_id[:MAX_ID]}'")
    if isinstance(target, str):
        return RedirectResponse(target, status_code=303)
    return _list_page(principal, target)


@router.get("/runs/{run_id}/artifacts/{name}")
def run_artifact(request: Request, run_id: str, name: str, principal: SignedIn, download: str = "") -> Response:
    """One artifact of a run or a benchmark (``?download=1``: as an attachment)."""
    if (refused := _bad_download(principal, download)) is not None:
        return refused
    target = run_target(request, principal, run_id) if len(run_id) <= MAX_ID else None
    if target is None or isinstance(target, str):
        return kit.error_page(principal, 404, f"unknown run id '{run_id[:MAX_ID]}'")
    return _file(principal, target, name, download)


@router.get("/diffs/{diff_id}/artifacts", response_class=HTMLResponse)
def diff_artifacts_page(request: Request, diff_id: str, principal: SignedIn) -> Response:
    """What a stored diff has: its result, its Markdown report, its figure."""
    target = diff_target(request, principal, diff_id) if len(diff_id) <= MAX_ID else None
    if target is None:
        return kit.error_page(principal, 404, f"unknown diff id '{diff_id[:MAX_ID]}'")
    return _list_page(principal, target)


@router.get("/diffs/{diff_id}/artifacts/{name}")
def diff_artifact(request: Request, diff_id: str, name: str, principal: SignedIn, download: str = "") -> Response:
    """One artifact of a stored diff (``?download=1``: as an attachment)."""
    if (refused := _bad_download(principal, download)) is not None:
        return refused
    target = diff_target(request, principal, diff_id) if len(diff_id) <= MAX_ID else None
    if target is None:
        return kit.error_page(principal, 404, f"unknown diff id '{diff_id[:MAX_ID]}'")
    return _file(principal, target, name, download)
