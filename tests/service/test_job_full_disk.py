"""Issue 32 item 7 and issue 38 ("no tracebacks in job logs"): a service job on a full disk keeps what it ran in
``unsaved-runs/`` (as the CLI does), ends ``failed`` with a clear message as soon as the store can be written again,
never stays queued or running after its thread ended, and its worker goes on with the next job; an internal error is
one line with an error id in the job's log, the traceback is on the server's log only.

The full disk is simulated where it hits: ``RunStore.save_outcome`` and every commit of the store's one session
wrapper (``repliscope.store.database``, which the jobs table's ``update_job`` writes through) raise
``OSError(ENOSPC)``."""

from __future__ import annotations

import errno
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.orm import Session

from repliscope.errors import StoreError
from repliscope.evaluation.record import EvaluationRecord
from repliscope.job_execution import JobSpec
from repliscope.service import executor as executor_module
from repliscope.service.executor import DaskJobExecutor, ThreadJobExecutor
from repliscope.service.job_log import messages
from repliscope.store import database
from repliscope.store.repository import RunStore
from repliscope.store.service_tables import create_job, get_job, update_job
from tests.test_jobs import tiny_job

FULL = "No space left on device"


def full_disk(*_: Any, **__: Any) -> Any:
    raise OSError(errno.ENOSPC, FULL)


class FullDiskSession(Session):
    """The store's sessions while the disk is full: every write fails (reads work, as on a full disk)."""

    def flush(self, objects: Any = None) -> None:
        if self.new or self.dirty or self.deleted:
            full_disk()
        super().flush(objects)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[RunStore]:
    with RunStore(f"sqlite:///{tmp_path / 'service.db'}") as s:
        yield s


def queued(store: RunStore, job: JobSpec) -> JobSpec:
    create_job(store, job.kind, job.manifest_ref, job.runtime, job.dataset_name, {}, job_id=job.job_id)
    return job


