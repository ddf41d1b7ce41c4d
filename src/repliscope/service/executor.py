"""Background jobs: the ``JobExecutor`` interface, ``DaskJobExecutor`` (the service's default: jobs are Dask tasks
on the agents of a cluster, :mod:`repliscope.agents`) and ``ThreadJobExecutor``, an in-process executor with one
worker thread (no Dask).

A job runs the same core functions as the CLI (:func:`repliscope.job_execution.execute_job`: ``evaluation.run.prepare/
evaluate``, ``pitfalls.sweep.run_sweep``, ``bench.matrix.run_matrix``, ``diff.task_level.diff_runtimes``) and stores its
results in the same ``RunStore`` exactly once per idempotency key (``RunStore.save_outcome``); its row in
the jobs table follows it: status, progress (done/total, from the core's ``on_progress`` callbacks), log lines
(each with its time, level and source: :mod:`repliscope.service.job_log`), result ids, error. A cancel request
is honoured at the next progress callback (and before a queued job starts).

When the run database cannot be written (a full disk, a read-only file, a lost server): the job goes on; a record
it cannot store is kept as ``unsaved-runs/<run_id>.json`` (as the CLI keeps it, :class:`KeepingUnsaved`) and the job
fails saying where (or why it could not be kept); a final status that cannot be written is written again every few
seconds until the store takes it (:class:`FinalWrites`), so a job never stays queued or running after its thread
ended. A job's log never holds a traceback: an internal error is one line with an error id, the traceback goes to
the server's log (logger ``repliscope.service.jobs``) under that id."""

from __future__ import annotations

import logging
import queue
import tempfile
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from repliscope.errors import RepliscopeError, StoreError
from repliscope.job_execution import KINDS, JobCancelled, JobOutcome, JobSpec, StoredJob, execute_job, run_and_store
from repliscope.service import job_log

__all__ = [
    "FINAL",
    "KINDS",
    "AcceptingEveryJob",
    "DaskJobExecutor",
    "FinalWrites",
    "JobCancelled",
    "JobExecutor",
    "JobOutcome",
    "JobSpec",
    "KeepingUnsaved",
    "ThreadJobExecutor",
    "UnplacedExecutor",
    "as_job_executor",
    "execute_job",
    "run_job",
]

FINAL = ("succeeded", "failed", "cancelled")
INTERRUPTED = "interrupted: the server stopped before the job finished"
logger = logging.getLogger("repliscope.service.jobs")
"""The server's log of the jobs: tracebacks of internal errors (by error id), rows that could not be written."""
FINAL_RETRY_SECONDS = 2.0
"""How often a final job status the store did not take is written again."""


@runtime_checkable
class UnplacedExecutor(Protocol):
    """An executor that runs what it is given, with no placement to check: submit, cancel, status, shutdown."""

    def submit(self, job: JobSpec) -> str: ...

    def cancel(self, job_id: str) -> bool: ...

    def status(self, job_id: str) -> str | None: ...

    def shutdown(self, wait: bool = True) -> None: ...


@runtime_checkable
class JobExecutor(UnplacedExecutor, Protocol):
    """What the service's routes and the app call on the app's executor (``app.state.executor``)."""

    def check(self, job: JobSpec) -> None:
        """Refuse at once a job that cannot run (before its row is created): ``InvalidPlacementOption`` (a
        placement option that does not parse), ``NoAgentMatches`` (no live agent qualifies), OSError (the
        agents' scheduler went away). Called before :meth:`submit` with the same job."""
        ...


class AcceptingEveryJob:
    """An :class:`UnplacedExecutor` (e.g. one given in ``ServiceConfig.executor`` that has no ``check``) as a
    :class:`JobExecutor`: every job passes the check; the rest is the inner executor's."""

    def __init__(self, inner: UnplacedExecutor) -> None:
        self.inner = inner

    def check(self, job: JobSpec) -> None:
        """Every job is accepted at submission (the inner executor has no placement)."""

    def submit(self, job: JobSpec) -> str:
        return self.inner.submit(job)

    def cancel(self, job_id: str) -> bool:
        return self.inner.cancel(job_id)

    def status(self, job_id: str) -> str | None:
        return self.inner.status(job_id)

    def shutdown(self, wait: bool = True) -> None:
        self.inner.shutdown(wait)


