"""Submitting a job to the agents: placement (refused at once when no live agent qualifies), a Dask task
restricted to the qualifying agents, Dask's own rescheduling when an agent dies mid-job, another qualifying agent
when the job raised on one, progress and log lines through Dask events, cancel through a Dask ``Event``.

The submitter stores nothing: the caller stores the returned outcome with ``RunStore.save_outcome(outcome, key)``
(exactly once per idempotency key, however many agents started the job)."""

from __future__ import annotations

import contextlib
import functools
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from repliscope.agents.cluster import PLUGIN_NAME, AgentInfo, Cluster
from repliscope.agents.placement import Constraints, NoAgentMatches, place
from repliscope.errors import RepliscopeError
from repliscope.job_execution import JobCancelled, JobOutcome, JobSpec, RunOptions

CANCEL_CHECK_S = 0.5
"""An agent checks the job's cancel Event at most this often (seconds), in its progress callback."""
PROGRESS_EVERY_S = 0.2
"""An agent sends a progress event at most this often (seconds); the last one always."""
POLL_S = 0.25
"""How often the submitter checks its cancel flag and the job's deadline."""
LIVENESS_S = 1.0
"""How often the submitter asks the scheduler whether an agent the job may run on is still alive (a call that costs
the scheduler and the submitter ~0.2 % of a core per waiting job at 0.25 s, taken from the agents' cores)."""


class JobFailedEverywhere(RepliscopeError):
    """The job failed on every qualifying agent; ``reasons``: agent id -> its error (or that it died)."""

    def __init__(self, job_id: str, reasons: dict[str, str]) -> None:
        self.job_id = job_id
        self.reasons = dict(reasons)
        listed = "; ".join(f"{agent}: {why}" for agent, why in sorted(self.reasons.items()))
        super().__init__(f"job {job_id} failed on every agent it could run on ({len(self.reasons)}): {listed}")


class AgentJobError(Exception):
    """A job raised on an agent: ``agent_id``, the exception's type name and message, and for an internal error
    (not a RepliscopeError/OSError) the agent's ``traceback`` (picklable, plain data: it travels with the
    result, so the job log has it even when the agent's events arrive after the failure)."""

    def __init__(self, agent_id: str, error_type: str, message: str, traceback: str = "") -> None:
        super().__init__(agent_id, error_type, message, traceback)
        self.agent_id = agent_id
        self.error_type = error_type
        self.message = message
        self.traceback = traceback

    def __str__(self) -> str:
        return f"{self.error_type}: {self.message}" if self.error_type != "RepliscopeError" else self.message

    def __repr__(self) -> str:  # Dask logs a failed task with its repr: the message, not a nested constructor
        return f"{self.error_type} on agent {self.agent_id}: {self.message}"


_JOB_FOLDER = re.compile(r"(?:/[^\s:'\"/]+)*/repliscope-job-[A-Za-z0-9_]+/")


def public_message(text: str, cache_dir: str | None = None) -> str:
    """An agent's error as a job may show it: without the agent's paths (the job's temporary folder, its cache
    folder -> ``<cache>``, its home -> ``~``); what the user gave (file names, fields) stays."""
    text = _JOB_FOLDER.sub("", text)
    if cache_dir:
        text = text.replace(cache_dir.rstrip("/"), "<cache>")
    home = str(Path.home())
    return text.replace(home + "/", "~/") if len(home) > 1 else text


def topic_of(job_id: str) -> str:
    return f"repliscope-job-{job_id}"


def cancel_event_name(job_id: str) -> str:
    return f"repliscope-cancel-{job_id}"


