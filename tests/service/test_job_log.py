"""Issue 36 item 8, the job page: each log line is stored with its time (UTC), level and source
(:mod:`repliscope.service.job_log`; logs stored before read as lines without a time), the job page shows them as a
table (never raw JSON; HTML and terminal escapes inert), with the job's state, progress, rate, ETA, options, results
and a Cancel that records who asked; ``/jobs/{id}/log.txt`` downloads the whole log as text.

The cancel rule: a viewer may not cancel (403, even from a forged form); every form needs the CSRF token; a runner may
cancel any runner's job, not only their own (a team's queue: a stuck job must not wait for an admin), and the log
says who did, when."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from repliscope.errors import RepliscopeError
from repliscope.service import executor as executor_module
from repliscope.service import job_log
from repliscope.service.executor import DaskJobExecutor, ThreadJobExecutor
from repliscope.store.repository import RunStore
from repliscope.store.service_tables import create_job, get_job, update_job
from tests.service.test_web_pages import a11y, assert_accessible, logged_in

REF = "efficientnet-lite0@1.0.0"
HOSTILE = '<script>alert("x")</script> \x1b[31mred\x1b[0m \x1b]0;owned\x07title \x07bell'
ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


# --- the format --------------------------------------------------------------------------------------------------


def test_a_stored_line_carries_time_level_and_source_and_old_lines_still_read() -> None:
    stored = job_log.entries("loading the model\nwarning: 2 samples unreadable", "agent a1", at="2026-11-29T09:35:17Z")
    first, _ = stored.splitlines()
    assert json.loads(first) == {
        "v": 1,
        "t": "2026-11-29T09:35:17Z",
        "level": "info",
        "source": "agent a1",
        "msg": "loading the model",
    }
    old = "evaluate lite0@1 on onnxruntime\nerror: the run database is read-only\n"
    lines = job_log.parse(old + stored + "\n" + job_log.entries("internal error 0123456789ab: ValueError") + "\n")
    assert [(x.time, x.level, x.source, x.message) for x in lines[:4]] == [
        (None, "info", "", "evaluate lite0@1 on onnxruntime"),
        (None, "error", "", "error: the run database is read-only"),
        ("2026-11-29T09:35:17Z", "info", "agent a1", "loading the model"),
        ("2026-11-29T09:35:17Z", "warning", "agent a1", "warning: 2 samples unreadable"),
    ]
    assert lines[4].level == "error" and lines[4].source == "service" and ISO.match(lines[4].time or "")
    assert job_log.messages(old + stored) == (
        "evaluate lite0@1 on onnxruntime\nerror: the run database is read-only\n"
        "loading the model\nwarning: 2 samples unreadable\n"
    )
    text = job_log.as_text(old + stored)
    assert text.splitlines()[0] == "-                    info    [-] evaluate lite0@1 on onnxruntime"
    assert text.splitlines()[2] == "2026-11-29T09:35:17Z info    [agent a1] loading the model"
    with pytest.raises(ValueError, match=r"level 'loud' is not a log level \(allowed: info, warning, error\)"):
        job_log.entries("x", level="loud")


def test_a_line_that_only_looks_like_a_stored_one_reads_as_plain_text() -> None:
    """An old log line (or a broken one) starting like JSON is a message, never a forged time/level/source."""
    forged = '{"v":1,"t":"1999-01-01T00:00:00Z","level":"error","source":"admin"'  # cut: not JSON
    other = '{"level": "error", "msg": "no version"}'
    lines = job_log.parse(f"{forged}\n{other}\n")
    assert [(x.time, x.source, x.message) for x in lines] == [(None, "", forged), (None, "", other)]


def test_an_agents_line_cannot_forge_a_stored_line() -> None:
    """A line an agent sends that holds a stored line of its own (a forged time, level, source and cancel) is one
    message of its real source: its newline splits it into two messages, each wrapped."""
    forged = '{"v":1,"t":"1999-01-01T00:00:00Z","level":"error","source":"admin","msg":"x","event":"cancel","by":"eve"}'
    log = job_log.entries(f"ok\n{forged}", "agent a1") + "\n"
    lines = job_log.parse(log)
    assert [(x.source, x.level, x.message) for x in lines] == [("agent a1", "info", "ok"), ("agent a1", "info", forged)]
    assert lines[1].time != "1999-01-01T00:00:00Z" and job_log.cancel_note(log) is None


def test_terminal_escapes_and_control_characters_are_removed() -> None:
    [line] = job_log.parse(job_log.entries(HOSTILE))
    assert line.message == '<script>alert("x")</script> red title bell'  # HTML: the template escapes it
    assert job_log.clean("a\tb\x00c\x9b2Jd\r") == "a\tbcd"


def test_a_cancel_request_records_who_and_when() -> None:
    log = job_log.entries("started") + "\n"
    assert job_log.cancel_note(log) is None
    log += job_log.entries("cancel requested by bob", event="cancel", by="bob", at="2026-11-29T10:00:00Z") + "\n"
    note = job_log.cancel_note(log)
    assert note is not None and (note.by, note.time) == ("bob", "2026-11-29T10:00:00Z")


def test_the_agents_lines_are_sourced_by_agent_and_shard() -> None:
    tracker = job_log.SourceTracker()
    said = [
        "submitted to 2 qualifying agent(s): a1, a2",
        "running on agent a1",
        "loading the model",
        "[shard 1/2] submitted to 1 qualifying agent(s): a2",
        "[shard 1/2] running on agent a2",
        "[shard 1/2] warning: a sample failed",
        "merged 2 shard(s) (a1, a2) into one record in 0.010 s",
    ]
    assert [tracker.split(line) for line in said] == [
        ("service", "submitted to 2 qualifying agent(s): a1, a2"),
        ("agent a1", "running on agent a1"),
        ("agent a1", "loading the model"),
        ("shard 1/2", "submitted to 1 qualifying agent(s): a2"),
        ("agent a2, shard 1/2", "running on agent a2"),
        ("agent a2, shard 1/2", "warning: a sample failed"),
        ("service", "merged 2 shard(s) (a1, a2) into one record in 0.010 s"),
    ]


# --- what the executors write ---------------------------------------------------------------------------------


@pytest.fixture
def store(tmp_path: Path) -> Iterator[RunStore]:
    with RunStore(f"sqlite:///{tmp_path / 'jobs.db'}") as s:
        yield s


def _wait(condition: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def _spec(job_id: str) -> Any:
    from tests.test_jobs import tiny_job

    return tiny_job(job_id, limit=1)


def test_the_in_process_executor_writes_timed_levelled_lines(store: RunStore, monkeypatch: pytest.MonkeyPatch) -> None:
    def failing(job: Any, cache_dir: Any, on_progress: Any, log: Any, **_: Any) -> Any:
        log("loading the model")
        log("warning: 1 sample could not be decoded")
        raise RepliscopeError("the dataset folder is empty")

    monkeypatch.setattr(executor_module, "execute_job", failing)
    spec = _spec("thread-1")
    create_job(store, spec.kind, spec.manifest_ref, spec.runtime, spec.dataset_name, {}, job_id=spec.job_id)
    jobs = ThreadJobExecutor(store)
    try:
        jobs.submit(spec)
        _wait(lambda: get_job(store, "thread-1").status == "failed")
    finally:
        jobs.shutdown(wait=True)
    lines = job_log.parse(get_job(store, "thread-1").log)
    assert [(x.level, x.source, x.message) for x in lines] == [
        ("info", "service", f"evaluate {spec.manifest_ref} on {spec.runtime}, dataset {spec.dataset_name}"),
        ("info", "service", "loading the model"),
        ("warning", "service", "warning: 1 sample could not be decoded"),
        ("error", "service", "error: the dataset folder is empty"),
    ]
    assert all(ISO.match(x.time or "") for x in lines)


def test_the_agents_lines_carry_their_agent(store: RunStore, monkeypatch: pytest.MonkeyPatch) -> None:
    from repliscope.agents import submit

    def agent_run(cluster: Any, job: Any, constraints: Any, **kw: Any) -> Any:
        for line in (
            "submitted to 1 qualifying agent(s): a1",
            "running on agent a1",
            "loading",
            "agent a1: ValueError: x",
        ):
            kw["log"](line)
        raise submit.JobFailedEverywhere(job.job_id, {"a1": "ValueError: x"})

    monkeypatch.setattr(submit, "submit_job", agent_run)
    monkeypatch.setattr(DaskJobExecutor, "constraints", lambda self, job: None)
    spec = _spec("dask-1")
    create_job(store, spec.kind, spec.manifest_ref, spec.runtime, spec.dataset_name, {}, job_id=spec.job_id)
    jobs = DaskJobExecutor(store, cluster=object())
    try:
        jobs.submit(spec)
        _wait(lambda: get_job(store, "dask-1").status == "failed")
    finally:
        jobs.shutdown(wait=True)
    lines = job_log.parse(get_job(store, "dask-1").log)
    assert [(x.level, x.source) for x in lines[:5]] == [
        ("info", "service"),
        ("info", "service"),
        ("info", "agent a1"),
        ("info", "agent a1"),
        ("error", "agent a1"),
    ]
    assert lines[-1].level == "error" and lines[-1].message.startswith("error: ")


# --- the job page --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def app_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """One app for the module's page tests (each test makes its own jobs): a tmp store, tokens of each role."""
    from repliscope.service.app import create_app
    from repliscope.service.config import ServiceConfig
    from repliscope.service.startup import first_start
    from repliscope.store.accounts import create_token

    root = tmp_path_factory.mktemp("job-log")
    app = create_app(ServiceConfig(db_url=f"sqlite:///{root / 'service.db'}", cache_dir=root / "cache"))
    admin, _ = first_start(app.state.store)
    tokens = {
        "viewer": create_token(app.state.store, "test-viewer", "viewer"),
        "runner": create_token(app.state.store, "test-runner", "runner"),
        "admin": admin,
    }
    try:
        yield {"app": app, "tokens": tokens}
    finally:
        app.state.executor.shutdown(wait=True)
        app.state.cluster.close()