def as_job_executor(executor: JobExecutor | UnplacedExecutor) -> JobExecutor:
    """``executor`` itself when it declares ``check``, else :class:`AcceptingEveryJob` around it."""
    return executor if isinstance(executor, JobExecutor) else AcceptingEveryJob(executor)


def _log(text: str, source: str = job_log.SERVICE) -> str:
    """``text`` as the job's stored log lines, timed now, each line's level from its words
    (:func:`repliscope.service.job_log.entries`): what every ``append_log`` of this module writes."""
    return job_log.entries(text, source)


def _update(store: Any, job_id: str, **fields: Any) -> bool:
    """Write ``fields`` into the job's row; False when the store cannot be written (a full disk, a read-only
    database, a lost server: said on the server's log), so a progress or log line that cannot be written never stops
    the job. Final statuses go through :meth:`FinalWrites.write`, which writes them again until the store takes
    them."""
    from repliscope.store.service_tables import ConflictError, InvalidInputError, NotFoundError, update_job

    try:
        update_job(store, job_id, **fields)
    except (NotFoundError, InvalidInputError, ConflictError):
        raise
    except (StoreError, OSError) as exc:
        logger.warning("job %s: its row could not be written: %s", job_id, _reason(exc))
        return False
    return True


def _reason(exc: BaseException) -> str:
    """The first line of an error's text (its type when it has none)."""
    text = str(getattr(exc, "orig", None) or exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def internal_error(job_id: str, exc: BaseException, where: str = "") -> str:
    """The one line a job's error and log show for an internal error (a bug, not a bad input): its type and an
    error id; the traceback goes to the server's log under that id, never to the job."""
    error_id = uuid.uuid4().hex[:12]
    logger.error("job %s: internal error %s%s", job_id, error_id, where, exc_info=exc)
    return f"internal error {error_id}: {type(exc).__name__} (the traceback is in the server's log under this id)"


class FinalWrites:
    """Final job statuses the store did not take (a full disk): kept here and written again every
    :data:`FINAL_RETRY_SECONDS` seconds by one daemon thread until the store takes each, so the job's row ends
    ``failed`` / ``succeeded`` / ``cancelled`` as soon as the store can be written again (a row still unwritten
    when the server stops is failed as interrupted by the next ``repliscope serve``)."""

    def __init__(self, store: Any, every: float = FINAL_RETRY_SECONDS) -> None:
        self.store = store
        self.every = every
        self._pending: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def write(self, job_id: str, **fields: Any) -> bool:
        """Write the final ``fields`` now; when the store does not take them, keep them for the retries (True when
        written now)."""
        if _update(self.store, job_id, **fields):
            return True
        with self._lock:
            earlier = self._pending.get(job_id, {})
            if earlier.get("append_log") and fields.get("append_log"):
                fields = {**fields, "append_log": f"{earlier['append_log']}\n{fields['append_log']}"}
            self._pending[job_id] = {**earlier, **fields}
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._retry, name="repliscope-job-rows", daemon=True)
                self._thread.start()
        return False

    def pending(self) -> list[str]:
        """The jobs whose final status is still to be written."""
        with self._lock:
            return sorted(self._pending)

    def flush(self) -> None:
        """Try every pending write once now."""
        with self._lock:
            todo = dict(self._pending)
        for job_id, fields in todo.items():
            if _update(self.store, job_id, **fields):
                with self._lock:
                    if self._pending.get(job_id) is fields:
                        del self._pending[job_id]

    def stop(self) -> None:
        """A last try, then the retry thread ends."""
        self._stop.set()
        self.flush()

    def _retry(self) -> None:
        while not self._stop.wait(self.every):
            self.flush()
            with self._lock:
                if not self._pending:
                    self._thread = None
                    return