# -- agent side ------------------------------------------------------------------------------------------------
def run_on_agent(job_json: str, cache_dir: str | None) -> str:
    """The Dask task: run the job (:class:`JobSpec` as JSON) on this agent with ``execute_job``; returns the
    :class:`JobOutcome` as JSON (its ``agent`` = this agent's capabilities). Events on topic
    ``repliscope-job-<job_id>``: ``start``, ``total``, ``progress`` (cumulative ``done``), ``log``, ``error``."""
    from distributed import get_worker
    from distributed.utils import sync

    from repliscope.agents.capabilities import probe_capabilities
    from repliscope.job_execution import execute_job

    worker = get_worker()
    agent_id = str(worker.name)
    plugin = worker.plugins.get(PLUGIN_NAME)
    caps = getattr(plugin, "capabilities", None) or probe_capabilities(agent_id)
    job = JobSpec.from_json(job_json)
    topic = topic_of(job.job_id)

    def send(kind: str, **fields: Any) -> None:
        worker.log_event(topic, {"type": kind, "agent": agent_id, **fields})

    cancel_name = cancel_event_name(job.job_id)

    def cancelled() -> bool:  # the scheduler's flag, asked as the worker (an agent's certificate is no client's)
        return bool(sync(worker.loop, worker.scheduler.event_is_set, name=cancel_name))

    state = {"done": 0, "sent": 0.0, "checked": 0.0}

    def on_progress(n: int) -> None:
        state["done"] += n
        now = time.monotonic()
        if now - state["checked"] >= CANCEL_CHECK_S:
            state["checked"] = now
            if cancelled():
                raise JobCancelled(job.job_id)
        if now - state["sent"] >= PROGRESS_EVERY_S:
            state["sent"] = now
            send("progress", done=int(state["done"]))

    send("start", pid=caps.pid)
    try:
        outcome = execute_job(
            job,
            Path(cache_dir) if cache_dir else None,
            on_progress,
            lambda line: send("log", line=line),
            lambda n: send("total", n=n),
        )
    except JobCancelled:
        send("cancelled")
        raise
    except Exception as exc:
        import traceback

        internal = not isinstance(exc, (RepliscopeError, OSError))
        trace = traceback.format_exc() if internal else ""
        send("error", error_type=type(exc).__name__, message=public_message(str(exc), cache_dir), traceback=trace)
        base = "RepliscopeError" if isinstance(exc, RepliscopeError) else type(exc).__name__
        from repliscope.paths import default_cache_dir

        message = public_message(str(exc), cache_dir or str(default_cache_dir()))
        raise AgentJobError(agent_id, base, message, trace) from None
    send("progress", done=int(state["done"]))
    outcome.agent = caps.model_dump(mode="json")
    for made in (*outcome.records, *outcome.benchmarks):  # the stored record names the agent that made it
        if isinstance(made.get("hardware"), dict):
            made["hardware"]["agent_id"] = agent_id
    return outcome.model_dump_json()


