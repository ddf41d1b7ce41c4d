"""Every page of the web UI carries the strict Content-Security-Policy (:data:`repliscope.service.guard.PAGE_CSP`):
no inline or foreign script, no plugin, no ``<base>``, forms post only here, no framing. The app's HTML routes are
enumerated (a new page fails here until it is listed with a real id), each is requested as admin against a small
store (a sweep's runs, a benchmark pair, a stack matrix, a diff, a job), and so are the error pages. The templates
hold no inline script, no ``on*=`` handler and no ``javascript:`` URL (the policy would refuse them: the page would
silently lose its behaviour). One app for the module."""

from __future__ import annotations

from collections.abc import Iterator
from html.parser import HTMLParser
from importlib.resources import files
from typing import Any

import pytest
from fastapi.responses import HTMLResponse
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient

from repliscope.service.guard import PAGE_CSP
from tests.service.test_web_pages import logged_in

PLAIN_RUN = "e0" * 16
URL_ATTRIBUTES = frozenset({"href", "src", "action", "formaction", "xlink:href", "data"})


class InlineCode(HTMLParser):
    """What of a page (or template) the page policy would refuse to run: inline ``<script>`` bodies, ``on*=``
    attributes, ``javascript:`` URLs. A ``<script type="application/json">`` is data, never run: allowed."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []
        self._in_script: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        named = dict(attrs)
        for name, value in attrs:
            if name.startswith("on"):
                self.found.append(f"<{tag}> handler {name}={value!r}")
            if name in URL_ATTRIBUTES and (value or "").strip().lower().startswith("javascript:"):
                self.found.append(f"<{tag}> {name}={value!r}")
        if tag == "script":
            kind = (named.get("type") or "").lower()
            if kind == "application/json":
                self._in_script = None
            elif not (named.get("src") or "").startswith("/static/"):
                self.found.append(f"<script> not from /static: {attrs!r}")
                self._in_script = "inline"
            else:
                self._in_script = "src"

    def handle_data(self, data: str) -> None:
        if self._in_script == "src" and data.strip():
            self.found.append(f"<script src> with an inline body {data.strip()[:60]!r}")

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._in_script = None


def inline_code(html: str) -> list[str]:
    parser = InlineCode()
    parser.feed(html)
    parser.close()
    return parser.found


def test_the_detector_finds_each_kind_of_inline_code() -> None:
    hostile = (
        '<script>alert(1)</script><button type="button" onclick="go()">x</button>'
        '<a href=" JavaScript:alert(2)">y</a><img src=x onerror=alert(3)><form action="javascript:void(0)"></form>'
        '<script src="https://cdn.example/x.js"></script><script src="/static/a.js">alert(4)</script>'
    )
    found = inline_code(hostile)
    assert len(found) == 7, found
    assert [f.split(" ", 2)[:2] for f in found] == [
        ["<script>", "not"],
        ["<button>", "handler"],
        ["<a>", "href='"],
        ["<img>", "handler"],
        ["<form>", "action='javascript:void(0)'"],
        ["<script>", "not"],
        ["<script", "src>"],
    ]
    allowed = '<script src="/static/wizard.js"></script><script type="application/json">{"a": 1}</script>'
    assert inline_code(allowed) == []


def test_no_template_holds_an_inline_script_a_handler_or_a_javascript_url() -> None:
    templates = files("repliscope.service.web").joinpath("templates")
    names = sorted(t.name for t in templates.iterdir() if t.name.endswith(".html"))
    assert "new.html" in names and "base.html" in names and len(names) >= 30
    found = {name: inline_code(templates.joinpath(name).read_text(encoding="utf-8")) for name in names}
    assert {name: f for name, f in found.items() if f} == {}
    served = {t.name for t in files("repliscope.service.web").joinpath("static").iterdir() if t.name.endswith(".js")}
    assert {"wizard.js", "job.js", "runs.js", "samples.js"} <= served


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A store with a sweep's runs, two benchmarks (one fake-runtime benchmark, ~1 s, copied), a stack matrix, a
    diff and a job; an admin's web session."""
    from repliscope.service.app import create_app
    from repliscope.service.config import ServiceConfig
    from repliscope.service.startup import first_start
    from repliscope.store.diffs import store_diff
    from repliscope.store.service_tables import create_job
    from tests.report.factories import SWEEP_ID, VARIANT_RUN_IDS, sweep, sweep_records
    from tests.service.matrices import MATRIX_ID, make_matrix
    from tests.service.test_artifacts import _task_diff
    from tests.service.test_benchmarks_and_result_links import copies, lite0_benchmark
    from tests.store.records import TOP1_A, make_record

    root = tmp_path_factory.mktemp("csp")
    app = create_app(ServiceConfig(db_url=f"sqlite:///{root / 'runs.db'}", cache_dir=root / "cache"))
    store = app.state.store
    admin, _ = first_start(store)
    assert admin is not None
    store.save_sweep(sweep())
    for record in sweep_records().values():
        store.save(record)
    store.save(make_record(PLAIN_RUN, TOP1_A))  # a plain run: the model page lists plain runs only
    benchmarks = copies(lite0_benchmark(), 2, "efficientnet-lite0")
    for b in benchmarks:
        store.save_benchmark(b)
    store.save_stack_matrix(make_matrix())
    diff = store_diff(store, _task_diff(), manifest_name="efficientnet-lite0")
    job = create_job(store, "evaluate", "efficientnet-lite0@1.0.0", "onnxruntime", "foolbox_imagenet", {}).id
    try:
        with TestClient(app):
            yield {
                "app": app,
                "admin": logged_in(app, admin),
                "run": VARIANT_RUN_IDS["reference"],
                "other": VARIANT_RUN_IDS[next(k for k in VARIANT_RUN_IDS if k != "reference")],
                "sweep": SWEEP_ID,
                "benchmarks": [b.benchmark_id for b in benchmarks],
                "matrix": MATRIX_ID,
                "diff": diff,
                "job": job,
            }
    finally:
        app.state.executor.shutdown(wait=True)
        app.state.cluster.close()