class KeepingUnsaved:
    """``store`` as :func:`~repliscope.job_execution.run_and_store` uses it, keeping what a job ran when it cannot
    be stored: a ``save_outcome`` that fails to write (a full disk, a read-only database, a lost server) keeps every
    run record as ``unsaved-runs/<run_id>.json`` (:func:`repliscope.store.repository.keep_unsaved`, where the CLI
    keeps one) and raises a StoreError naming the database, the reason and the files (``repliscope runs import``
    stores them later), or why they could not be kept."""

    def __init__(self, store: Any) -> None:
        self.store = store

    def get_job_result(self, idempotency_key: str) -> Any:
        return self.store.get_job_result(idempotency_key)

    def save_outcome(self, outcome: Any, idempotency_key: str, kind: str = "evaluate") -> Any:
        from sqlalchemy.exc import IntegrityError, SQLAlchemyError

        try:
            return self.store.save_outcome(outcome, idempotency_key, kind=kind)
        except IntegrityError:
            raise
        except (SQLAlchemyError, OSError) as exc:
            raise StoreError(self._keep(outcome, idempotency_key, kind, _reason(exc))) from exc

    def _keep(self, outcome: Any, idempotency_key: str, kind: str, reason: str) -> str:
        from repliscope.evaluation.record import EvaluationRecord
        from repliscope.store.repository import hide_password, keep_unsaved

        url = str(getattr(self.store, "url", ""))
        kept: list[str] = []
        problems: list[str] = []
        for raw in outcome.records:
            record = EvaluationRecord.model_validate(raw)
            path, why = keep_unsaved(record, url)
            if path is not None:
                kept.append(str(path))
            else:
                problems.append(f"run {record.run_id}: {'; '.join(why)}")
        parts = [f"the results could not be written to the run database {hide_password(url)}: {reason}"]
        if kept:
            parts.append(
                f"{len(kept)} run record(s) kept in {', '.join(kept)}: store them later with "
                f"`repliscope runs import {' '.join(kept)}`"
            )
        if problems:
            parts.append(f"the run record(s) could not be kept either ({'; '.join(problems)})")
        diffs = 1 if kind == "diff" and getattr(outcome, "summary", None) is not None else 0
        others = len(outcome.sweeps) + len(outcome.benchmarks) + diffs
        if others:
            parts.append(
                f"{others} sweep/benchmark/diff result(s) are not kept: submit the job again (idempotency key "
                f"{idempotency_key!r}) once the database can be written"
            )
        return "; ".join(parts)