def wait(condition: Any, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_update_job_on_a_full_disk_is_a_store_error_naming_the_job(
    store: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    create_job(store, "evaluate", "tiny-resnet@1.0.0", "torch", "foolbox", {}, job_id="job-x")
    monkeypatch.setattr(database, "Session", FullDiskSession)
    with pytest.raises(StoreError) as info:
        update_job(store, "job-x", status="running")
    assert str(info.value) == f"job job-x could not be updated in the run database {store.url}: [Errno 28] {FULL}"
    monkeypatch.undo()
    assert get_job(store, "job-x").status == "queued"  # nothing of the change was written


def test_a_full_disk_keeps_the_record_and_the_job_fails_once_the_store_takes_it(
    store: RunStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = queued(store, tiny_job("disk-1", limit=2))
    second = queued(store, tiny_job("disk-2", limit=1))
    monkeypatch.setattr(RunStore, "save_outcome", full_disk)
    monkeypatch.setattr(database, "Session", FullDiskSession)
    jobs = ThreadJobExecutor(store, final_retry_every=0.1)
    try:
        jobs.submit(first)
        jobs.submit(second)
        wait(lambda: jobs.status("disk-2") == "failed")  # the worker lived on to run the second job
        assert jobs.status("disk-1") == "failed"
        assert jobs.pending_rows() == ["disk-1", "disk-2"]  # the store took neither final status yet
        assert get_job(store, "disk-1").status == "queued"  # (not even "running": the disk is full)

        kept = sorted((tmp_path / "unsaved-runs").glob("*.json"))
        assert len(kept) == 2  # beside the SQLite file, as the CLI keeps one
        records = {EvaluationRecord.model_validate_json(p.read_text()).counts["total"]: p for p in kept}
        assert sorted(records) == [1, 2]

        monkeypatch.setattr(database, "Session", Session)  # space again: the retries write the rows
        wait(lambda: jobs.pending_rows() == [], timeout=10)
        row = get_job(store, "disk-1")
        assert row.status == "failed" and row.finished_at is not None
        assert row.error == (
            f"the results could not be written to the run database {store.url}: [Errno 28] {FULL}; "
            f"1 run record(s) kept in {records[2]}: store them later with `repliscope runs import {records[2]}`"
        )
        assert messages(row.log).endswith(f"error: {row.error}\n")
        assert get_job(store, "disk-2").status == "failed"
        monkeypatch.undo()
        record = EvaluationRecord.model_validate_json(records[2].read_text())
        store.save(record)  # what was kept stores as it is
        assert store.get(record.run_id).result_hash == record.result_hash
    finally:
        jobs.shutdown(wait=True)


def test_when_the_record_cannot_be_kept_either_the_job_says_why(
    store: RunStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from repliscope.store import repository

    monkeypatch.setattr(RunStore, "save_outcome", full_disk)
    monkeypatch.setattr(repository, "unsaved_folders", lambda url: [tmp_path / "a-file" / "unsaved-runs"])
    (tmp_path / "a-file").write_text("not a folder")
    jobs = ThreadJobExecutor(store)
    try:
        jobs.submit(queued(store, tiny_job("nowhere", limit=1)))
        wait(lambda: get_job(store, "nowhere").status == "failed")
        error = get_job(store, "nowhere").error or ""
        assert error.startswith(f"the results could not be written to the run database {store.url}: [Errno 28] {FULL}")
        assert error.endswith(f"the run record(s) could not be kept either (run {error.split('(run ')[1]}")
        assert error.endswith(f": {tmp_path / 'a-file' / 'unsaved-runs'}: Not a directory)")
        assert not list(tmp_path.rglob("*.json"))
    finally:
        jobs.shutdown(wait=True)


def test_an_internal_error_is_one_line_with_an_id_and_the_traceback_is_on_the_server(
    store: RunStore, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(*_: Any, **__: Any) -> Any:
        raise ValueError("boom in /srv/secret/job-temp/x.yaml")

    monkeypatch.setattr(executor_module, "execute_job", broken)
    jobs = ThreadJobExecutor(store)
    try:
        with caplog.at_level(logging.ERROR, logger="repliscope.service.jobs"):
            jobs.submit(queued(store, tiny_job("bug", limit=1)))
            wait(lambda: get_job(store, "bug").status == "failed")
            jobs.submit(queued(store, tiny_job("after-bug", limit=1)))
            wait(lambda: get_job(store, "after-bug").status in ("succeeded", "failed"))
        row = get_job(store, "bug")
        error = row.error or ""
        assert error.startswith("internal error ") and error.endswith(
            ": ValueError (the traceback is in the server's log under this id)"
        )
        error_id = error.split()[2].rstrip(":")
        assert len(error_id) == 12
        assert "Traceback" not in row.log and "/srv/secret" not in row.log and "File " not in row.log
        assert messages(row.log).splitlines()[-1] == error
        [logged] = [r for r in caplog.records if error_id in r.getMessage()]
        assert logged.exc_info is not None and "boom in /srv/secret" in str(logged.exc_info[1])
    finally:
        jobs.shutdown(wait=True)


def test_an_agents_traceback_goes_to_the_server_log_not_the_job_log(
    store: RunStore, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from repliscope.agents import submit

    trace = 'Traceback (most recent call last):\n  File "/opt/agent/venv/x.py", line 1\nValueError: eight'

    def failing_agent(cluster: Any, job: JobSpec, constraints: Any, **kw: Any) -> Any:
        kw["log"]("agent a1: ValueError: eight")
        kw["log"](trace)
        raise submit.JobFailedEverywhere(job.job_id, {"a1": "ValueError: eight"})

    monkeypatch.setattr(submit, "submit_job", failing_agent)
    monkeypatch.setattr(DaskJobExecutor, "constraints", lambda self, job: None)
    jobs = DaskJobExecutor(store, cluster=object())
    try:
        with caplog.at_level(logging.ERROR, logger="repliscope.service.jobs"):
            jobs.submit(queued(store, tiny_job("agent-bug", limit=1)))
            wait(lambda: get_job(store, "agent-bug").status == "failed", timeout=30)
        log = messages(get_job(store, "agent-bug").log)
        assert "Traceback" not in log and "/opt/agent" not in log
        [line] = [x for x in log.splitlines() if "server's log" in x]
        error_id = line.rsplit(" ", 1)[1]
        assert line == f"the agent's traceback is in the server's log under error id {error_id}"
        assert any(error_id in r.getMessage() and "/opt/agent/venv/x.py" in r.getMessage() for r in caplog.records)
    finally:
        jobs.shutdown(wait=True)


def test_a_dask_job_on_a_full_disk_keeps_its_record_and_never_stays_running(
    store: RunStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from repliscope.agents import submit
    from repliscope.job_execution import execute_job

    def in_process_agent(cluster: Any, job: JobSpec, constraints: Any, **kw: Any) -> Any:
        return execute_job(job, None, kw["on_progress"], kw["log"], on_total=kw["on_total"])

    monkeypatch.setattr(submit, "submit_job", in_process_agent)
    monkeypatch.setattr(DaskJobExecutor, "constraints", lambda self, job: None)
    job = queued(store, tiny_job("dask-disk", limit=1))
    monkeypatch.setattr(RunStore, "save_outcome", full_disk)
    monkeypatch.setattr(database, "Session", FullDiskSession)
    jobs = DaskJobExecutor(store, cluster=object(), final_retry_every=0.1)
    try:
        jobs.submit(job)
        wait(lambda: jobs.status("dask-disk") == "failed")
        wait(lambda: not jobs._threads)  # the job's thread ended ...
        assert jobs.pending_rows() == ["dask-disk"]  # ... and its final status waits for the store
        monkeypatch.setattr(database, "Session", Session)
        wait(lambda: get_job(store, "dask-disk").status == "failed", timeout=10)
        [kept] = (tmp_path / "unsaved-runs").glob("*.json")
        assert f"1 run record(s) kept in {kept}" in (get_job(store, "dask-disk").error or "")
    finally:
        jobs.shutdown(wait=True)
