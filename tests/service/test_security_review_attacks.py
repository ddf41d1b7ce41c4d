"""A security reviewer's attacks on the annotation, chart, column, compare and job pages and their API, each the
hostile request itself with what it must (not) do: the role of every route, CSRF, the order role-then-body, the
bounds of every input, markup in stored text, hostile ids, redirects, paths below admin. One app for the module."""

from __future__ import annotations

import re
from collections.abc import Iterator
from html import unescape
from typing import Any
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient

from tests.service.conftest import WebClient, app_with_role_tokens
from tests.store.records import TOP1_A, TOP1_B, make_record

RUN_A = "e5" * 16
RUN_B = "f5" * 16
MARKUP = '"><script>document.title="owned"</script><img src=x onerror=alert(1)><a href="javascript:alert(2)">x</a>'
ESCAPED = "&lt;script&gt;document.title="


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from repliscope.service import job_log
    from repliscope.store.service_tables import create_job, update_job

    with app_with_role_tokens(tmp_path_factory.mktemp("security-attacks"), viewer="val", runner="ron") as application:
        store = application.state.store
        store.save(make_record(RUN_A, TOP1_A))
        store.save(make_record(RUN_B, TOP1_B, runtime="torch"))
        job = create_job(store, "evaluate", "m@1", "onnxruntime", "foolbox_imagenet", {}, created_by="ron").id
        hostile = f"\x1b]0;owned\x07{MARKUP} read /home/ron/secret/weights.onnx"
        update_job(store, job, status="succeeded", result_ids=[RUN_A], append_log=job_log.entries(hostile, "agent a1"))
        application.state.test_job = job
        yield application


@pytest.fixture(scope="module")
def api(app: Any) -> TestClient:
    return TestClient(app)


