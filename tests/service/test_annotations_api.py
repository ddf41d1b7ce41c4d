"""Run annotations through ``/api/v1`` and the web pages (``routers/annotations.py``, ``web/annotations.py``), with
hostile callers: the wrong role, no CSRF token, another origin, oversized and malformed bodies, a note holding
HTML; a deleted run gone from every list and page while the audit keeps it. One app for the module (cheap)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from html import unescape
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient

from tests.service.conftest import WebClient, app_with_role_tokens, reset_runs
from tests.service.test_web_pages import a11y, assert_accessible
from tests.store.records import TOP1_A, TOP1_B, make_record

RUN_A = "a7" * 16
RUN_B = "b7" * 16
XSS = '<script>document.title="owned"</script><img src=x onerror=alert(1)>'


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with app_with_role_tokens(tmp_path_factory.mktemp("annotations"), viewer="vera", runner="rui") as application:
        yield application


@pytest.fixture
def api(app: Any) -> Iterator[tuple[TestClient, Any]]:
    """A client and a header maker over two fresh runs (annotations, audit and the pages' caches emptied)."""
    reset_runs(app, make_record(RUN_A, TOP1_A), make_record(RUN_B, TOP1_B, runtime="torch"))
    tokens = app.state.test_tokens

    def headers(role: str, **extra: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {tokens[role]}", **extra}

    with TestClient(app) as client:
        yield client, headers


def err(response: Any) -> dict[str, Any]:
    error: dict[str, Any] = response.json()["error"]
    return error


def _login(app: Any, role: str) -> WebClient:
    client = WebClient(app)
    r = client.post("/login", data={"token": app.state.test_tokens[role], "next": "/runs"}, follow_redirects=False)
    assert r.status_code == 303
    return client


def _csrf(page: str) -> str:
    found = re.search(r'name="csrf_token" value="([^"]+)"', page)
    assert found is not None
    return found.group(1)


def test_roles_tags_notes_rename_and_the_list_filters(api: tuple[TestClient, Any]) -> None:
    client, headers = api
    r = client.put(f"/api/v1/runs/{RUN_A}/tags/baseline", headers=headers("viewer"))
    assert r.status_code == 403 and err(r)["code"] == "forbidden"
    r = client.put(f"/api/v1/runs/{RUN_A[:8]}/tags/baseline", headers=headers("runner"))
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["run_id"], [t["tag"] for t in body["tags"]], body["tags"][0]["added_by"]) == (
        RUN_A,
        ["baseline"],
        "rui",
    )
    assert body["tags"][0]["added_at"].endswith("Z")
    client.put(f"/api/v1/runs/{RUN_B}/tags/paper:table-3", headers=headers("runner"))
    r = client.put(f"/api/v1/runs/{RUN_A}/note", json={"note": "first"}, headers=headers("runner"))
    assert r.status_code == 200 and r.json()["note_by"] == "rui"
    r = client.put(f"/api/v1/runs/{RUN_A}/note", json={"note": "Second: BGR fixed"}, headers=headers("runner"))
    assert [v["note"] for v in r.json()["note_history"]] == ["Second: BGR fixed", "first"]
    r = client.patch(f"/api/v1/runs/{RUN_A}", json={"display_name": "lite0 ref"}, headers=headers("runner"))
    assert r.status_code == 403  # rename: admin only
    r = client.patch(f"/api/v1/runs/{RUN_A}", json={"display_name": "lite0 ref"}, headers=headers("admin"))
    assert r.status_code == 200 and r.json()["display_name"] == "lite0 ref"
    # the record itself is unchanged: its manifest name and result hash
    record = client.get(f"/api/v1/runs/{RUN_A}", headers=headers("viewer")).json()
    assert record["manifest"]["name"] == "efficientnet-lite0"
    assert record["result_hash"] == make_record(RUN_A, TOP1_A).result_hash

    def listed(**params: str) -> list[tuple[str, Any, list[str]]]:
        r = client.get("/api/v1/runs", params=params, headers=headers("viewer"))
        assert r.status_code == 200, r.text
        return [(i["run_id"], i["display_name"], i["tags"]) for i in r.json()["items"]]

    assert listed(tag="baseline") == [(RUN_A, "lite0 ref", ["baseline"])]
    assert listed(search="TABLE-3") == [(RUN_B, None, ["paper:table-3"])]
    assert listed(search="bgr fixed") == [(RUN_A, "lite0 ref", ["baseline"])]
    assert listed(search="lite0 ref") == [(RUN_A, "lite0 ref", ["baseline"])]
    r = client.get("/api/v1/runs", params={"tag": "two words"}, headers=headers("viewer"))
    assert r.status_code == 422 and err(r)["field"] == "query.tag"
    r = client.delete(f"/api/v1/runs/{RUN_A}/tags/baseline", headers=headers("runner"))
    assert r.status_code == 200 and r.json()["tags"] == []
    r = client.delete(f"/api/v1/runs/{RUN_A}/tags/baseline", headers=headers("runner"))
    assert r.status_code == 404 and "has no tag 'baseline'" in err(r)["message"]
    r = client.get("/api/v1/audit", params={"run_id": RUN_A}, headers=headers("admin"))
    assert [(e["action"], e["actor"], e["via"]) for e in r.json()["items"]] == [
        ("untag", "rui", "api"),
        ("rename", "admin", "api"),
        ("note", "rui", "api"),
        ("note", "rui", "api"),
        ("tag", "rui", "api"),
    ]
    assert client.get("/api/v1/audit", headers=headers("runner")).status_code == 403


@pytest.mark.parametrize(
    ("tag", "field"),
    [("two words", "path.tag"), ("bell\u0007", "path.tag"), ("zero\u200bwidth", "path.tag"), ("x" * 65, "path.tag")],
)
def test_bad_tags_are_422_naming_the_field(api: tuple[TestClient, Any], tag: str, field: str) -> None:
    client, headers = api
    r = client.put(f"/api/v1/runs/{RUN_A}/tags/{quote(tag, safe='')}", headers=headers("runner"))
    assert r.status_code == 422 and err(r)["field"] == field
    assert "a tag is 1 to 64 characters" in err(r)["message"]
    assert client.get(f"/api/v1/runs/{RUN_A}/annotations", headers=headers("viewer")).json()["tags"] == []


def test_bodies_are_bounded_before_they_are_read(api: tuple[TestClient, Any]) -> None:
    client, headers = api
    huge = b'{"note": "' + b"x" * 70_000 + b'"}'
    r = client.put(
        f"/api/v1/runs/{RUN_A}/note", content=huge, headers=headers("runner", **{"Content-Type": "application/json"})
    )
    assert r.status_code == 413 and err(r)["field"] == "body"
    r = client.put(f"/api/v1/runs/{RUN_A}/note", json={"note": "x" * 10_001}, headers=headers("runner"))
    assert r.status_code == 422 and err(r)["field"] == "body.note" and "10000" in err(r)["message"]
    r = client.put(f"/api/v1/runs/{RUN_A}/note", json={"note": "nul \x00 inside"}, headers=headers("runner"))
    assert r.status_code == 422 and err(r)["field"] == "body.note" and "U+0000" in err(r)["message"]
    r = client.put(f"/api/v1/runs/{RUN_A}/note", json={"text": "wrong key"}, headers=headers("runner"))
    assert r.status_code == 422 and err(r)["field"].startswith("body.")
    r = client.put(f"/api/v1/runs/{RUN_A}/note", content=b"note=x", headers=headers("runner"))
    assert r.status_code == 415
    r = client.patch(f"/api/v1/runs/{RUN_A}", json={"display_name": "n" * 201}, headers=headers("admin"))
    assert r.status_code == 422 and err(r)["field"] == "body.display_name"
    # no token: refused before the body (the server-wide guard), a viewer: by role
    r = client.put(f"/api/v1/runs/{RUN_A}/note", json={"note": "anon"})
    assert r.status_code == 401
    r = client.put(f"/api/v1/runs/{RUN_A}/note", json={"note": "viewer"}, headers=headers("viewer"))
    assert r.status_code == 403
    assert client.get(f"/api/v1/audit?run_id={RUN_A}", headers=headers("admin")).json()["total"] == 0


def test_delete_is_admin_only_and_removes_the_run_everywhere(app: Any, api: tuple[TestClient, Any]) -> None:
    client, headers = api
    client.put(f"/api/v1/runs/{RUN_A}/tags/doomed", headers=headers("runner"))
    web = _login(app, "admin")
    assert web.get(f"/runs/{RUN_A}").status_code == 200  # the page's record is now cached
    assert client.delete(f"/api/v1/runs/{RUN_A}", headers=headers("runner")).status_code == 403
    r = client.delete("/api/v1/runs/ffffffffffff", headers=headers("admin"))
    assert r.status_code == 404 and err(r)["field"] == "run_id"
    r = client.delete(f"/api/v1/runs/{RUN_A}", headers=headers("admin"))
    assert r.status_code == 200, r.text
    entry = r.json()
    assert (entry["action"], entry["actor"], entry["run_id"], entry["after"]) == ("delete", "admin", RUN_A, None)
    assert entry["before"]["result_hash"] == make_record(RUN_A, TOP1_A).result_hash
    assert entry["before"]["tags"] == ["doomed"] and entry["before"]["metric_name"] == "top1"
    ids = [i["run_id"] for i in client.get("/api/v1/runs", headers=headers("viewer")).json()["items"]]
    assert ids == [RUN_B]
    assert client.get(f"/api/v1/runs/{RUN_A}", headers=headers("viewer")).status_code == 404
    assert web.get(f"/runs/{RUN_A}").status_code == 404
    assert RUN_A[:12] not in web.get("/runs").text
    audit = client.get("/api/v1/audit", params={"action": "delete"}, headers=headers("admin")).json()
    assert [e["run_id"] for e in audit["items"]] == [RUN_A]


def test_the_run_page_shows_annotations_as_text_and_its_forms_need_csrf(app: Any, api: tuple[TestClient, Any]) -> None:
    client, headers = api
    client.put(f"/api/v1/runs/{RUN_A}/note", json={"note": XSS}, headers=headers("runner"))
    viewer = _login(app, "viewer")
    page = viewer.get(f"/runs/{RUN_A}").text
    assert "<script>document.title" not in page and "<img src=x" not in page
    assert "&lt;script&gt;document.title=&#34;owned&#34;&lt;/script&gt;" in page
    assert unescape(a11y(page).text_of("run-note")) == " ".join(XSS.split())
    assert 'id="note-form"' not in page and 'id="delete-form"' not in page  # a viewer reads only
    assert_accessible(page)
    # a viewer's form post is refused by role, before the form is read
    csrf = _csrf(page)
    r = viewer.post(f"/runs/{RUN_A}/tags", data={"tags": "x", "csrf_token": csrf}, follow_redirects=False)
    assert r.status_code == 403
    runner = _login(app, "runner")
    page = runner.get(f"/runs/{RUN_A}").text
    assert 'id="note-form"' in page and 'id="delete-form"' not in page and 'href="/audit"' not in page
    csrf = _csrf(page)
    # no CSRF token, a wrong one, another origin: refused, nothing written
    assert runner.post(f"/runs/{RUN_A}/tags", data={"tags": "nocsrf"}).status_code == 403
    assert runner.post(f"/runs/{RUN_A}/tags", data={"tags": "bad", "csrf_token": "0" * 64}).status_code == 403
    r = runner.post(
        f"/runs/{RUN_A}/tags", data={"tags": "evil", "csrf_token": csrf}, headers={"Origin": "http://evil.example"}
    )
    assert r.status_code == 403
    assert client.get(f"/api/v1/runs/{RUN_A}/annotations", headers=headers("viewer")).json()["tags"] == []
    r = runner.post(f"/runs/{RUN_A}/tags", data={"tags": "good, paper:v2", "csrf_token": csrf}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == f"/runs/{RUN_A}#annotations"
    r = runner.post(f"/runs/{RUN_A}/tags", data={"tags": "has\u0007bell", "csrf_token": csrf})
    assert r.status_code == 422 and "a tag is 1 to 64 characters" in unescape(r.text)
    r = runner.post(
        f"/runs/{RUN_A}/note", data={"note": "line 1\r\nline 2", "csrf_token": csrf}, follow_redirects=False
    )
    assert r.status_code == 303
    r = runner.post(f"/runs/{RUN_A}/rename", data={"display_name": "mine", "csrf_token": csrf})
    assert r.status_code == 403
    r = runner.post(f"/runs/{RUN_A}/delete", data={"confirm": "yes", "csrf_token": csrf})
    assert r.status_code == 403
    page = runner.get(f"/runs/{RUN_A}").text
    p = a11y(page)
    assert p.text_of("run-tags").split()[:1] == ["good"] and "paper:v2" in p.text_of("run-tags")
    assert unescape(p.by_id["run-note"]) == "line 1\nline 2"
    assert "rui" in p.text_of("run-note-who")
    assert "Earlier notes (1)" in page
    assert_accessible(page)
    r = runner.post(f"/runs/{RUN_A}/tags/remove", data={"tag": "good", "csrf_token": csrf}, follow_redirects=False)
    assert r.status_code == 303
    runs = runner.get("/runs?tag=paper:v2").text
    assert RUN_A[:12] in runs and RUN_B[:12] not in runs
    assert runner.get("/audit").status_code == 403


def test_admin_renames_and_deletes_from_the_page(app: Any, api: tuple[TestClient, Any], tmp_path: Path) -> None:
    client, headers = api
    admin = _login(app, "admin")
    page = admin.get(f"/runs/{RUN_B}").text
    assert 'id="rename-form"' in page and 'id="delete-form"' in page and '<a href="/audit">Audit</a>' in page
    csrf = _csrf(page)
    r = admin.post(
        f"/runs/{RUN_B}/rename", data={"display_name": "torch <b>port</b>", "csrf_token": csrf}, follow_redirects=False
    )
    assert r.status_code == 303
    listing = admin.get("/runs").text
    assert "torch &lt;b&gt;port&lt;/b&gt;" in listing
    compared = admin.get(f"/compare?run={RUN_A}&run={RUN_B}")
    assert compared.status_code == 200 and "torch &lt;b&gt;port&lt;/b&gt;" in compared.text
    r = admin.post(f"/runs/{RUN_B}/delete", data={"csrf_token": csrf})  # the box not ticked
    assert r.status_code == 422 and "confirm" in r.text
    assert client.get(f"/api/v1/runs/{RUN_B}", headers=headers("viewer")).status_code == 200
    r = admin.post(f"/runs/{RUN_B}/delete", data={"confirm": "yes", "csrf_token": csrf}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == f"/runs?deleted={RUN_B}"
    landing = admin.get(r.headers["location"])
    assert landing.status_code == 200 and RUN_B[:12] in a11y(landing.text).text_of("runs-notice")
    assert f'href="/runs/{RUN_B}"' not in landing.text
    assert "was deleted" not in admin.get(f"/runs?deleted={RUN_A}").text  # not deleted: no notice
    assert admin.get(f"/runs/{RUN_B}").status_code == 404
    audit = admin.get("/audit")
    assert audit.status_code == 200
    rows = a11y(audit.text).text_of("audit-table")
    assert "delete" in rows and "rename" in rows and "deleted efficientnet-lite0 1.0.0, top1" in rows
    assert_accessible(audit.text)
    assert admin.get("/audit?action=drop").status_code == 422


def test_downloads_carry_names_and_tags_as_inert_text(api: tuple[TestClient, Any]) -> None:
    import csv
    import io

    client, headers = api
    hostile = '=HYPERLINK("http://evil.example","x")'
    client.patch(f"/api/v1/runs/{RUN_A}", json={"display_name": hostile}, headers=headers("admin"))
    client.put(f"/api/v1/runs/{RUN_A}/tags/paper:v2", headers=headers("runner"))
    client.put(f"/api/v1/runs/{RUN_A}/tags/baseline", headers=headers("runner"))
    text = client.get("/api/v1/runs/export?format=csv&tag=baseline", headers=headers("viewer")).text
    (row,) = list(csv.DictReader(io.StringIO(text)))
    assert (row["run_id"], row["display_name"], row["tags"]) == (RUN_A, "'" + hostile, "paper:v2 baseline")
    items = client.get("/api/v1/runs/export?format=json", headers=headers("viewer")).json()
    assert {i["run_id"]: (i["display_name"], i["tags"]) for i in items} == {
        RUN_A: (hostile, "paper:v2 baseline"),
        RUN_B: (None, ""),
    }


def test_a_run_deleted_by_another_process_is_not_compared_from_the_cache(app: Any, api: tuple[TestClient, Any]) -> None:
    """``repliscope runs delete`` next to a running server: its caches still hold the record, the pages ask."""
    client, headers = api
    viewer = _login(app, "viewer")
    assert viewer.get(f"/compare?run={RUN_A}&run={RUN_B}").status_code == 200  # both records cached now
    assert client.get(f"/api/v1/runs/compare?a={RUN_A}&b={RUN_B}", headers=headers("viewer")).status_code == 200
    app.state.store.annotations.delete_run(RUN_B, "someone", "cli")  # the CLI: no cache of this server forgets it
    page = viewer.get(f"/compare?run={RUN_A}&run={RUN_B}")
    assert page.status_code == 404 and f"unknown run id '{RUN_B}' (deleted)" in unescape(page.text)
    r = client.get(f"/api/v1/runs/compare?a={RUN_A}&b={RUN_B}", headers=headers("viewer"))
    assert r.status_code == 404 and err(r)["field"] == "run_id"
    assert viewer.get(f"/runs/{RUN_B}").status_code == 404