@pytest.fixture
def web(app_env: dict[str, Any]) -> dict[str, Any]:
    """A running job of 'alice' (a runner) with old and new log lines, options, a hostile line; a finished one."""
    service_app, tokens = app_env["app"], app_env["tokens"]
    store = service_app.state.store
    options = {"limit": 40, "requires": ["onnxruntime>=1.20"], "download": False}
    running = create_job(store, "evaluate", REF, "onnxruntime", "foolbox_imagenet", options, created_by="alice").id
    update_job(store, running, status="running", progress_total=40, append_log="an old line with no time")
    update_job(store, running, append_log=job_log.entries("loading the model", "agent a1"))
    update_job(store, running, append_log=job_log.entries(HOSTILE, "agent a1"))
    update_job(store, running, append_log=job_log.entries("error: sample 3 could not be decoded", "agent a1"))
    update_job(store, running, progress_done=10)
    finished = create_job(store, "evaluate", REF, "onnxruntime", "foolbox_imagenet", {}, created_by="alice").id
    update_job(store, finished, status="succeeded", progress_total=2, progress_done=2, result_ids=["ab" * 16])
    return {"app": service_app, "store": store, "tokens": tokens, "running": running, "finished": finished}


def test_the_job_page_shows_the_log_as_a_table_with_state_progress_and_options(web: dict[str, Any]) -> None:
    client = logged_in(web["app"], web["tokens"]["viewer"])
    html = client.get(f"/jobs/{web['running']}").text
    assert_accessible(html)
    page = a11y(html)
    assert page.text_of("job-status") == "running" and page.text_of("job-progress-text") == "10 / 40"
    assert re.fullmatch(
        r"10 of 40 samples, [0-9.e+]+ samples/s, about .+ left\. Started .+ UTC\.", page.text_of("job-rate")
    )
    assert re.findall(r"<dt>(.*?)</dt><dd>(.*?)</dd>", html) == [
        ("download", "no"),
        ("limit", "40"),
        ("requires", "onnxruntime&gt;=1.20"),
    ]
    rows = re.findall(r'<tr class="log-(\w+)"><td class="num">(.*?)</td>\s*<td>(\w+)</td><td>(.*?)</td>', html)
    assert [(r[0], r[2], r[3]) for r in rows] == [
        ("info", "info", "—"),
        ("info", "info", "agent a1"),
        ("info", "info", "agent a1"),
        ("error", "error", "agent a1"),
    ]
    assert rows[0][1] == "—" and re.fullmatch(r'<time datetime="[0-9TZ:-]{20}">\d\d:\d\d:\d\d</time>', rows[1][1])
    # the hostile line: escaped HTML, no escape sequence, no raw JSON anywhere on the page
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt; red title bell" in html
    assert "<script>alert" not in html and "\x1b" not in html and "\x07" not in html
    assert '"msg":' not in html and "&#34;msg&#34;" not in html and '{"v"' not in html and "&#34;v&#34;" not in html
    assert "an old line with no time" in page.text_of("job-log")
    assert 'id="job-cancel' not in html  # a viewer has no cancel button
    assert 'src="/static/job.js"' in html and "<script>" not in html.split('src="/static/job.js"')[0]