def bearer(app: Any, role: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {app.state.test_tokens[role]}"}


_SESSIONS: dict[str, WebClient] = {}


def web(app: Any, role: str) -> WebClient:
    """A signed-in browser-like client of ``role`` (one per role for the module)."""
    if role not in _SESSIONS:
        client = WebClient(app)
        r = client.post("/login", data={"token": app.state.test_tokens[role], "next": "/runs"}, follow_redirects=False)
        assert r.status_code == 303
        _SESSIONS[role] = client
    return _SESSIONS[role]


@pytest.fixture(scope="module", autouse=True)
def _forget_sessions() -> Iterator[None]:
    yield
    _SESSIONS.clear()


def csrf_of(client: WebClient) -> str:
    found = re.search(r'name="csrf_token" value="([^"]+)"', client.get(f"/runs/{RUN_A}").text)
    assert found is not None
    return found.group(1)


def alert(page: Any) -> str:
    found = re.search(r'<p class="error" role="alert">(.*?)</p>', page.text, re.S)
    assert found is not None, page.text[:400]
    return unescape(found.group(1))


def notes_of_a(app: Any) -> Any:
    return app.state.store.annotations.get(RUN_A)


FORMS = {
    f"/runs/{RUN_A}/tags": ("runner", {"tags": "x1"}),
    f"/runs/{RUN_A}/tags/remove": ("runner", {"tag": "x1"}),
    f"/runs/{RUN_A}/note": ("runner", {"note": "hijacked"}),
    f"/runs/{RUN_A}/rename": ("admin", {"display_name": "hijacked"}),
    f"/runs/{RUN_A}/delete": ("admin", {"confirm": "yes"}),
}


@pytest.mark.parametrize("path", list(FORMS))
def test_every_annotation_form_refuses_the_signed_out_the_lower_role_and_a_missing_csrf(app: Any, path: str) -> None:
    role, data = FORMS[path]
    before = notes_of_a(app)
    anonymous = WebClient(app)
    r = anonymous.post(path, data=data, follow_redirects=False)
    assert (r.status_code, r.headers["location"]) == (303, "/login")  # the guard: no token, no body read
    lower = "viewer" if role == "runner" else "runner"
    r = web(app, lower).post(path, data={**data, "csrf_token": csrf_of(web(app, lower))})
    assert r.status_code == 403 and f"needs the role '{role}'" in alert(r)
    r = web(app, role).post(path, data=data)  # the right role, no CSRF token
    assert r.status_code == 403 and "CSRF token" in alert(r)
    r = web(app, role).post(path, data={**data, "csrf_token": csrf_of(web(app, "viewer"))})  # another's token
    assert r.status_code == 403 and "CSRF token" in alert(r)
    evil = web(app, role).post(
        path, data={**data, "csrf_token": csrf_of(web(app, role))}, headers={"Origin": "http://evil.example"}
    )
    assert evil.status_code == 403
    assert notes_of_a(app) == before
    assert app.state.store.get(RUN_A).run_id == RUN_A


def test_the_role_is_checked_before_the_form_is_read(app: Any) -> None:
    """A viewer's form of more fields than the route reads is refused for the role (403), not parsed (400)."""
    fields = {f"f{i}": "x" for i in range(20)}
    for path in FORMS:
        r = web(app, "viewer").post(path, data=fields)
        assert r.status_code == 403 and "needs the role" in alert(r), path


@pytest.mark.parametrize(
    ("method", "path", "role", "body"),
    [
        ("GET", f"/api/v1/runs/{RUN_A}/annotations", "viewer", None),
        ("PUT", f"/api/v1/runs/{RUN_A}/tags/x1", "runner", None),
        ("DELETE", f"/api/v1/runs/{RUN_A}/tags/x1", "runner", None),
        ("PUT", f"/api/v1/runs/{RUN_A}/note", "runner", {"note": "hijacked"}),
        ("PATCH", f"/api/v1/runs/{RUN_A}", "admin", {"display_name": "hijacked"}),
        ("DELETE", f"/api/v1/runs/{RUN_A}", "admin", None),
        ("GET", "/api/v1/audit", "admin", None),
    ],
)
def test_every_annotation_api_route_needs_its_role(
    app: Any, api: TestClient, method: str, path: str, role: str, body: Any
) -> None:
    before = notes_of_a(app)
    r = api.request(method, path, json=body)
    assert r.status_code == 401
    r = api.request(method, path, json=body, headers={"Authorization": "Bearer not-a-token"})
    assert r.status_code == 401
    if role != "viewer":
        lower = "viewer" if role == "runner" else "runner"
        r = api.request(method, path, json=body, headers=bearer(app, lower))
        assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden"
    assert notes_of_a(app) == before


def test_a_signed_out_visitor_of_every_page_goes_to_the_login_with_a_local_next(app: Any) -> None:
    anonymous = TestClient(app)
    for path in (
        "/charts",
        "/sweeps/abcdef/parallel",
        "/audit",
        f"/jobs/{app.state.test_job}/log.txt",
        f"/jobs/{app.state.test_job}",
        "/runs?cols=model",
        "/compare/benchmarks?id=a&id=b",
        f"/runs/{RUN_A}/artifacts",
    ):
        r = anonymous.get(path, follow_redirects=False)
        assert r.status_code == 303, path
        assert r.headers["location"].startswith("/login?next=%2F"), (path, r.headers["location"])


@pytest.mark.parametrize(
    "target",
    ["//evil.example/x", "https://evil.example/", "/\\evil.example", "\\\\evil.example", "javascript:alert(1)"],
)
def test_login_and_cancel_never_redirect_off_the_site(app: Any, target: str) -> None:
    client = WebClient(app)
    r = client.post("/login", data={"token": app.state.test_tokens["runner"], "next": target}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/"
    r = client.post("/login", data={"token": "wrong", "next": target}, follow_redirects=False)
    assert "evil.example" not in r.headers.get("location", "")
    tab = client.post(
        "/login", data={"token": app.state.test_tokens["runner"], "next": "/\t/evil.example"}, follow_redirects=False
    )
    assert tab.headers["location"].startswith("/%09/")  # percent-encoded: a browser keeps it a local path


def test_the_audit_is_admin_only_and_bounded(app: Any) -> None:
    for role in ("viewer", "runner"):
        r = web(app, role).get("/audit")
        assert r.status_code == 403 and "needs the role 'admin'" in alert(r)
    admin = web(app, "admin")
    assert admin.get("/audit?page=1000001").status_code == 422
    assert admin.get("/audit?page=-1").status_code == 422
    assert admin.get("/audit?run_id=" + "a" * 101).status_code == 422
    r = admin.get("/audit?action=" + quote(MARKUP))
    assert r.status_code == 422 and "<script>" not in r.text


@pytest.mark.parametrize(
    ("query", "says"),
    [
        ("cols=" + ",".join(["model"] * 51), "at most 50 column names"),
        ("cols=" + "x" * 10_000, "unknown column 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'"),
        ("cols=" + quote(MARKUP), "unknown column"),
        ("cols=model&cols=" + "%2C" * 5000 + "bogus", "unknown column 'bogus'"),
    ],
)
def test_the_column_choice_is_bounded_and_escaped(app: Any, query: str, says: str) -> None:
    r = web(app, "viewer").get(f"/runs?{query}")
    assert r.status_code == 422 and says in alert(r)
    assert "<script>" not in r.text and len(alert(r)) < 600


@pytest.mark.parametrize(
    ("query", "says"),
    [
        ("search=" + "s" * 201, "search must be at most 200 characters"),
        ("model=" + "m" * 301, "model must be at most 300 characters"),
        ("limit=501", "limit must be a whole number from 1 to 500"),
        ("limit=1e3", "limit must be a whole number"),
        ("limit=%D9%A3", "limit must be a whole number"),
        ("limit=00000000000000000001", "limit must be a whole number"),
        ("by=" + quote(MARKUP), "unknown grouping"),
        ("metric=" + quote(MARKUP), "unknown metric"),
        ("evil=1", "unknown query parameter 'evil'"),
        ("created_from=99999-01-01", "created_from"),
    ],
)
def test_chart_parameters_are_bounded_and_escaped(app: Any, query: str, says: str) -> None:
    r = web(app, "viewer").get(f"/charts?{query}")
    assert r.status_code == 422 and says in alert(r)
    assert "<script>" not in r.text


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/sweeps/" + "a" * 101 + "/parallel", 422),
        ("/sweeps/abcdef/parallel?metric=" + "m" * 101, 422),
        ("/sweeps/abcdef/parallel?run=" + "r" * 101, 422),
        ("/sweeps/..%2F..%2Fetc%2Fpasswd/parallel", 404),
        ("/sweeps/%00abcdef/parallel", 404),
        ("/sweeps/abcdef/parallel?evil=1", 422),
        ("/jobs/..%2F..%2Fetc%2Fpasswd/log.txt", 404),
        ("/jobs/" + "j" * 101 + "/log.txt", 404),
        ("/jobs/%2e%2e/log.txt", 404),
        ("/compare/benchmarks?" + "&".join(f"id=b{i}" for i in range(13)), 422),
        ("/compare/benchmarks?id=" + "b" * 101 + "&id=bb", 422),
        ("/compare?" + "&".join(f"run=r{i}" for i in range(13)), 422),
        ("/compare?run=" + "r" * 101 + "&run=" + RUN_B, 422),
        (f"/compare?run={RUN_A}&run=..%2F..%2Fetc%2Fpasswd", 404),
    ],
)
def test_hostile_ids_and_oversized_ids_are_refused(app: Any, path: str, status: int) -> None:
    r = web(app, "viewer").get(path)
    assert r.status_code == status, r.text[:300]
    assert "root:" not in r.text


