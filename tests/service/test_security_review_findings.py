"""A security reviewer's findings in the run annotations, the pages' caches and the job log (one test a finding,
each written before its fix): what a deleted run leaves for a viewer, what a run stored again under a deleted run's
id shows, how much work a tag list or a job log makes the server do. One app for the module (cheap)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from html import unescape
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.service.conftest import WebClient, app_with_role_tokens, reset_runs
from tests.store.records import TOP1_A, TOP1_B, make_record

RUN_A = "c9" * 16
RUN_B = "d9" * 16
SECRET_NAME = "withdrawn-customer-acme-eval"
LEAKED_NOTE = "weights copied from /home/alice/private/acme.onnx"


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with app_with_role_tokens(tmp_path_factory.mktemp("security-review"), viewer="vic", runner="rana") as application:
        yield application


@pytest.fixture
def api(app: Any) -> Iterator[tuple[TestClient, Any]]:
    """A client and a header maker over two fresh runs (annotations, audit and the pages' caches emptied)."""
    reset_runs(app, make_record(RUN_A, TOP1_A), make_record(RUN_B, TOP1_B, runtime="torch"))
    tokens = app.state.test_tokens

    def headers(role: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {tokens[role]}"}

    with TestClient(app) as client:
        yield client, headers


def login(app: Any, role: str) -> WebClient:
    client = WebClient(app)
    r = client.post("/login", data={"token": app.state.test_tokens[role], "next": "/runs"}, follow_redirects=False)
    assert r.status_code == 303
    return client


def test_a_deleted_runs_notice_shows_the_audit_to_admins_only(app: Any, api: tuple[TestClient, Any]) -> None:
    """``/runs?deleted=ID`` reads the audit (admin only): a viewer who guesses or is sent the link must not learn
    the deleted run's display name, its model or who deleted it."""
    client, headers = api
    client.patch(f"/api/v1/runs/{RUN_B}", json={"display_name": SECRET_NAME}, headers=headers("admin"))
    assert client.delete(f"/api/v1/runs/{RUN_B}", headers=headers("admin")).status_code == 200
    for role in ("viewer", "runner"):
        page = login(app, role).get(f"/runs?deleted={RUN_B}")
        assert page.status_code == 200
        assert SECRET_NAME not in page.text and "was deleted by" not in page.text, role
        assert "efficientnet-lite0 1.0.0)" not in page.text
    admin = login(app, "admin").get(f"/runs?deleted={RUN_B}")
    assert f"({SECRET_NAME}) was deleted by admin" in unescape(admin.text)


def test_notes_of_a_deleted_run_do_not_come_back_with_its_id(app: Any, api: tuple[TestClient, Any]) -> None:
    """A deletion withdraws a run's notes; a run stored again under the same id (``runs import`` keeps the id)
    starts with no history: a viewer sees neither the old note nor its history, through the API or the page."""
    client, headers = api
    assert client.put(f"/api/v1/runs/{RUN_A}/note", json={"note": LEAKED_NOTE}, headers=headers("runner")).is_success
    client.put(f"/api/v1/runs/{RUN_A}/note", json={"note": "second"}, headers=headers("runner"))
    assert client.delete(f"/api/v1/runs/{RUN_A}", headers=headers("admin")).status_code == 200
    app.state.store.save(make_record(RUN_A, TOP1_A))
    body = client.get(f"/api/v1/runs/{RUN_A}/annotations", headers=headers("viewer")).json()
    assert (body["note"], body["note_history"]) == (None, [])
    page = login(app, "viewer").get(f"/runs/{RUN_A}")
    assert page.status_code == 200 and "alice" not in page.text and "second" not in page.text
    # notes written after the new store are its history; the admin's audit keeps the old ones
    client.put(f"/api/v1/runs/{RUN_A}/note", json={"note": "re-imported"}, headers=headers("runner"))
    body = client.get(f"/api/v1/runs/{RUN_A}/annotations", headers=headers("viewer")).json()
    assert [v["note"] for v in body["note_history"]] == ["re-imported"]
    audit = client.get("/api/v1/audit", params={"run_id": RUN_A, "action": "note"}, headers=headers("admin")).json()
    assert [e["after"]["note"] for e in audit["items"]] == ["re-imported", "second", LEAKED_NOTE]


def test_a_run_stored_again_after_its_deletion_is_not_drawn_from_the_cache(
    app: Any, api: tuple[TestClient, Any]
) -> None:
    """The run page's cached view (metrics, provenance, charts) was keyed by the run id alone: a run deleted to
    withdraw it and stored again under its id (a corrected record) kept showing the withdrawn one."""
    client, headers = api
    admin = login(app, "admin")
    before = admin.get(f"/runs/{RUN_A}")
    assert before.status_code == 200
    assert client.delete(f"/api/v1/runs/{RUN_A}", headers=headers("admin")).status_code == 200
    corrected = make_record(RUN_A, TOP1_B)
    assert corrected.result_hash != make_record(RUN_A, TOP1_A).result_hash
    app.state.store.save(corrected)
    from repliscope.report.build import build_run_view
    from repliscope.service.web.chart_cache import run_view

    fresh = build_run_view(corrected)
    shown = run_view(app.state.store, corrected)
    assert [(m.name, m.value) for m in shown.metrics] == [(m.name, m.value) for m in fresh.metrics]
    after = admin.get(f"/runs/{RUN_A}")
    assert after.status_code == 200
    for row in fresh.metrics:
        assert row.value in after.text


def test_more_tags_than_a_run_may_carry_are_refused_before_any_is_checked(
    app: Any, api: tuple[TestClient, Any]
) -> None:
    """One form field of a 1 MiB body holds 500,000 words: the count is refused first (422 naming ``tags`` and
    the limit), before each word is matched, so a tag list costs no more than 32 checks."""
    from repliscope.store.annotations import MAX_TAGS
    from repliscope.store.errors import InvalidInputError

    store = app.state.store
    words = [f"t{i}" for i in range(100_000)] + ["<script>"]
    with pytest.raises(InvalidInputError) as refused:
        store.annotations.add_tags(RUN_A, words, "rana", "web")
    assert refused.value.field == "tags"
    assert f"at most {MAX_TAGS} tags" in str(refused.value) and "100001" in str(refused.value)
    runner = login(app, "runner")
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', runner.get(f"/runs/{RUN_A}").text)
    assert csrf is not None
    r = runner.post(f"/runs/{RUN_A}/tags", data={"tags": " ".join(words[:40]), "csrf_token": csrf.group(1)})
    assert r.status_code == 422 and f"at most {MAX_TAGS} tags" in unescape(r.text)
    assert store.annotations.get(RUN_A).tags == []


def test_a_job_log_line_is_bounded_when_written(app: Any) -> None:
    """An agent's line is stored at most :data:`MAX_MESSAGE_CHARS` long, saying how much was cut."""
    from repliscope.service import job_log

    stored = job_log.entries("x" * 300_000 + "END", "agent a1")
    (line,) = job_log.parse(stored)
    assert len(line.message) <= job_log.MAX_MESSAGE_CHARS + 60
    assert line.message.endswith(f"[{300_003 - job_log.MAX_MESSAGE_CHARS} characters cut]")
    assert "END" not in line.message


def test_the_job_log_download_serves_a_bounded_tail(app: Any) -> None:
    """``/jobs/{id}/log.txt`` of a log grown past :data:`MAX_LOG_BYTES_SERVED` serves its newest lines within that
    bound, its first line saying how many earlier lines were left out; the page parses only what it shows."""
    from sqlalchemy import text

    from repliscope.service import job_log
    from repliscope.service.web.job_pages import LOG_LINES_SHOWN, MAX_LOG_BYTES_SERVED
    from repliscope.store.service_tables import create_job

    store = app.state.store
    job = create_job(store, "evaluate", "m@1", "onnxruntime", "foolbox_imagenet", {}, created_by="rana").id
    line = "y" * 1000
    count = MAX_LOG_BYTES_SERVED // 1000 + 2000
    lines = [job_log.entries("\n".join(f"{i} {line}" for i in range(count)), "agent a1")]
    lines.append(job_log.entries("the last line", "agent a1"))
    with store.engine.begin() as conn:  # a log stored before the store capped logs (8 MiB): written as it was
        conn.execute(text("UPDATE jobs SET log = :log WHERE id = :id"), {"log": "\n".join(lines) + "\n", "id": job})
    web = login(app, "viewer")
    r = web.get(f"/jobs/{job}/log.txt")
    assert r.status_code == 200
    assert len(r.content) <= MAX_LOG_BYTES_SERVED
    first, *rest = r.text.splitlines()
    left_out = count + 1 - len(rest)
    assert left_out > 0 and f"{left_out} earlier lines left out" in first
    assert rest[-1].endswith("the last line")
    page = web.get(f"/jobs/{job}")
    assert page.status_code == 200 and f"The newest {LOG_LINES_SHOWN} of {count + 1} lines." in unescape(page.text)


def test_pages_listing_stored_text_forbid_inline_and_foreign_scripts(app: Any, api: tuple[TestClient, Any]) -> None:
    """The charts (stored text inside inline SVG), the audit (every stored note and name) and the log download carry
    a policy that runs no inline or foreign script, also on their error pages (the pages' one, the log's stricter)."""
    from repliscope.service.guard import PAGE_CSP
    from repliscope.service.web.job_pages import LOG_CSP
    from repliscope.store.service_tables import create_job

    job = create_job(app.state.store, "evaluate", "m@1", "onnxruntime", "foolbox_imagenet", {}, created_by="rana").id
    viewer, admin = login(app, "viewer"), login(app, "admin")
    for client, path, status in (
        (viewer, "/charts", 200),
        (viewer, "/charts?limit=0", 422),
        (viewer, "/sweeps/nosuchsweep/parallel", 404),
        (admin, "/audit", 200),
        (viewer, "/audit", 403),
    ):
        r = client.get(path)
        assert r.status_code == status, path
        policy = r.headers["content-security-policy"]
        assert (
            policy == PAGE_CSP
            and "script-src 'self';" in policy
            and "'unsafe-inline'" not in policy.split("style-src")[0]
        ), path
        assert "frame-ancestors 'none'" in policy
    log = viewer.get(f"/jobs/{job}/log.txt")
    assert log.headers["content-security-policy"] == LOG_CSP == "sandbox; default-src 'none'; frame-ancestors 'none'"


def test_a_run_stored_again_after_its_deletion_is_not_served_from_the_artifacts_cache(
    app: Any, api: tuple[TestClient, Any]
) -> None:
    """Built artifacts are kept 120 s by (kind, id, role, name): a run deleted through this server and stored
    again under its id (a corrected record) served the withdrawn ``record.json`` until then."""
    import json

    client, headers = api
    admin = login(app, "admin")
    old = admin.get(f"/runs/{RUN_A}/artifacts/record.json")
    assert old.status_code == 200 and json.loads(old.content)["result_hash"] == make_record(RUN_A, TOP1_A).result_hash
    assert client.delete(f"/api/v1/runs/{RUN_A}", headers=headers("admin")).status_code == 200
    corrected = make_record(RUN_A, TOP1_B)
    app.state.store.save(corrected)
    new = admin.get(f"/runs/{RUN_A}/artifacts/record.json")
    assert new.status_code == 200 and json.loads(new.content)["result_hash"] == corrected.result_hash


def test_a_name_set_through_the_api_is_printed_as_text_by_the_cli(app: Any, api: tuple[TestClient, Any]) -> None:
    """``runs show|tag|note|rename`` printed the display name and who set it with Rich markup on: a name an admin
    token set through the API (``[/]``) crashed the command, and ``[link=...]`` made a terminal hyperlink."""
    from typer.testing import CliRunner

    from repliscope.cli.main import app as cli

    client, headers = api
    db = app.state.store.url
    hostile = "[link=https://evil.example]official results[/link] [/]"
    assert client.patch(f"/api/v1/runs/{RUN_A}", json={"display_name": hostile}, headers=headers("admin")).is_success
    assert client.put(f"/api/v1/runs/{RUN_A}/note", json={"note": "[/] n"}, headers=headers("runner")).is_success
    for args in (["runs", "show", RUN_A], ["runs", "tag", RUN_A, "t1", "--by", "[red]x[/red]"]):
        res = CliRunner(env={"COLUMNS": "200"}).invoke(cli, [*args, "--db", db])
        assert res.exit_code == 0, (args, res.output, res.exception)
        assert f"name: {hostile} (by admin," in res.stdout
        assert "\x1b]8;" not in res.stdout
    res = CliRunner(env={"COLUMNS": "200"}).invoke(cli, ["runs", "note", RUN_A, "x", "--by", "[/]", "--db", db])
    assert res.exit_code == 0 and "note (by [/]," in res.stdout


def test_a_run_replaced_by_another_process_is_not_compared_from_the_cache(
    app: Any, api: tuple[TestClient, Any]
) -> None:
    """The compare pages keep recent records by id (``HEADS``): a run deleted by another process (``repliscope
    runs delete``, which cannot reach this server's caches) and stored again corrected under its id kept being
    compared as the withdrawn record."""
    from repliscope.service.web.compare_cache import HEADS

    client, headers = api
    store = app.state.store
    first = client.get(f"/api/v1/runs/compare?a={RUN_A}&b={RUN_B}", headers=headers("viewer"))
    assert first.status_code == 200 and HEADS.get(store, RUN_A).result_hash == make_record(RUN_A, TOP1_A).result_hash
    store.annotations.delete_run(RUN_A, "someone", "cli")  # as the CLI does: no server cache is told
    corrected = make_record(RUN_A, TOP1_B)
    store.save(corrected)
    assert HEADS.get(store, RUN_A).result_hash == corrected.result_hash
    again = client.get(f"/api/v1/runs/compare?a={RUN_A}&b={RUN_B}", headers=headers("viewer"))
    assert again.status_code == 200 and again.json() != first.json()
    store.annotations.delete_run(RUN_A, "someone", "cli")
    gone = client.get(f"/api/v1/runs/compare?a={RUN_A}&b={RUN_B}", headers=headers("viewer"))
    assert gone.status_code == 404 and f"unknown run id '{RUN_A}' (deleted)" in gone.json()["error"]["message"]