def _routes(routes: list[Any], prefix: str = "") -> Iterator[tuple[str, APIRoute]]:
    """Every APIRoute of ``routes`` with its full path, through included routers."""
    for route in routes:
        if isinstance(route, APIRoute):
            yield prefix + route.path, route
        elif (inner := getattr(route, "original_router", None)) is not None:
            yield from _routes(inner.routes, prefix + route.include_context.prefix)
        elif (inner := getattr(route, "routes", None)) is not None:
            yield from _routes(inner, prefix + getattr(route, "path", ""))


def _pages(site: dict[str, Any]) -> dict[str, str]:
    """Each HTML page route -> a URL of it with ids of the store."""
    run, other, sweep, (b1, b2) = site["run"], site["other"], site["sweep"], site["benchmarks"]
    return {
        "/login": "/login",
        "/": "/",
        "/models/{name}": "/models/efficientnet-lite0",
        "/runs": "/runs",
        "/runs/{run_id}": f"/runs/{run}",
        "/benchmarks": "/benchmarks",
        "/benchmarks/{benchmark_id}": f"/benchmarks/{b1}",
        "/compare": f"/compare?a={run}&b={other}",
        "/new": "/new",
        "/datasets": "/datasets",
        "/jobs": "/jobs",
        "/jobs/{job_id}": f"/jobs/{site['job']}",
        "/agents": "/agents",
        "/stack-matrices/{matrix_id}": f"/stack-matrices/{site['matrix']}",
        "/diffs": "/diffs",
        "/diffs/{diff_id}": f"/diffs/{site['diff']}",
        "/audit": "/audit",
        "/compare/benchmarks": f"/compare/benchmarks?id={b1}&id={b2}",
        "/charts": "/charts",
        "/sweeps/{sweep_id}/parallel": f"/sweeps/{sweep}/parallel",
        "/runs/{run_id}/artifacts": f"/runs/{run}/artifacts",
        "/diffs/{diff_id}/artifacts": f"/diffs/{site['diff']}/artifacts",
    }


