"""A job's results and the models pages' runs by their display names (``runs rename``), and a run deleted after its
job finished shown as deleted, never as a link to its gone page (``service/web/job_pages.result_links``,
``views.best_cell_names``)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from html import unescape
from pathlib import Path
from typing import Any

import pytest

from repliscope.store.service_tables import create_job, update_job
from tests.service.test_web_pages import assert_accessible, logged_in
from tests.store.records import TOP1_A, make_record

NAMED = "a1" * 16
DELETED = "d1" * 16
SWEEP = "5e" * 16  # a pitfalls job's sweep id: not a run's, keeps its link (it opens the reference run)
NAME = "Baseline <b>ORT</b> & co"  # markup in a name is text
REF = "efficientnet-lite0@1.0.0"


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """One app: a renamed run, a run deleted after its job stored it; an evaluation job with [deleted, named]
    and a pitfalls job with [sweep id, named]."""
    from repliscope.service.app import create_app
    from repliscope.service.config import ServiceConfig
    from repliscope.service.startup import first_start
    from repliscope.store.accounts import create_token

    root: Path = tmp_path_factory.mktemp("job-result-names")
    app = create_app(ServiceConfig(db_url=f"sqlite:///{root / 'service.db'}", cache_dir=root / "cache"))
    store = app.state.store
    admin, _ = first_start(store)
    viewer = create_token(store, "test-viewer", "viewer")
    store.save(make_record(NAMED, TOP1_A))
    store.save(make_record(DELETED, TOP1_A, runtime="torch"))
    store.annotations.rename(NAMED, NAME, "test-admin", "cli")
    evaluation = create_job(store, "evaluate", REF, "onnxruntime", "foolbox_imagenet", {}, created_by="alice").id
    update_job(store, evaluation, status="succeeded", progress_total=2, progress_done=2, result_ids=[DELETED, NAMED])
    sweep = create_job(store, "pitfalls", REF, "onnxruntime", "foolbox_imagenet", {}, created_by="alice").id
    update_job(store, sweep, status="succeeded", progress_total=2, progress_done=2, result_ids=[SWEEP, NAMED])
    store.annotations.delete_run(DELETED, "test-admin", "cli")
    try:
        yield {"app": app, "viewer": viewer, "admin": admin, "evaluation": evaluation, "sweep": sweep}
    finally:
        app.state.executor.shutdown(wait=True)
        app.state.cluster.close()


def _text(html: str) -> str:
    return re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", html))).strip()


def test_the_job_page_names_its_run_and_shows_a_deleted_one_without_a_link(env: dict[str, Any]) -> None:
    html = logged_in(env["app"], env["viewer"]).get(f"/jobs/{env['evaluation']}").text
    results = re.search(r'<p id="job-results">(.*?)</p>', html, re.S)
    assert results is not None
    assert f'href="/runs/{DELETED}' not in html  # neither the page nor its artifacts: both are gone
    deleted = re.search(rf'<span class="result-deleted" data-run="{DELETED}">([^<]*)</span>', results.group(1))
    assert deleted is not None and deleted.group(1).startswith(f"Result {DELETED[:12]}: the run was deleted (20")
    assert deleted.group(1).endswith(" UTC); the audit keeps its summary.")
    # the first live result takes #job-run-link (what the browser tests follow), with its display name escaped
    assert f'id="job-run-link" href="/runs/{NAMED}">Open the result {NAMED[:12]}</a>' in html
    assert f'<span class="run-name" data-run="{NAMED}">Baseline &lt;b&gt;ORT&lt;/b&gt; &amp; co</span>' in html
    assert f'href="/runs/{NAMED}/artifacts"' in html
    assert_accessible(html)


def test_a_sweep_id_keeps_its_link(env: dict[str, Any]) -> None:
    html = logged_in(env["app"], env["viewer"]).get(f"/jobs/{env['sweep']}").text
    assert f'id="job-run-link" href="/runs/{SWEEP}">Open the result {SWEEP[:12]}</a>' in html
    assert "result-deleted" not in html and _text(html).count(NAME) == 1


def test_the_jobs_list_names_the_runs_and_marks_the_deleted_one(env: dict[str, Any]) -> None:
    html = logged_in(env["app"], env["viewer"]).get("/jobs").text
    rows = dict(re.findall(r'<a href="/jobs/([0-9a-f]+)"><code>.*?</code></a></th>(.*?)</tr>', html, re.S))
    evaluation, sweep = _text(rows[env["evaluation"]]), _text(rows[env["sweep"]])
    assert f"{DELETED[:12]} (deleted) {NAMED[:12]} {NAME}" in evaluation
    assert f"{SWEEP[:12]} {NAMED[:12]} {NAME}" in sweep
    assert f'href="/runs/{DELETED}"' not in html and html.count(f'href="/runs/{NAMED}"') == 2
    assert_accessible(html)


def test_the_models_pages_name_the_run_of_each_verdict(env: dict[str, Any]) -> None:
    client = logged_in(env["app"], env["admin"])
    for path in ("/", "/models/efficientnet-lite0"):
        html = client.get(path).text
        assert f'<a href="/runs/{NAMED}"><code>{NAMED[:12]}</code></a> <span class="run-name">' in html, path
        assert "Baseline &lt;b&gt;ORT&lt;/b&gt; &amp; co</span>" in html and "<b>ORT" not in html
        assert_accessible(html)


def test_a_run_stored_again_after_its_deletion_is_not_deleted(tmp_path: Path) -> None:
    """``AnnotationStore.deleted`` (what the job pages ask, in two queries): a deleted run with its time, a sweep
    id (never a run) left out, and a run imported again after its deletion no longer deleted."""
    from repliscope.store.repository import RunStore

    with RunStore(f"sqlite:///{tmp_path / 'runs.db'}") as store:
        store.save(make_record(DELETED, TOP1_A))
        store.annotations.delete_run(DELETED, "test-admin", "cli")
        deleted = store.annotations.deleted([DELETED, SWEEP, NAMED])
        entry = store.annotations.deletion(DELETED)
        assert entry is not None and deleted == {DELETED: entry.at}
        store.save(make_record(DELETED, TOP1_A))  # `runs import` of the same record
        assert store.annotations.deleted([DELETED, SWEEP]) == {}