def test_hostile_run_ids_in_form_paths_change_nothing(app: Any) -> None:
    runner = web(app, "runner")
    token = csrf_of(runner)
    for run_id in ("..%2F..%2Fetc%2Fpasswd", "%2e%2e", "a" * 101, "%00" + RUN_A, RUN_A[:5]):
        r = runner.post(f"/runs/{run_id}/note", data={"note": "x", "csrf_token": token})
        assert r.status_code in (404, 422), (run_id, r.status_code)
    assert notes_of_a(app).note in (None, "")


def test_annotation_values_are_bounded_on_the_pages(app: Any) -> None:
    runner, admin = web(app, "runner"), web(app, "admin")
    token, admin_token = csrf_of(runner), csrf_of(admin)
    r = runner.post(f"/runs/{RUN_A}/note", data={"note": "n" * 10_001, "csrf_token": token})
    assert r.status_code == 422 and "note: 10001 characters" in alert(r)
    r = runner.post(f"/runs/{RUN_A}/note", data={"note": "a\u202eevil", "csrf_token": token})
    assert r.status_code == 422 and "U+202E" in alert(r)
    r = runner.post(f"/runs/{RUN_A}/tags", data={"tags": "<b>x</b>", "csrf_token": token})
    assert r.status_code == 422 and "is not a tag" in alert(r) and "<b>" not in r.text
    r = admin.post(f"/runs/{RUN_A}/rename", data={"display_name": "d" * 201, "csrf_token": admin_token})
    assert r.status_code == 422 and "display_name: 201 characters" in alert(r)
    r = admin.post(f"/runs/{RUN_A}/rename", data={"display_name": "a\u200bb", "csrf_token": admin_token})
    assert r.status_code == 422 and "U+200B" in alert(r)
    assert notes_of_a(app).display_name is None


