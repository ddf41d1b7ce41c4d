"""Issue 21 item 3: ``/api/v1/jobs`` filters by status, kind and submitter and rejects unknown query parameters
(as ``/runs`` does); the ``/jobs`` page lists the jobs with those filters, links each job and its results, and
cancels an unfinished job with the CSRF token its form carries (role 'runner')."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.report.htmlparse import ReportParser
from tests.service.test_web_pages import assert_accessible, logged_in

BENCH_ID = "be" * 16
CANCEL_FORM = re.compile(
    r'<form method="post" action="/jobs/([0-9a-f]+)/cancel">\s*'
    r'<input type="hidden" name="csrf_token" value="([^"]+)">'
)


@pytest.fixture
def jobs(service_app: Any, tokens: dict[str, str]) -> dict[str, str]:
    """Four jobs: an evaluation queued and a diff running (test-runner), a bench that succeeded (test-runner), a
    pitfalls job of 'alice' that failed."""
    from repliscope.store.service_tables import create_job, update_job

    store = service_app.state.store
    ref = "efficientnet-lite0@1.0.0"
    ids = {}
    for kind, user in (
        ("evaluate", "test-runner"),
        ("bench", "test-runner"),
        ("pitfalls", "alice"),
        ("diff", "test-runner"),
    ):
        ids[kind] = create_job(store, kind, ref, "onnxruntime", "foolbox_imagenet", {}, created_by=user).id
    update_job(store, ids["bench"], status="succeeded", progress_total=20, progress_done=20, result_ids=[BENCH_ID])
    url = service_app.state.config.db_url
    update_job(
        store,
        ids["pitfalls"],
        status="failed",
        error=f"the run database {url} is read-only",
        append_log=f"error: the run database {url} is read-only",
    )
    update_job(store, ids["diff"], status="running", progress_total=4, progress_done=1)
    return ids


def test_the_jobs_api_filters_and_rejects_unknown_parameters(
    client: TestClient, jobs: dict[str, str], headers_for: Callable[[str], dict[str, str]]
) -> None:
    viewer = headers_for("viewer")

    def kinds(**params: str) -> list[str]:
        r = client.get("/api/v1/jobs", params=params, headers=viewer)
        assert r.status_code == 200, r.text
        return [j["kind"] for j in r.json()]

    assert sorted(kinds()) == ["bench", "diff", "evaluate", "pitfalls"]
    assert kinds(kind="bench") == ["bench"]
    assert kinds(user="alice") == ["pitfalls"]
    assert sorted(kinds(user="test-runner")) == ["bench", "diff", "evaluate"]
    assert kinds(status="running") == ["diff"]
    assert kinds(status="queued", user="test-runner") == ["evaluate"]
    assert kinds(user="nobody") == []
    failed = client.get(f"/api/v1/jobs/{jobs['pitfalls']}", headers=viewer).json()
    assert failed["error"] == "the run database the run store is read-only"
    log = client.get(f"/api/v1/jobs/{jobs['pitfalls']}/log", headers=viewer).text
    assert log == "error: the run database the run store is read-only\n" and "sqlite" not in log
    r = client.get("/api/v1/jobs", params={"kidn": "bench"}, headers=viewer)
    assert r.status_code == 422
    assert r.json()["error"] == {
        "message": "unknown query parameter 'kidn' (allowed: kind, limit, status, user)",
        "field": "query.kidn",
        "code": "invalid",
    }
    r = client.get("/api/v1/jobs", params={"kind": "train"}, headers=viewer)
    assert r.status_code == 422 and r.json()["error"]["field"] == "query.kind"


def test_the_jobs_page_lists_filters_and_links(service_app: Any, tokens: dict[str, str], jobs: dict[str, str]) -> None:
    web = logged_in(service_app, tokens["viewer"])
    r = web.get("/jobs")
    assert r.status_code == 200
    p = ReportParser()
    p.feed(r.text)
    rows = p.tables["jobs-table"].rows
    assert [row[1] for row in rows] == ["diff", "pitfalls", "bench", "evaluate"]  # newest first
    assert [row[5] for row in rows] == ["running", "failed", "succeeded", "queued"]
    assert [row[6] for row in rows] == ["1 / 4", "0 / ?", "20 / 20", "0 / ?"]
    assert rows[1][9] == "the run database the run store is read-only"  # no database URL (issue 21 item 6)
    for job_id in jobs.values():
        assert f'href="/jobs/{job_id}"' in r.text
    assert f'href="/benchmarks/{BENCH_ID}"' in r.text
    assert "Cancel" not in r.text  # a viewer cannot cancel
    assert '<a href="/jobs">Jobs</a>' in r.text  # in the main navigation
    assert_accessible(r.text)
    only = web.get("/jobs", params={"kind": "bench", "user": "test-runner"}).text
    assert f'href="/jobs/{jobs["bench"]}"' in only and f'href="/jobs/{jobs["evaluate"]}"' not in only
    assert 'value="bench" selected' in only and "1 job." in only
    bad = web.get("/jobs", params={"status": "done"})
    assert bad.status_code == 422
    assert (
        "status &#39;done&#39; is not a job status (allowed: queued, running, succeeded, failed, cancelled)" in bad.text
    )
    assert web.get("/jobs", params={"owner": "x"}).status_code == 422


def test_a_runner_cancels_from_the_jobs_page_with_its_csrf_token(
    service_app: Any, tokens: dict[str, str], jobs: dict[str, str]
) -> None:
    viewer = logged_in(service_app, tokens["viewer"])
    web = logged_in(service_app, tokens["runner"])
    forms = CANCEL_FORM.findall(web.get("/jobs").text)
    assert sorted(job_id for job_id, _ in forms) == sorted([jobs["evaluate"], jobs["diff"]])  # unfinished only
    token = forms[0][1]
    refused = web.post(f"/jobs/{jobs['evaluate']}/cancel", data={"csrf_token": "forged"}, follow_redirects=False)
    assert refused.status_code == 403 and "CSRF token missing or wrong" in refused.text
    viewer_token = re.search(r'name="csrf_token" value="([^"]+)"', viewer.get("/jobs").text)
    assert viewer_token is not None
    as_viewer = viewer.post(
        f"/jobs/{jobs['evaluate']}/cancel", data={"csrf_token": viewer_token.group(1)}, follow_redirects=False
    )
    assert as_viewer.status_code == 403 and "needs the role &#39;runner&#39;" in as_viewer.text
    anonymous = TestClient(service_app).post(
        f"/jobs/{jobs['evaluate']}/cancel", data={"csrf_token": token}, follow_redirects=False
    )
    assert anonymous.status_code in (303, 403)  # no cookie: never reaches the route
    from repliscope.store.service_tables import get_job

    store = service_app.state.store
    assert get_job(store, jobs["evaluate"]).status == "queued"
    done = web.post(f"/jobs/{jobs['evaluate']}/cancel", data={"csrf_token": token}, follow_redirects=False)
    assert done.status_code == 303 and done.headers["location"] == "/jobs"
    assert get_job(store, jobs["evaluate"]).status == "cancelled"
    again = web.post(f"/jobs/{jobs['bench']}/cancel", data={"csrf_token": token}, follow_redirects=False)
    assert again.status_code == 409 and f"job {jobs['bench']} already succeeded" in again.text
