"""Background jobs: the ``JobExecutor`` interface and ``ThreadJobExecutor``, an in-process executor with one worker
thread (the next issue moves jobs onto agents behind the same interface).

A job runs the same core functions as the CLI (``evaluation.run.prepare/evaluate``, ``pitfalls.sweep.run_sweep``,
``bench.matrix.run_matrix``, ``diff.task.diff_runtimes``) and stores its results in the same ``RunStore``; its row in
the jobs table follows it: status, progress (done/total, from the core's ``on_progress`` callbacks), log lines,
result ids, error. A cancel request is honoured at the next progress callback (and before a queued job starts)."""

from __future__ import annotations

import queue
import tempfile
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from repliscope.errors import RepliscopeError

KINDS = ("evaluate", "pitfalls", "bench", "diff")
FINAL = ("succeeded", "failed", "cancelled")


class JobCancelled(Exception):
    """Raised inside a running job's progress callback once a cancel was requested."""


@dataclass
class JobSpec:
    """What a job runs: ``manifest_text`` (the stored manifest), ``dataset_spec`` (the registry's spec for the
    dataset name; a client never passes a path), validated ``options``."""

    job_id: str
    kind: str
    manifest_ref: str
    manifest_text: str
    runtime: str
    dataset_name: str
    dataset_spec: str
    options: dict[str, Any] = field(default_factory=dict)


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


# -- the job kinds: the CLI's core calls ---------------------------------------------------------------------
def _loaded(job: JobSpec, folder: Path) -> Any:
    from repliscope.manifest.loader import load_manifest

    name = job.manifest_ref.replace("@", "-").replace("/", "_")
    path = folder / f"{name}.yaml"
    path.write_text(job.manifest_text, encoding="utf-8")
    return load_manifest(path)


def _settings(job: JobSpec, cache_dir: Path | None, runtime: str | None = None) -> Any:
    from repliscope.evaluation.run import RunSettings

    o = job.options
    return RunSettings(runtime=runtime or job.runtime, threads=o.get("threads"), batch_size=o.get("batch_size"),
                       cache_dir=cache_dir, allow_download=bool(o.get("download", False)))


def _data(job: JobSpec) -> Any:
    from repliscope.datasets import resolve_dataset

    return resolve_dataset(job.dataset_spec, None, limit=job.options.get("limit"))


def run_job(job: JobSpec, store: Any, cache_dir: Path | None, on_progress: Callable[[int], None],
            log: Callable[[str], None]) -> dict[str, Any]:
    """Run ``job`` with the CLI's core functions; returns the ids of what it stored (``run_ids``, ``sweep_ids``,
    ``benchmark_ids``) or, for a diff (not stored), ``summary``: the diff result as JSON (appended to the log)."""
    with tempfile.TemporaryDirectory(prefix="repliscope-job-") as tmp:
        loaded = _loaded(job, Path(tmp))
        for warning in loaded.warnings:
            log(f"warning: {warning}")
        data = _data(job)
        _update(store, job.job_id, progress_total=len(data))
        if job.kind == "evaluate":
            from repliscope.evaluation.run import evaluate, prepare

            record = evaluate(prepare(loaded, _settings(job, cache_dir)), data, on_progress=on_progress)
            store.save(record)
            return {"run_ids": [record.run_id]}
        if job.kind == "pitfalls":
            from repliscope.evaluation.run import prepare
            from repliscope.pitfalls.sweep import run_sweep

            out = run_sweep(prepare(loaded, _settings(job, cache_dir)), data, job.options.get("variants") or None,
                            visual_samples=int(job.options.get("visual", 3)), on_progress=on_progress)
            for rec in out.records:
                store.save(rec)
            store.save_sweep(out.result)
            return {"sweep_ids": [out.result.sweep_id], "run_ids": [r.run_id for r in out.records]}
        if job.kind == "bench":
            from repliscope.bench.matrix import run_matrix
            from repliscope.bench.run import BenchOptions
            from repliscope.bench.scenarios import ScenarioSettings

            o = job.options
            scenario = o.get("scenario", "single-stream")
            spq = int(o.get("samples_per_query", 8 if scenario == "multi-stream" else 1))
            settings = ScenarioSettings(scenario=scenario, min_duration_s=float(o.get("min_duration_s", 1.0)),
                                        min_queries=int(o.get("min_queries", 20)),
                                        samples_per_query=spq if scenario in ("multi-stream", "offline") else 1,
                                        batch_size=int(o.get("batch_size") or 1) if scenario == "offline" else 1)
            result = run_matrix(loaded, data, [job.runtime], [int(o.get("threads") or 1)],
                                BenchOptions(scenario=settings), settings=_settings(job, cache_dir))
            for bench in result.records:
                store.save_benchmark(bench)
            return {"benchmark_ids": [b.benchmark_id for b in result.records]}
        if job.kind == "diff":
            from repliscope.diff.task import diff_runtimes

            other = job.options["runtime_b"]
            diff = diff_runtimes(loaded.path, job.runtime, other, data, cache_dir=cache_dir,
                                 threads=int(job.options.get("threads") or 2))
            on_progress(len(data))
            import json

            return {"summary": json.dumps(diff.model_dump(mode="json"))}
        raise RepliscopeError(f"unknown job kind '{job.kind}' (allowed: {', '.join(KINDS)})")
