"""Security follow-up (SR2), the stored job log: ``JobStore.update(append_log=...)`` grew a job's row without
bound (an agent that logs forever). An append past :data:`~repliscope.store.jobs.MAX_STORED_LOG_BYTES` now drops
the oldest lines, keeping the newest within :data:`~repliscope.store.jobs.KEPT_AFTER_DROP_BYTES` after a first
line saying how many were dropped (all cuts counted), which the job log reads as a warning."""

from __future__ import annotations

from pathlib import Path

import pytest

from repliscope.service import job_log
from repliscope.store import jobs
from repliscope.store.repository import RunStore
from repliscope.store.service_tables import create_job, get_job, update_job


def test_an_agent_logging_forever_keeps_its_row_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jobs, "MAX_STORED_LOG_BYTES", 64 << 10)
    monkeypatch.setattr(jobs, "KEPT_AFTER_DROP_BYTES", 48 << 10)
    with RunStore(f"sqlite:///{tmp_path / 'runs.db'}") as store:
        job = create_job(store, "evaluate", "m@1", "onnxruntime", "d", {})
        appends = 120  # ~2 KiB a line: ~240 KiB appended, 3.7 times the cap
        for i in range(appends):
            update_job(store, job.id, append_log=job_log.entries(f"step {i} " + "é" * 1000, "agent a1"))
        log = get_job(store, job.id).log
    assert len(log.encode()) <= 64 << 10
    first, *rest = log.splitlines()
    dropped = appends - len(rest)
    assert first == f"warning: {dropped} earlier log lines dropped: the stored log keeps its newest lines within 64 KiB"
    assert dropped > 80  # the oldest went, several cuts counted together
    assert [job_log.parse(line)[0].message.split(" é")[0] for line in rest] == [
        f"step {i}" for i in range(dropped, appends)
    ]
    shown = job_log.parse(log)[0]
    assert (shown.level, shown.time) == ("warning", None)


def test_a_log_within_the_cap_is_kept_whole_and_one_past_it_is_cut_to_its_newest_lines() -> None:
    line = "x" * 1023 + "\n"
    within = line * (jobs.MAX_STORED_LOG_BYTES // 1024)
    assert jobs.capped_log(within) is within
    past = within + "newest\n"
    cut = jobs.capped_log(past)
    kept = cut.splitlines(keepends=True)
    assert len(cut.encode()) <= jobs.KEPT_AFTER_DROP_BYTES and kept[-1] == "newest\n"
    dropped = past.count("\n") - (len(kept) - 1)
    assert (
        kept[0] == f"warning: {dropped} earlier log lines dropped: the stored log keeps its newest lines within 8 MiB\n"
    )
    again = jobs.capped_log(cut + line * (jobs.MAX_STORED_LOG_BYTES // 1024))
    still = again.splitlines(keepends=True)
    total = dropped + (len(kept) - 1) + jobs.MAX_STORED_LOG_BYTES // 1024
    assert still[0].startswith(f"warning: {total - (len(still) - 1)} earlier log lines dropped: ")


def test_one_line_past_the_cap_leaves_only_the_marker() -> None:
    """An append of one enormous line (the store takes any text) cannot get past the cap."""
    huge = "y" * (jobs.MAX_STORED_LOG_BYTES + 1) + "\n"
    assert jobs.capped_log("a\n" + huge) == (
        "warning: 2 earlier log lines dropped: the stored log keeps its newest lines within 8 MiB\n"
    )


def test_a_listing_of_jobs_reads_none_of_their_logs(tmp_path: Path) -> None:
    """A jobs listing (``GET /api/v1/jobs?limit=1000``, the jobs page) read every listed job's whole log (each up to
    the cap) only to drop it: it now selects every column but the log."""
    from sqlalchemy import event

    with RunStore(f"sqlite:///{tmp_path / 'runs.db'}") as store:
        job = create_job(store, "evaluate", "m@1", "onnxruntime", "d", {}, created_by="rana")
        update_job(store, job.id, status="running", append_log=job_log.entries("loaded " + "z" * 5000))
        statements: list[str] = []
        event.listen(store.engine, "before_cursor_execute", lambda *a: statements.append(a[2]))
        listed = jobs.list_jobs(store, status="running", created_by="rana")
        assert [(j.id, j.status, j.log) for j in listed] == [(job.id, "running", "")]
        assert len(statements) == 1 and "jobs.log" not in statements[0] and "jobs.status" in statements[0]
        assert "z" * 5000 in get_job(store, job.id).log