# -- submitter side --------------------------------------------------------------------------------------------
def submit_job(
    cluster: Cluster,
    job: JobSpec,
    constraints: Constraints,
    on_progress: Callable[[int], None] | None = None,
    log: Callable[[str], None] | None = None,
    on_total: Callable[[int], None] | None = None,
    cancel: threading.Event | None = None,
    cache_dir: Path | None = None,
    timeout: float | None = None,
) -> JobOutcome:
    """Run ``job`` on an agent meeting ``constraints`` and return its outcome (stores nothing).

    Refused at once (:class:`NoAgentMatches`) when no live agent qualifies. The Dask task (key
    ``repliscope-job-<job_id>``) may run on any qualifying agent only; one that dies mid-job -> Dask reschedules
    it on another; one where it raised -> logged, resubmitted to the qualifying agents not tried yet; none left
    -> :class:`JobFailedEverywhere`. ``on_progress(n)``: n more samples done (never more than the total, also when
    an agent restarts the job); ``log(line)``; ``on_total(n)``; ``cancel`` set -> the agent stops at its next
    progress callback and :class:`JobCancelled` is raised here. ``cache_dir``: the agents' cache (None: theirs).
    ``timeout`` (seconds, None: none): the job is cancelled and a RepliscopeError raised when it takes longer.

    A job with option ``shards`` N (the service's sharded evaluation) runs as :func:`submit_merged`: N shard jobs,
    one merged record."""
    from distributed import Event

    sharding = _sharding(job)
    if sharding.shards is not None:
        return submit_merged(
            cluster,
            job,
            constraints,
            sharding.shards,
            allow_mixed_stacks=sharding.allow_mixed_stacks,
            on_progress=on_progress,
            log=log,
            on_total=on_total,
            cancel=cancel,
            cache_dir=cache_dir,
            timeout=timeout,
        )

    client = cluster.client
    topic = topic_of(job.job_id)
    progress = {"reported": 0}
    attempt_done: dict[str, int] = {}
    say = log or (lambda line: None)

    def handle(event: tuple[float, dict[str, Any]]) -> None:
        msg = event[1]
        kind, agent = msg.get("type"), str(msg.get("agent"))
        if kind == "start":
            starts.append(agent)
            attempt_done[agent] = 0
            say(f"running on agent {agent}")
        elif kind == "total" and on_total is not None:
            on_total(int(msg["n"]))
        elif kind == "log":
            say(str(msg.get("line")))
        elif kind == "progress":
            attempt_done[agent] = int(msg["done"])
            best = max(attempt_done.values())
            if best > progress["reported"]:
                delta, progress["reported"] = best - progress["reported"], best
                if on_progress is not None:
                    on_progress(delta)
        # "error": said from the AgentJobError itself (the event may arrive after the failure, or never)

    failures: dict[str, str] = {}
    starts: list[str] = []
    if cancel is not None and cancel.is_set():
        raise JobCancelled(job.job_id)
    client.subscribe_topic(topic, handle)
    cancel_event = Event(cancel_event_name(job.job_id), client=client)
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        attempt = 0
        while True:
            try:
                agents = [a for a in place(cluster, constraints) if a.capabilities.agent_id not in failures]
            except NoAgentMatches:
                if not failures:
                    raise  # refused at once
                agents = []  # the agents it failed on are gone now too
            if not agents:
                raise JobFailedEverywhere(job.job_id, failures)
            attempt += 1
            key = topic if attempt == 1 else f"{topic}-{attempt}"
            names = ", ".join(a.capabilities.agent_id for a in agents)
            say(
                f"submitted to {len(agents)} qualifying agent(s): {names}"
                if attempt == 1
                else f"resubmitted (attempt {attempt}) to {names}"
            )
            started_before = len(starts)
            future = client.submit(
                run_on_agent,
                job.to_json(),
                str(cache_dir) if cache_dir else None,
                key=key,
                workers=[a.address for a in agents],
                allow_other_workers=False,
                pure=False,
            )
            try:
                text = _wait(
                    cluster,
                    future,
                    agents,
                    cancel,
                    cancel_event,
                    job.job_id,
                    deadline,
                    functools.partial(_more, starts, started_before),
                )
            except AgentJobError as exc:
                say(f"agent {exc.agent_id}: {exc.error_type}: {exc.message}")
                if exc.traceback:  # an internal error: the agent's traceback goes to the log
                    say(exc.traceback.rstrip())
                failures[exc.agent_id] = str(exc)
                continue
            except KeyboardInterrupt:  # Ctrl-C in the submitter: stop the job on its agent too
                cancel_event.set()
                future.cancel()
                raise
            except _AllGone as exc:
                failures.update(exc.reasons)
                continue
            with contextlib.suppress(Exception):  # forget the task on the scheduler now: the outcome is here, and an
                client.cancel(future)  # agent leaving later must not make Dask "recompute" a finished job
            outcome = JobOutcome.model_validate_json(text)
            say(f"done on agent {outcome.agent.get('agent_id')} in {outcome.seconds:.2f} s")
            return outcome
    finally:
        client.unsubscribe_topic(topic)


def _sharding(job: JobSpec) -> RunOptions:
    """The job's options ``shards`` and ``allow_mixed_stacks``, typed; its other options are validated where the job
    runs (a wrong one is the agent's error, as for any job)."""
    if isinstance(job.options, RunOptions):
        return job.options
    return RunOptions.model_validate(
        {k: job.options[k] for k in ("shards", "allow_mixed_stacks") if job.options.get(k) is not None}
    )


def shard_jobs(job: JobSpec, shards: int) -> list[JobSpec]:
    """``job`` cut into ``shards`` jobs: option ``shard`` ``I/N`` (samples I::N), job ids ``<job_id>-sI``, no
    idempotency key of their own (a sharded run is stored once, merged, under ``job``'s key); a sampling declared
    for the whole run (``--as NAME/SPLIT@SAMPLING``) travels as option ``whole_sampling``."""
    import dataclasses

    if shards < 1:
        raise RepliscopeError(f"shards must be a positive integer, got {shards}")
    if job.run_options.shard is not None:
        raise RepliscopeError(f"job {job.job_id} is a shard already (option shard {job.run_options.shard})")
    # a sampling declared for the whole run (--as NAME/SPLIT@whole) is the merged record's; each shard alone is
    # a selection (every N-th sample), so it carries the declaration aside (checked here, against --limit)
    whole = job.run_options.run_settings(job.runtime)
    declared: dict[str, Any] = {}
    if whole.sampling is not None and whole.evaluated_as is not None:
        declared = {
            "evaluated_as": f"{whole.evaluated_as.name}/{whole.evaluated_as.split}",
            "whole_sampling": whole.sampling,
        }
    return [
        dataclasses.replace(
            job,
            job_id=f"{job.job_id}-s{i}",
            options=job.with_options(shard=f"{i}/{shards}", shards=None, allow_mixed_stacks=False, **declared),
            idempotency_key=None,
        )
        for i in range(shards)
    ]