NOT_PAGES = {
    "/docs": "the API docs: their own policy (FastAPI's inline page scripts), tested below",
    "/redoc": "the API docs: their own policy, tested below",
    "/docs-assets/{name}": "the API docs' JavaScript, CSS and icon",
    "/favicon.ico": "an icon",
    "/static/{name}": "the pages' CSS and JavaScript",
    "/runs/{run_id}/samples/{position}/thumbnail.png": "a PNG",
    "/diffs/{diff_id}/figure.png": "a PNG",
    "/jobs/{job_id}/log.txt": "text, sandboxed (LOG_CSP), tested below",
    "/runs/{run_id}/artifacts/{name}": "a stored file; an HTML report sandboxed (REPORT_CSP), tested below",
    "/diffs/{diff_id}/artifacts/{name}": "a stored file (JSON, Markdown, PNG)",
}
"""The GET routes outside ``/api/`` that are not pages of the web UI, each with what it serves instead."""


def test_every_page_carries_the_strict_policy(site: dict[str, Any]) -> None:
    """The app's 22 pages, each rendered once (~2 s: the run, compare and benchmark pages draw their charts)."""
    routes = {path: r for path, r in _routes(site["app"].router.routes) if "GET" in (r.methods or ())}
    outside_api = {path for path in routes if not path.startswith("/api/")}
    pages = _pages(site)
    assert outside_api - set(NOT_PAGES) == set(pages), "a GET route neither listed as a page here nor as not one"
    assert {p for p in pages if routes[p].response_class is HTMLResponse} == set(pages)
    admin = site["admin"]
    for url in pages.values():
        r = admin.get(url)
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/html"), (url, r.status_code)
        assert r.headers["content-security-policy"] == PAGE_CSP, url
        assert inline_code(r.text) == [], url
    assert '<script src="/static/wizard.js"></script>' in admin.get("/new").text
    wizard = admin.get("/static/wizard.js")
    assert wizard.status_code == 200 and wizard.headers["content-type"].startswith("text/javascript")
    assert PAGE_CSP == (
        "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
        "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    )


def test_error_pages_and_the_login_redirect_carry_it_and_stricter_routes_keep_theirs(site: dict[str, Any]) -> None:
    from repliscope.service import api_docs
    from repliscope.service.web.artifacts import REPORT_CSP
    from repliscope.service.web.job_pages import LOG_CSP

    admin, anonymous = site["admin"], TestClient(site["app"])
    for client, url, status in (
        (admin, "/runs/no-such-run", 404),
        (admin, f"/compare?a={site['run']}&zz=1", 400),
        (admin, "/charts?limit=0", 422),
        (admin, "/sweeps/nosuchsweep/parallel", 404),
        (admin, "/runs?page=0", 422),
        (anonymous, "/runs", 303),
        (anonymous, "/login?next=/new", 200),
    ):
        r = client.get(url, follow_redirects=False)
        assert r.status_code == status, (url, r.status_code)
        assert r.headers["content-security-policy"] == PAGE_CSP, url
    report = admin.get(f"/runs/{site['run']}/artifacts/report.html")
    assert report.status_code == 200 and report.headers["content-security-policy"] == REPORT_CSP
    log = admin.get(f"/jobs/{site['job']}/log.txt")
    assert log.headers["content-security-policy"] == LOG_CSP == "sandbox; default-src 'none'; frame-ancestors 'none'"
    for docs in ("/docs", "/redoc"):  # FastAPI's page templates run inline script: their own policy, this server only
        policy = anonymous.get(docs).headers["content-security-policy"]
        assert policy == api_docs.PAGE_CSP and "http" not in policy and "frame-ancestors 'none'" in policy