class ThreadJobExecutor:
    """One worker thread taking queued jobs in submission order."""

    def __init__(
        self,
        store: Any,
        cache_dir: Path | None = None,
        progress_every: float = 0.5,
        final_retry_every: float = FINAL_RETRY_SECONDS,
    ) -> None:
        self.store = store
        self.cache_dir = cache_dir
        self.progress_every = progress_every
        self._queue: queue.Queue[JobSpec | None] = queue.Queue()
        self._cancelled: set[str] = set()
        self._status: dict[str, str] = {}
        self._lock = threading.Lock()
        self._finals = FinalWrites(store, final_retry_every)
        self._thread = threading.Thread(target=self._work, name="repliscope-jobs", daemon=True)
        self._thread.start()

    # -- interface -------------------------------------------------------------------------------------------
    def check(self, job: JobSpec) -> None:
        """Every job can run in this process: placement options are not read (there are no agents)."""

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
                self._finals.write(job_id, status="cancelled", append_log=_log("cancelled before it started"))
            return True

    def status(self, job_id: str) -> str | None:
        with self._lock:
            return self._status.get(job_id)

    def shutdown(self, wait: bool = True) -> None:
        self._queue.put(None)
        if wait:
            self._thread.join(timeout=30)
        self._finals.stop()

    def pending_rows(self) -> list[str]:
        """The jobs whose final status the store has not taken yet (written again every few seconds)."""
        return self._finals.pending()

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
            try:
                self._run(job)
            except Exception as exc:  # never the end of the worker: the next jobs still run
                self._set(job.job_id, "failed")
                line = internal_error(job.job_id, exc, " (in the job worker)")
                self._finals.write(job.job_id, status="failed", error=line, append_log=_log(line))

    def _set(self, job_id: str, status: str) -> None:
        with self._lock:
            self._status[job_id] = status

    def _run(self, job: JobSpec) -> None:
        from sqlalchemy.exc import SQLAlchemyError

        job_id = job.job_id
        _update(
            self.store,
            job_id,
            status="running",
            append_log=_log(f"{job.kind} {job.manifest_ref} on {job.runtime}, dataset {job.dataset_name}"),
        )
        on_progress, done = self._progress_callback(job_id)
        try:

            def log(line: str) -> None:
                _update(self.store, job_id, append_log=_log(line))

            result = run_job(job, self.store, self.cache_dir, on_progress, log)
        except JobCancelled:
            self._set(job_id, "cancelled")
            self._finals.write(job_id, status="cancelled", append_log=_log("cancelled"))
            return
        except (RepliscopeError, OSError) as exc:
            self._set(job_id, "failed")
            self._finals.write(job_id, status="failed", error=str(exc), append_log=_log(f"error: {exc}"))
            return
        except SQLAlchemyError as exc:  # the run database could not be read (the key check)
            self._set(job_id, "failed")
            why = f"the run database could not be used: {_reason(exc)}"
            self._finals.write(job_id, status="failed", error=why, append_log=_log(f"error: {why}"))
            return
        except Exception as exc:  # a job must never kill the worker; the traceback goes to the server's log
            self._set(job_id, "failed")
            line = internal_error(job_id, exc)
            self._finals.write(job_id, status="failed", error=line, append_log=_log(line))
            return
        self._set(job_id, "succeeded")
        self._finals.write(
            job_id,
            status="succeeded",
            progress_done=done["done"],
            result_ids=result.get("run_ids", [])
            + result.get("sweep_ids", [])
            + result.get("benchmark_ids", [])
            + result.get("diff_ids", []),
            append_log=_log(f"succeeded: {result.get('summary') or _stored_text(result)}"),
        )

    def _progress_callback(self, job_id: str) -> tuple[Callable[[int], None], dict[str, Any]]:
        def check_cancel() -> None:
            if job_id in self._cancelled:
                raise JobCancelled(job_id)

        _, on_progress, state = progress_writer(self.store, job_id, self.progress_every, check_cancel)
        return on_progress, state


def _stored_text(result: dict[str, Any]) -> str:
    """What a job stored, in words: ``stored run 1574…, sweep 5e2f…`` (or ``nothing stored``)."""
    parts = [
        f"{what} {', '.join(result.get(key, []))}"
        for key, what in (
            ("run_ids", "run"),
            ("sweep_ids", "sweep"),
            ("benchmark_ids", "benchmark"),
            ("diff_ids", "diff"),
        )
        if result.get(key)
    ]
    return f"stored {'; '.join(parts)}" if parts else "nothing stored"


def progress_writer(
    store: Any, job_id: str, every: float, on_each: Callable[[], None] | None = None
) -> tuple[Callable[[int], None], Callable[[int], None], dict[str, Any]]:
    """``on_total(n)`` and ``on_progress(n)`` (n more samples done) writing the job's row, progress at most every
    ``every`` seconds; ``on_each()`` runs first on each call (a cancel check, a status change); ``state["done"]``."""
    import time

    state: dict[str, Any] = {"done": 0, "last": 0.0}

    def on_total(n: int) -> None:
        if on_each is not None:
            on_each()
        _update(store, job_id, progress_total=n)

    def on_progress(n: int) -> None:
        if on_each is not None:
            on_each()
        state["done"] += n
        now = time.monotonic()
        if now - state["last"] >= every:
            state["last"] = now
            _update(store, job_id, progress_done=state["done"])

    return on_total, on_progress, state