def submit_sharded(
    cluster: Cluster,
    job: JobSpec,
    constraints: Constraints,
    shards: int,
    timeout: float | None = None,
    *,
    on_progress: Callable[[int], None] | None = None,
    log: Callable[[str], None] | None = None,
    on_total: Callable[[int], None] | None = None,
    cancel: threading.Event | None = None,
    cache_dir: Path | None = None,
    on_outcome: Callable[[int, JobOutcome], None] | None = None,
) -> list[JobOutcome]:
    """Run ``job`` as ``shards`` shard jobs (:func:`shard_jobs`) at once, each through :func:`submit_job` (one
    submitting thread each; Dask spreads them over the qualifying agents' threads; an agent that dies -> Dask
    reschedules the shard, a shard that raised on an agent -> resubmitted to another); the outcomes in shard order.
    ``on_progress`` / ``on_total``: the shards' samples together; ``log``: each line prefixed ``[shard I/N]``;
    ``on_outcome(I, outcome)``: in shard I's thread as its outcome arrives, while the others may still run (what it
    raises fails that shard).
    The first shard that fails everywhere cancels the others and is raised once they stopped; ``cancel`` set ->
    every shard is cancelled and :class:`JobCancelled` raised."""
    from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait

    parts = shard_jobs(job, shards)
    stop = threading.Event()
    lock = threading.Lock()

    def progress(n: int) -> None:
        if on_progress is not None:
            with lock:
                on_progress(n)

    def total(n: int) -> None:
        if on_total is not None:
            with lock:
                totals.append(n)
                if len(totals) == len(parts):
                    on_total(sum(totals))

    def say_for(label: str) -> Callable[[str], None]:
        return lambda line: log(f"[shard {label}] {line}") if log is not None else None

    def run(index: int, part: JobSpec) -> JobOutcome:
        outcome = submit_job(
            cluster,
            part,
            constraints,
            on_progress=progress,
            log=say_for(f"{index}/{shards}"),
            on_total=total,
            cancel=stop,
            cache_dir=cache_dir,
            timeout=timeout,
        )
        if on_outcome is not None:
            on_outcome(index, outcome)
        return outcome

    totals: list[int] = []
    with ThreadPoolExecutor(max_workers=shards, thread_name_prefix="repliscope-shard") as pool:
        futures = [pool.submit(run, i, part) for i, part in enumerate(parts)]
        pending = set(futures)
        try:
            while pending:
                _done, pending = wait(pending, timeout=POLL_S, return_when=FIRST_EXCEPTION)
                failed = any(f.done() and f.exception() is not None for f in futures)
                if failed or (cancel is not None and cancel.is_set()):
                    stop.set()  # the other shards stop at their next progress callback (or at once while waiting)
        except BaseException:  # Ctrl-C in the submitter: every shard stops on its agent before this returns
            stop.set()
            raise
    if cancel is not None and cancel.is_set():
        raise JobCancelled(job.job_id)
    first = next(
        (f.exception() for f in futures if f.exception() is not None and not isinstance(f.exception(), JobCancelled)),
        None,
    )
    if first is None:  # every failure is a cancel: a shard cancelled from its agent
        first = next((f.exception() for f in futures if f.exception() is not None), None)
    if first is not None:
        raise first
    return [f.result() for f in futures]


def submit_merged(
    cluster: Cluster,
    job: JobSpec,
    constraints: Constraints,
    shards: int,
    *,
    allow_mixed_stacks: bool = False,
    on_progress: Callable[[int], None] | None = None,
    log: Callable[[str], None] | None = None,
    on_total: Callable[[int], None] | None = None,
    cancel: threading.Event | None = None,
    cache_dir: Path | None = None,
    timeout: float | None = None,
) -> JobOutcome:
    """A sharded evaluation: :func:`submit_sharded`, then ONE outcome holding ONE record merged from every shard
    (:func:`repliscope.job_execution.merge_outcomes`: every sample once, metrics and verdicts over all of them, the
    single-machine run's result hash; shards of different stacks refused unless ``allow_mixed_stacks``). Each
    shard's record is validated as it arrives (:func:`~repliscope.job_execution.outcome_shard`, while the others
    run), the merge itself once all are here. Nothing of a run with a failed shard or a refused merge comes back:
    the caller stores the merged outcome, in one transaction, or nothing. The shards' own records are not returned
    (the merged record lists them)."""
    from repliscope.evaluation.merge import Shard
    from repliscope.job_execution import merge_validated, outcome_shard

    if job.kind != "evaluate":
        raise RepliscopeError(f"only an evaluate job can be sharded and merged into one record, not {job.kind!r}")
    validated: dict[int, Shard] = {}

    def keep(index: int, outcome: JobOutcome) -> None:
        validated[index] = outcome_shard(outcome)

    outcomes = submit_sharded(
        cluster,
        job,
        constraints,
        shards,
        timeout,
        on_progress=on_progress,
        log=log,
        on_total=on_total,
        cancel=cancel,
        cache_dir=cache_dir,
        on_outcome=keep,
    )
    start = time.perf_counter()
    slowest = max(o.seconds for o in outcomes)
    merged = merge_validated([validated[i] for i in range(shards)], slowest, allow_mixed_stacks)
    agents = ", ".join(f"{i}/{shards} on {o.agent.get('agent_id')}" for i, o in enumerate(outcomes))
    if log is not None:
        log(f"merged {shards} shard(s) ({agents}) into one record in {time.perf_counter() - start:.3f} s")
    return merged