def test_the_whole_log_downloads_as_text(web: dict[str, Any]) -> None:
    client = logged_in(web["app"], web["tokens"]["viewer"])
    r = client.get(f"/jobs/{web['running']}/log.txt")
    assert r.status_code == 200 and r.headers["content-type"] == "text/plain; charset=utf-8"
    assert r.headers["content-disposition"] == f'attachment; filename="job-{web["running"]}.log.txt"'
    assert r.headers["x-content-type-options"] == "nosniff"
    lines = r.text.splitlines()
    assert lines[0] == "-                    info    [-] an old line with no time"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ info    \[agent a1\] loading the model", lines[1])
    assert lines[2].endswith('[agent a1] <script>alert("x")</script> red title bell') and "\x1b" not in r.text
    assert lines[3].split()[1] == "error"
    assert client.get("/jobs/nope/log.txt").status_code == 404
    assert client.get(f"/jobs/{'a' * 101}/log.txt").status_code == 404
    # the API's log stays the messages, one a line, as before the format
    api = client.get(
        f"/api/v1/jobs/{web['running']}/log", headers={"Authorization": f"Bearer {web['tokens']['viewer']}"}
    )
    assert api.text.splitlines()[:2] == ["an old line with no time", "loading the model"]


def _cancel_form(html: str) -> dict[str, str]:
    form = re.search(r'<form method="post" action="/jobs/(\w+)/cancel">(.*?)</form>', html, re.S)
    assert form is not None, "no cancel form on the page"
    return dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)">', form.group(2)))