def test_markup_in_names_notes_and_job_logs_is_text_everywhere(app: Any, api: TestClient) -> None:
    admin = web(app, "admin")
    assert api.patch(f"/api/v1/runs/{RUN_A}", json={"display_name": MARKUP}, headers=bearer(app, "admin")).is_success
    assert api.put(f"/api/v1/runs/{RUN_A}/note", json={"note": MARKUP}, headers=bearer(app, "runner")).is_success
    try:
        viewer = web(app, "viewer")
        for path in (
            f"/runs/{RUN_A}",
            "/runs",
            "/runs?cols=model,tags",
            f"/compare?run={RUN_A}&run={RUN_B}",
            f"/jobs/{app.state.test_job}",
            "/jobs",
            "/charts?by=model",
        ):
            page = viewer.get(path)
            assert page.status_code == 200, path
            assert "<script>document" not in page.text and "<img src=x" not in page.text, path
            assert 'href="javascript:' not in page.text, path
        assert ESCAPED in viewer.get(f"/runs/{RUN_A}").text
        assert ESCAPED in admin.get(f"/audit?run_id={RUN_A}").text
        job = viewer.get(f"/jobs/{app.state.test_job}")
        assert ESCAPED in job.text and "\x1b" not in job.text and "owned\x07" not in job.text
        log = viewer.get(f"/jobs/{app.state.test_job}/log.txt")
        assert log.headers["content-type"].startswith("text/plain")
        assert log.headers["x-content-type-options"] == "nosniff"
        assert log.headers["content-disposition"].startswith("attachment;")
        assert "\x1b" not in log.text
    finally:
        api.patch(f"/api/v1/runs/{RUN_A}", json={"display_name": None}, headers=bearer(app, "admin"))
        api.put(f"/api/v1/runs/{RUN_A}/note", json={"note": ""}, headers=bearer(app, "runner"))


def test_every_page_forbids_framing_and_sniffing(app: Any) -> None:
    viewer = web(app, "viewer")
    for path in ("/charts", f"/jobs/{app.state.test_job}", f"/jobs/{app.state.test_job}/log.txt", f"/runs/{RUN_A}"):
        r = viewer.get(path)
        assert "frame-ancestors 'none'" in r.headers["content-security-policy"], path
        assert r.headers["x-frame-options"] == "DENY" and r.headers["x-content-type-options"] == "nosniff"