def dispatch_overheads(cluster: Cluster, jobs: list[JobSpec], constraints: Constraints) -> list[float]:
    """Per job, run one after the other: the submitter's wall seconds of :func:`submit_job` minus the seconds
    ``execute_job`` took on the agent (``JobOutcome.seconds``) = placement + the Dask round trip + events + the
    JSON of the outcome. Use no-op-ish jobs (e.g. one sample) to measure the dispatch overhead of a cluster."""
    out = []
    for job in jobs:
        start = time.perf_counter()
        outcome = submit_job(cluster, job, constraints)
        out.append(time.perf_counter() - start - outcome.seconds)
    return out


GONE_AFTER_S = 2.0
"""Seconds every agent a job may run on must stay absent from the scheduler's workers before the job gives up on
them (Dask itself reschedules on a live one; this only ends the wait when none is left)."""


def _more(items: list[str], before: int) -> bool:
    return len(items) > before


class _AllGone(Exception):
    def __init__(self, reasons: dict[str, str]) -> None:
        super().__init__(reasons)
        self.reasons = reasons


def _wait(
    cluster: Cluster,
    future: Any,
    agents: list[AgentInfo],
    cancel: threading.Event | None,
    cancel_event: Any,
    job_id: str,
    deadline: float | None,
    running: Callable[[], bool],
) -> str:
    """The task's result text; raises what the agent raised (AgentJobError / JobCancelled), :class:`_AllGone`
    when every agent it may run on is gone (Dask would wait for them forever), JobCancelled on ``cancel`` (at once
    while the task waits for an agent; else the agent stops at its next progress callback)."""
    from distributed.client import FutureCancelledError

    addresses = {a.address: a.capabilities.agent_id for a in agents}
    cancelled_at: float | None = None
    gone_since: float | None = None
    checked = time.monotonic()
    finished = threading.Event()
    future.add_done_callback(lambda _f: finished.set())
    while True:
        # wait for this future only, then result() without a timeout: a timeout on result() cancels the gather
        # the client shares between every job's future, and each later job then failed (UnboundLocalError)
        finished.wait(POLL_S)
        try:
            if future.done():
                return str(future.result())
        except FutureCancelledError:
            raise JobCancelled(job_id) from None
        except (AgentJobError, JobCancelled):
            raise
        except Exception as exc:  # KilledWorker (died too often) and the like
            raise _AllGone({agent: f"{type(exc).__name__}: {exc}" for agent in addresses.values()}) from exc
        if cancel is not None and cancel.is_set() and cancelled_at is None:
            cancelled_at = time.monotonic()
            cancel_event.set()
            if not running():  # still waiting for an agent: nothing to stop there
                future.cancel()
                raise JobCancelled(job_id)
        if deadline is not None and time.monotonic() > deadline:
            cancel_event.set()
            future.cancel()
            raise RepliscopeError(f"job {job_id} did not finish within its timeout; cancelled")
        if cancelled_at is not None and time.monotonic() - cancelled_at > 30:
            future.cancel()  # the agent did not reach a progress callback in 30 s
            raise JobCancelled(job_id)
        if time.monotonic() - checked < LIVENESS_S:
            continue
        checked = time.monotonic()
        live = set(cluster.live_workers())
        if live & set(addresses):
            gone_since = None
            continue
        if gone_since is None:  # one reading is not enough (a busy scheduler may answer between heartbeats)
            gone_since = time.monotonic()
        if time.monotonic() - gone_since >= GONE_AFTER_S:
            future.cancel()
            raise _AllGone({agent: "the agent died or left while it ran the job" for agent in addresses.values()})
