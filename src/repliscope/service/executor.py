"""Background jobs: the ``JobExecutor`` interface and ``ThreadJobExecutor``, an in-process executor with one worker
thread.

A job runs the same core functions as the CLI (:func:`repliscope.jobs.execute_job`: ``evaluation.run.prepare/
evaluate``, ``pitfalls.sweep.run_sweep``, ``bench.matrix.run_matrix``, ``diff.task.diff_runtimes``) and stores its
results in the same ``RunStore`` exactly once per idempotency key (``RunStore.save_outcome``); its row in
the jobs table follows it: status, progress (done/total, from the core's ``on_progress`` callbacks), log lines,
result ids, error. A cancel request is honoured at the next progress callback (and before a queued job starts)."""

from __future__ import annotations

import queue
import threading
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from repliscope.errors import RepliscopeError
from repliscope.jobs import KINDS, JobCancelled, JobOutcome, JobSpec, execute_job

__all__ = ["FINAL", "KINDS", "JobCancelled", "JobExecutor", "JobOutcome", "JobSpec", "ThreadJobExecutor",
           "execute_job", "run_job"]

FINAL = ("succeeded", "failed", "cancelled")


class JobExecutor(Protocol):
    def submit(self, job: JobSpec) -> str: ...

    def cancel(self, job_id: str) -> bool: ...

    def status(self, job_id: str) -> str | None: ...

    def shutdown(self, wait: bool = True) -> None: ...


def _update(store: Any, job_id: str, **fields: Any) -> None:
    from repliscope.store.registry import update_job

    update_job(store, job_id, **fields)


class ThreadJobExecutor:
    """One worker thread taking queued jobs in submission order."""

    def __init__(self, store: Any, cache_dir: Path | None = None, progress_every: float = 0.5) -> None:
        self.store = store
        self.cache_dir = cache_dir
        self.progress_every = progress_every
        self._queue: queue.Queue[JobSpec | None] = queue.Queue()
        self._cancelled: set[str] = set()
        self._status: dict[str, str] = {}
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._work, name="repliscope-jobs", daemon=True)
        self._thread.start()

    # -- interface -------------------------------------------------------------------------------------------
    def submit(self, job: JobSpec) -> str:
        with self._lock:
            self._status[job.job_id] = "queued"
        self._queue.put(job)
        return job.job_id

    def cancel(self, job_id: str) -> bool:
        """Request a cancel; False when the job already finished (or is unknown to this executor)."""
        with self._lock:
            if self._status.get(job_id) not in ("queued", "running"):
                return False
            self._cancelled.add(job_id)
            if self._status[job_id] == "queued":  # never started: final now
                self._status[job_id] = "cancelled"
                _update(self.store, job_id, status="cancelled",
                                   append_log="cancelled before it started")
            return True

    def status(self, job_id: str) -> str | None:
        with self._lock:
            return self._status.get(job_id)

    def shutdown(self, wait: bool = True) -> None:
        self._queue.put(None)
        if wait:
            self._thread.join(timeout=30)

    # -- worker ----------------------------------------------------------------------------------------------
    def _work(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            with self._lock:
                if job.job_id in self._cancelled:
                    continue
                self._status[job.job_id] = "running"
            self._run(job)

    def _set(self, job_id: str, status: str) -> None:
        with self._lock:
            self._status[job_id] = status

    def _run(self, job: JobSpec) -> None:
        job_id = job.job_id
        _update(self.store, job_id, status="running",
                           append_log=f"{job.kind} {job.manifest_ref} on {job.runtime}, dataset {job.dataset_name}")
        on_progress, done = self._progress_callback(job_id)
        try:
            result = run_job(job, self.store, self.cache_dir, on_progress,
                             lambda line: _update(self.store, job_id, append_log=line))
        except JobCancelled:
            self._set(job_id, "cancelled")
            _update(self.store, job_id, status="cancelled", append_log="cancelled")
            return
        except (RepliscopeError, OSError) as exc:
            self._set(job_id, "failed")
            _update(self.store, job_id, status="failed", error=str(exc),
                               append_log=f"error: {exc}")
            return
        except Exception as exc:  # a job must never kill the worker; the traceback goes to its log
            self._set(job_id, "failed")
            _update(self.store, job_id, status="failed",
                               error=f"internal error: {type(exc).__name__}: {exc}",
                               append_log=traceback.format_exc())
            return
        self._set(job_id, "succeeded")
        _update(self.store, job_id, status="succeeded", progress_done=done["done"],
                result_ids=result.get("run_ids", []) + result.get("sweep_ids", []) + result.get("benchmark_ids", []),
                append_log=f"succeeded: {result.get('summary') or result}")

    def _progress_callback(self, job_id: str) -> tuple[Callable[[int], None], dict[str, int]]:
        import time

        state = {"done": 0}
        last = [0.0]

        def on_progress(n: int) -> None:
            if job_id in self._cancelled:
                raise JobCancelled(job_id)
            state["done"] += n
            now = time.monotonic()
            if now - last[0] >= self.progress_every:
                last[0] = now
                _update(self.store, job_id, progress_done=state["done"])

        return on_progress, state


def run_job(job: JobSpec, store: Any, cache_dir: Path | None, on_progress: Callable[[int], None],
            log: Callable[[str], None]) -> dict[str, Any]:
    """Run ``job`` in this process (:func:`repliscope.jobs.execute_job`) and store its results exactly once under
    its idempotency key (``store.save_outcome``); returns the stored ids (``run_ids``, ``sweep_ids``,
    ``benchmark_ids``) and, for a diff (not stored), ``summary``: the diff result as JSON (appended to the log)."""
    outcome = execute_job(job, cache_dir, on_progress, log,
                          on_total=lambda n: _update(store, job.job_id, progress_total=n))
    stored = store.save_outcome(outcome, job.key, kind=job.kind)
    result: dict[str, Any] = {"run_ids": stored.run_ids, "sweep_ids": stored.sweep_ids,
                              "benchmark_ids": stored.benchmark_ids}
    if outcome.summary is not None:
        result["summary"] = outcome.summary
    return result