def test_server_paths_in_a_job_log_are_hidden_below_admin_whoever_read_it_first(app: Any) -> None:
    """The job page and its log download read the same job for an admin first, then a viewer: the viewer's
    copy holds no absolute path (nothing cached across roles)."""
    job = app.state.test_job
    admin, viewer = web(app, "admin"), web(app, "viewer")
    assert "/home/ron/secret/weights.onnx" in admin.get(f"/jobs/{job}/log.txt").text
    assert "/home/ron/secret/weights.onnx" in unescape(admin.get(f"/jobs/{job}").text)
    for path in (f"/jobs/{job}/log.txt", f"/jobs/{job}"):
        text = unescape(viewer.get(path).text)
        assert "/home/ron" not in text and "secret/weights.onnx" in text, path


def test_a_deleted_run_is_gone_for_a_viewer_and_its_audit_admin_only(app: Any, api: TestClient) -> None:
    store = app.state.store
    gone = "a5" * 16
    store.save(make_record(gone, TOP1_A))
    api.patch(f"/api/v1/runs/{gone}", json={"display_name": "to-withdraw"}, headers=bearer(app, "admin"))
    assert api.delete(f"/api/v1/runs/{gone}", headers=bearer(app, "admin")).status_code == 200
    viewer = web(app, "viewer")
    assert api.get(f"/api/v1/runs/{gone}/annotations", headers=bearer(app, "viewer")).status_code == 404
    assert api.get("/api/v1/audit", headers=bearer(app, "viewer")).status_code == 403
    assert api.get("/api/v1/audit", headers=bearer(app, "runner")).status_code == 403
    for path in (f"/runs/{gone}", f"/compare?run={gone}&run={RUN_A}", f"/runs/{gone}/artifacts"):
        assert viewer.get(path).status_code == 404, path
    assert "to-withdraw" not in viewer.get("/runs").text
    assert "to-withdraw" not in viewer.get(f"/runs?deleted={gone}").text
    assert "to-withdraw" not in viewer.get("/charts?by=model").text


def test_cancel_checks_the_role_before_reading_the_form(app: Any) -> None:
    """A viewer's cancel is refused for the role before its form is parsed (20 fields: a 400 if it were read)."""
    from repliscope.store.service_tables import create_job, get_job

    store = app.state.store
    job = create_job(store, "evaluate", "m@1", "onnxruntime", "foolbox_imagenet", {}, created_by="ron").id
    viewer = web(app, "viewer")
    r = viewer.post(f"/jobs/{job}/cancel", data={f"f{i}": "x" for i in range(20)})
    assert r.status_code == 403 and "needs the role 'runner'" in alert(r)
    r = viewer.post(f"/jobs/{job}/cancel", data={"csrf_token": csrf_of(viewer)})
    assert r.status_code == 403 and "needs the role 'runner'" in alert(r)
    r = web(app, "runner").post(f"/jobs/{job}/cancel", data={"next": "//evil.example"})
    assert r.status_code == 403 and "CSRF token" in alert(r)
    assert get_job(store, job).status == "queued"
    runner = web(app, "runner")
    r = runner.post(
        f"/jobs/{job}/cancel", data={"csrf_token": csrf_of(runner), "next": "//evil.example"}, follow_redirects=False
    )
    assert r.status_code == 303 and r.headers["location"] == "/"