def test_a_runner_cancels_another_runners_job_and_the_page_says_who_and_when(web: dict[str, Any]) -> None:
    client = logged_in(web["app"], web["tokens"]["runner"])  # test-runner, not alice
    html = client.get(f"/jobs/{web['running']}").text
    assert_accessible(html)
    fields = _cancel_form(html)
    assert fields["next"] == f"/jobs/{web['running']}"
    assert "Yes, cancel job" in html and '<details id="job-cancel-box">' in html  # a confirmation step
    r = client.post(f"/jobs/{web['running']}/cancel", data=fields, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == f"/jobs/{web['running']}"
    page = client.get(f"/jobs/{web['running']}").text
    job = get_job(web["store"], web["running"])
    assert job.status == "cancelled" and job.finished_at is not None  # no executor ran it: cancelled at once
    stamp = f"{job.finished_at:%Y-%m-%d %H:%M:%S} UTC"
    assert a11y(page).text_of("job-cancel-note") == f"— cancelled by test-runner at {stamp}"
    assert '<button type="button" id="job-cancel" disabled>Cancel</button>' in page
    levels = [(x.level, x.message) for x in job_log.parse(job.log)[-2:]]
    assert levels == [
        ("warning", "cancel requested by test-runner"),
        ("warning", "cancelled (no executor was running it)"),
    ]
    again = client.post(f"/jobs/{web['running']}/cancel", data=fields, follow_redirects=False)
    assert again.status_code == 409 and "already cancelled" in again.text


def test_a_viewer_and_a_form_without_its_token_cannot_cancel(web: dict[str, Any]) -> None:
    runner = logged_in(web["app"], web["tokens"]["runner"])
    fields = _cancel_form(runner.get(f"/jobs/{web['running']}").text)
    viewer = logged_in(web["app"], web["tokens"]["viewer"])
    r = viewer.post(f"/jobs/{web['running']}/cancel", data={**fields, "csrf_token": viewer.page_csrf("/x")})
    assert r.status_code == 403 and "needs the role &#39;runner&#39;" in r.text
    r = runner.post(f"/jobs/{web['running']}/cancel", data={"next": fields["next"]})
    assert r.status_code == 403 and "CSRF token missing or wrong" in r.text
    r = runner.post(f"/jobs/{web['running']}/cancel", data={**fields, "csrf_token": "forged"})
    assert r.status_code == 403
    job = get_job(web["store"], web["running"])
    assert job.status == "running" and job_log.cancel_note(job.log) is None


def test_a_finished_jobs_cancel_is_disabled_and_its_result_links_its_artifacts(web: dict[str, Any]) -> None:
    client = logged_in(web["app"], web["tokens"]["admin"])
    html = client.get(f"/jobs/{web['finished']}").text
    assert_accessible(html)
    assert '<button type="button" id="job-cancel" disabled>Cancel</button>' in html
    assert 'data-final="yes"' in html and '<form method="post" action="/jobs/' not in html
    run = "ab" * 16
    assert f'id="job-run-link" href="/runs/{run}"' in html and f'href="/runs/{run}/artifacts"' in html
    assert a11y(html).text_of("job-log") == "No log line yet."
    # a diff's and a benchmark's artifacts too, each under its own page
    store = web["store"]
    for kind, result, artifacts in (("diff", "cd" * 16, "/diffs/"), ("bench", "ef" * 16, "/runs/")):
        job = create_job(store, kind, REF, "onnxruntime", "foolbox_imagenet", {}, created_by="alice").id
        update_job(store, job, status="succeeded", result_ids=[result])
        assert f'href="{artifacts}{result}/artifacts">its artifacts</a>' in client.get(f"/jobs/{job}").text


def test_rate_and_eta_come_from_the_jobs_times(web: dict[str, Any]) -> None:
    from repliscope.service.web.job_pages import job_view
    from repliscope.store.models import JobRow

    with web["store"].db.session(write=True) as session:
        row = session.get(JobRow, web["running"])
        row.started_at = row.started_at - timedelta(seconds=20)  # 10 samples in ~20 s: 0.5/s, 30 left: ~60 s
    view = job_view(web["store"], web["running"])
    assert view is not None and view.rate is not None and view.eta is not None
    assert 0.45 <= float(view.rate.split()[0]) <= 0.5
    assert view.eta in ("about 1 min 0 s", "about 1 min 1 s", "about 1 min 2 s", "about 59 s")