def run_job(
    job: JobSpec, store: Any, cache_dir: Path | None, on_progress: Callable[[int], None], log: Callable[[str], None]
) -> dict[str, Any]:
    """Run ``job`` in this process (:func:`repliscope.job_execution.execute_job`) through
    :func:`~repliscope.job_execution.run_and_store` (a key stored already runs nothing); returns the stored ids
    (``run_ids``, ``sweep_ids``, ``benchmark_ids``, ``diff_ids``) and, for a diff, ``summary``: the diff result as
    JSON (appended to the log)."""

    def on_total(n: int) -> None:
        _update(store, job.job_id, progress_total=n)

    def run(job: JobSpec) -> JobOutcome:
        return execute_job(job, cache_dir, on_progress, log, on_total=on_total)

    done = run_and_store(job, KeepingUnsaved(store), run)
    stored = done.stored
    result: dict[str, Any] = {
        "run_ids": stored.run_ids,
        "sweep_ids": stored.sweep_ids,
        "benchmark_ids": stored.benchmark_ids,
        "diff_ids": stored.diff_ids,
    }
    if done.outcome is not None and done.outcome.summary is not None:
        result["summary"] = done.outcome.summary
    return result


class DaskJobExecutor:
    """Jobs as Dask tasks on the cluster's agents (:func:`repliscope.agents.submit.submit_job`): one waiting thread
    per job in this process follows its task (placement by the job's constraints, progress and log lines from the
    agent, a rerun elsewhere when an agent dies) and stores the outcome with ``store.save_outcome(outcome, key)``
    (exactly once per idempotency key). :meth:`check` refuses at once a job no live agent qualifies for
    (``NoAgentMatches``, every agent's reasons). ``cluster``: a connected ``Cluster`` or the service's
    :class:`~repliscope.service.cluster.ClusterHandle` (connected on first use)."""

    def __init__(
        self,
        store: Any,
        cluster: Any,
        cache_dir: Path | None = None,
        progress_every: float = 0.5,
        join_timeout: float = 30.0,
        final_retry_every: float = FINAL_RETRY_SECONDS,
    ) -> None:
        self.store = store
        self.cache_dir = cache_dir
        self.progress_every = progress_every
        self.join_timeout = join_timeout
        self._cluster = cluster
        self._lock = threading.Lock()
        self._status: dict[str, str] = {}
        self._cancel: dict[str, threading.Event] = {}
        self._threads: dict[str, threading.Thread] = {}
        self._placement: dict[str, Any] = {}
        """Job id -> its constraints, from :meth:`check` (its manifest parsed once on the submitting side)."""
        self._stopping = False
        self._finals = FinalWrites(store, final_retry_every)

    @property
    def cluster(self) -> Any:
        from repliscope.service.cluster import ClusterHandle

        return self._cluster.get() if isinstance(self._cluster, ClusterHandle) else self._cluster

    # -- placement -------------------------------------------------------------------------------------------
    def constraints(self, job: JobSpec) -> Any:
        """The job's placement constraints: its manifest's framework (and version constraint), its runtime and
        its options ``requires`` (PEP 508), ``hardware`` (selectors), ``stack`` (a stack key)."""
        from repliscope.agents.placement import constraints_for
        from repliscope.manifest.loader import load_manifest

        with tempfile.TemporaryDirectory(prefix="repliscope-place-") as tmp:
            path = Path(tmp) / "manifest.yaml"
            path.write_text(job.manifest_text, encoding="utf-8")
            loaded = load_manifest(path)
        o = job.run_options
        return constraints_for(
            loaded,
            job.runtime,
            requires=tuple(o.requires or ()),
            hardware=tuple(o.hardware or ()),
            stack=o.stack,
        )

    def check(self, job: JobSpec) -> None:
        """Raise ``InvalidPlacementOption`` (a ``requires``/``hardware`` entry that does not parse), then
        ``NoAgentMatches`` (every live agent's reasons, or "no live agent") when no agent qualifies. The job's
        constraints are kept for :meth:`submit`."""
        from repliscope.agents.placement import check_placement_options, place

        check_placement_options(job.run_options.requires, job.run_options.hardware)
        constraints = self.constraints(job)
        with self._lock:
            self._placement[job.job_id] = constraints
        place(self.cluster, constraints)

    # -- interface -------------------------------------------------------------------------------------------
    def submit(self, job: JobSpec) -> str:
        event = threading.Event()
        thread = threading.Thread(
            target=self._run, args=(job, event), name=f"repliscope-job-{job.job_id[:8]}", daemon=True
        )
        with self._lock:
            self._status[job.job_id] = "queued"
            self._cancel[job.job_id] = event
            self._threads[job.job_id] = thread
        thread.start()
        return job.job_id

    def cancel(self, job_id: str) -> bool:
        """Request a cancel; False when the job already finished (or is unknown to this executor). A job no agent
        has started yet is cancelled now; a running one at its agent's next progress step."""
        with self._lock:
            status = self._status.get(job_id)
            if status not in ("queued", "running"):
                return False
            self._cancel[job_id].set()
            if status == "queued":
                self._status[job_id] = "cancelled"
        if status == "queued":
            self._finals.write(job_id, status="cancelled", append_log=_log("cancelled before an agent started it"))
        return True

    def status(self, job_id: str) -> str | None:
        with self._lock:
            return self._status.get(job_id)

    def shutdown(self, wait: bool = True) -> None:
        """Stop every unfinished job (failed: "interrupted: the server stopped before the job finished", as
        ``repliscope serve`` marks the jobs a previous server left); with ``wait``, wait (up to ``join_timeout`` s)
        for their threads."""
        with self._lock:
            self._stopping = True
            events = [e for j, e in self._cancel.items() if self._status.get(j) in ("queued", "running")]
            threads = list(self._threads.values())
        for event in events:
            event.set()
        if wait:
            for thread in threads:
                thread.join(timeout=self.join_timeout)
        self._finals.stop()

    def pending_rows(self) -> list[str]:
        """The jobs whose final status the store has not taken yet (written again every few seconds)."""
        return self._finals.pending()

    # -- one job's thread ------------------------------------------------------------------------------------
    def _started(self, job_id: str) -> None:
        """The agent reported the job (first progress, total or log line): running, unless cancelled."""
        with self._lock:
            if self._status.get(job_id) != "queued":
                return
            self._status[job_id] = "running"
        _update(self.store, job_id, status="running")

    def _finish(self, job_id: str, status: str, **fields: Any) -> None:
        """Final ``status`` unless the job is final already (a queued job's cancel)."""
        with self._lock:
            if self._status.get(job_id) in FINAL:
                if fields.get("append_log"):
                    _update(self.store, job_id, append_log=fields["append_log"])
                return
            self._status[job_id] = status
        self._finals.write(job_id, status=status, **fields)

    def _run(self, job: JobSpec, cancel: threading.Event) -> None:
        from sqlalchemy.exc import SQLAlchemyError

        job_id = job.job_id
        try:
            self._follow(job, cancel)
        except SQLAlchemyError as exc:  # the run database could not be read (the key check)
            why = f"the run database could not be used: {_reason(exc)}"
            self._finish(job_id, "failed", error=why, append_log=_log(f"error: {why}"))
        except Exception as exc:  # a job's thread never dies silently: one line here, the traceback on the server
            line = internal_error(job_id, exc)
            self._finish(job_id, "failed", error=line, append_log=_log(line))
        finally:
            with self._lock:
                self._threads.pop(job_id, None)
                unfinished = self._status.get(job_id) not in FINAL
            if unfinished:  # whatever ended this thread, the job does not stay queued or running
                self._finish(job_id, "failed", error=INTERRUPTED, append_log=_log(INTERRUPTED))

    def _progress_callbacks(self, job_id: str) -> tuple[Callable[[int], None], Callable[[int], None], dict[str, Any]]:
        """The job row's ``on_total``, ``on_progress`` (the first of either marks it running) and state."""
        return progress_writer(self.store, job_id, self.progress_every, lambda: self._started(job_id))

    def _follow(self, job: JobSpec, cancel: threading.Event) -> None:
        from repliscope.agents.submit import submit_job

        job_id, key = job.job_id, job.key
        if cancel.is_set():  # cancelled before this thread got going (final already)
            return
        _update(
            self.store,
            job_id,
            append_log=_log(f"{job.kind} {job.manifest_ref} on {job.runtime}, dataset {job.dataset_name}"),
        )
        on_total, on_progress, state = self._progress_callbacks(job_id)
        with self._lock:
            constraints = self._placement.pop(job_id, None)  # from check(): the manifest is not parsed again

        sources = job_log.SourceTracker()

        def log(line: str) -> None:
            source, line = sources.split(line)  # the agent (or shard) it came from
            if line.startswith("Traceback (most recent call last)"):  # an agent's internal error
                error_id = uuid.uuid4().hex[:12]
                logger.error("job %s: the agent's traceback, error id %s:\n%s", job_id, error_id, line)
                line = f"the agent's traceback is in the server's log under error id {error_id}"
            _update(self.store, job_id, append_log=_log(line, source))

        def run(job: JobSpec) -> JobOutcome:
            cluster = self.cluster
            # the in-process agent uses the service's cache; agents elsewhere their own
            cache_dir = self.cache_dir if getattr(cluster, "local", None) is not None else None
            outcome = submit_job(
                cluster,
                job,
                constraints if constraints is not None else self.constraints(job),
                on_progress=on_progress,
                log=log,
                on_total=on_total,
                cancel=cancel,
                cache_dir=cache_dir,
            )
            if cancel.is_set():  # finished while the cancel was on its way: nothing is stored
                raise _FinishedWhileCancelled(job.job_id)
            return outcome

        try:
            done: StoredJob = run_and_store(job, KeepingUnsaved(self.store), run)
        except JobCancelled as exc:
            if self._stopping:
                self._finish(job_id, "failed", error=INTERRUPTED, append_log=_log(INTERRUPTED))
            elif isinstance(exc, _FinishedWhileCancelled):
                self._finish(
                    job_id, "cancelled", append_log=_log("the agent had finished; nothing is stored\ncancelled")
                )
            else:
                self._finish(job_id, "cancelled", append_log=_log("cancelled"))
            return
        except (RepliscopeError, OSError) as exc:  # NoAgentMatches, JobFailedEverywhere (each agent's reason), ...
            self._finish(job_id, "failed", error=str(exc), append_log=_log(f"error: {exc}"))
            return
        stored, outcome = done.stored, done.outcome
        if outcome is None:
            self._finish(
                job_id,
                "succeeded",
                result_ids=stored.all_ids,
                append_log=_log(
                    f"succeeded: the results of idempotency key {key!r} are stored already "
                    f"({', '.join(stored.all_ids) or 'no stored result'}); not run again"
                ),
            )
            return
        agent = outcome.agent.get("agent_id") or "this process"
        note = (
            f"; the results of idempotency key {key!r} were stored already: nothing new stored"
            if stored.duplicate
            else ""
        )
        self._finish(
            job_id,
            "succeeded",
            progress_done=state["done"],
            result_ids=stored.all_ids,
            append_log=_log(f"ran on agent {agent}{note}\nsucceeded: {outcome.summary or stored.all_ids}"),
        )


class _FinishedWhileCancelled(JobCancelled):
    """The agent finished the job while its cancel was on the way: nothing is stored."""