def test_artifacts_hostile_names_ids_and_paths_below_admin(app: Any) -> None:
    """L2's artifacts (reviewed, not edited): names outside the list, traversal in ids and names, a hostile
    ``download``, the HTML report sandboxed, and a viewer's copy of a record without the server path an admin's
    copy (built first, cached) holds."""
    store = app.state.store
    leaky = "b6" * 16
    record = make_record(leaky, TOP1_A)
    manifest = record.manifest.model_copy(update={"path": "/home/alice/private/models/lite0.yaml"})
    store.save(record.model_copy(update={"manifest": manifest}))
    admin, viewer = web(app, "admin"), web(app, "viewer")
    assert "/home/alice/private/models/lite0.yaml" in admin.get(f"/runs/{leaky}/artifacts/record.json").text
    shown = viewer.get(f"/runs/{leaky}/artifacts/record.json")
    assert shown.status_code == 200 and "/home/alice" not in shown.text and "models/lite0.yaml" in shown.text
    for path in (
        f"/runs/{leaky}/artifacts/..%2F..%2F..%2Fetc%2Fpasswd",
        f"/runs/{leaky}/artifacts/%2e%2e",
        f"/runs/{leaky}/artifacts/record.json%00.html",
        f"/runs/{leaky}/artifacts/" + "r" * 300,
        "/runs/..%2F..%2Fetc%2Fpasswd/artifacts",
        "/runs/" + "a" * 101 + "/artifacts/record.json",
        "/diffs/..%2Fx/artifacts",
    ):
        r = viewer.get(path)
        assert r.status_code == 404 and "root:" not in r.text, path
    r = viewer.get(f"/runs/{leaky}/artifacts/record.json?download=" + quote(MARKUP))
    assert r.status_code == 422 and "<script>" not in r.text
    report = viewer.get(f"/runs/{leaky}/artifacts/report.html")
    assert report.status_code == 200 and report.headers["content-security-policy"].startswith("sandbox;")
    assert report.headers["x-content-type-options"] == "nosniff"
    assert re.fullmatch(r'inline; filename="run-[0-9a-f]{32}-report\.html"', report.headers["content-disposition"])
    assert "/home/alice" not in report.text
    assert web(app, "viewer").get(f"/runs/{leaky}/artifacts").status_code == 200
    assert TestClient(app).get(f"/runs/{leaky}/artifacts/record.json", follow_redirects=False).status_code == 303


def test_compares_filled_by_an_admin_serve_a_viewer_no_server_path(app: Any, api: TestClient) -> None:
    """The compare caches (two-run comparison, N-run figures, recent records) are filled by an admin's request
    first; a viewer's pages and API answer of the same runs then hold no absolute server path."""
    store = app.state.store
    secret = "/srv/alice-private/stacks/py311"
    ids = []
    for i, top1 in enumerate((TOP1_A, TOP1_B, TOP1_A)):
        run_id = f"{i}c" * 16
        record = make_record(run_id, top1, runtime="torch" if i else "onnxruntime")
        software = {**record.software, "prefix": f"{secret}/{i}", "executable": f"{secret}/{i}/bin/python"}
        manifest = record.manifest.model_copy(update={"path": f"{secret}/manifests/m{i}.yaml"})
        store.save(record.model_copy(update={"software": software, "manifest": manifest}))
        ids.append(run_id)
    two, three = f"/compare?run={ids[0]}&run={ids[1]}", "/compare?" + "&".join(f"run={r}" for r in ids)
    api_path = f"/api/v1/runs/compare?a={ids[0]}&b={ids[1]}"
    admin, viewer = web(app, "admin"), web(app, "viewer")
    for path in (two, three):
        shown = admin.get(path)
        assert shown.status_code == 200 and secret in unescape(shown.text), path  # the admin's, as stored
    assert api.get(api_path, headers=bearer(app, "admin")).status_code == 200
    for page in (viewer.get(two), viewer.get(three)):
        assert page.status_code == 200 and secret not in unescape(page.text) and "alice-private" not in page.text
    answer = api.get(api_path, headers=bearer(app, "viewer"))
    assert answer.status_code == 200 and "alice-private" not in answer.text


def test_markup_in_stored_values_is_text_inside_the_chart_svg(app: Any) -> None:
    """A record's runtime name holding markup (a record is imported data) is drawn as escaped text in the inline
    SVG and the table, and no script element or event attribute reaches the page."""
    hostile = "c4" * 16
    app.state.store.save(make_record(hostile, TOP1_A, runtime='rt"><script>alert(1)</script><svg onload=alert(2)>'))
    page = web(app, "viewer").get("/charts?by=runtime&limit=500")
    assert page.status_code == 200
    svg = page.text.split("<svg", 1)[1].split("</svg>", 1)[0]
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in svg and "<script" not in svg and "<svg onload" not in svg
    assert "<script>alert(1)" not in page.text and f'href="/runs/{hostile}"' in svg
