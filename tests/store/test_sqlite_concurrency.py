"""SQLite write contention: the job thread writes (progress, log) while the API writes (tokens, manifests,
another job) -- through one store and through a second store on the same file (a CLI next to `repliscope serve`).
No "database is locked"."""

from __future__ import annotations

import threading
from pathlib import Path

from repliscope.store import RunStore
from repliscope.store.accounts import create_token, list_tokens
from repliscope.store.service_tables import create_job, get_job, list_manifests, put_manifest, update_job


def test_sqlite_connections_wait_for_locks(tmp_path: Path) -> None:
    with RunStore(f"sqlite:///{tmp_path / 'runs.db'}") as store, store.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30000
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"


def test_concurrent_job_and_api_writes_on_sqlite(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    with RunStore(url) as store, RunStore(url) as other:
        job = create_job(store, "evaluate", "m@1", "onnxruntime", "d", {})
        errors: list[BaseException] = []
        n = 60

        def job_thread() -> None:
            try:
                for i in range(n):
                    update_job(store, job.id, progress_done=i + 1, append_log=f"line {i}")
            except BaseException as exc:
                errors.append(exc)

        def api_thread(s: RunStore, offset: int) -> None:
            try:
                for i in range(n // 2):
                    create_token(s, f"t{offset + i}", "viewer")
                    create_job(s, "bench", f"m{offset + i}@1", "onnxruntime", "d", {})
                    put_manifest(s, f"m{offset + i}", "1", f"name: m{offset + i}\n")
            except BaseException as exc:
                errors.append(exc)

        threads = [
            threading.Thread(target=job_thread),
            threading.Thread(target=api_thread, args=(store, 0)),
            threading.Thread(target=api_thread, args=(other, 1000)),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert not any(t.is_alive() for t in threads)
        assert errors == []
        done = get_job(store, job.id)
        assert done.progress_done == n and done.log.count("\n") == n
        assert len(list_tokens(other)) == n and len(list_manifests(store)) == n
