"""Run one manifest on the same samples in several stacks, on agents, and build the :class:`StackMatrix`.

Each stack needs a live agent running in it (``software["stack"]["key"]`` of its capabilities): a live one on the
cluster is reused, else a local agent process is started in the stack's interpreter (:func:`agent_command`) and
stopped at the end. The jobs run one after the other (their timings are not disturbed by each other), each
restricted to its stack's agents (``Constraints(stack=KEY)``) with raw outputs kept. Dask is imported lazily.
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import tempfile
import time
import uuid
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from repliscope.stacks.matrix import StackEntry, StackMatrix, build_matrix
from repliscope.stacks.spec import StackError
from repliscope.stacks.store import Stack, agent_command, create_stack, get_stack

if TYPE_CHECKING:
    from repliscope.agents.cluster import Cluster
    from repliscope.job_execution import JobOutcome

AGENT_START_TIMEOUT = 180.0
"""Seconds a started stack agent may take to join the scheduler (imports of a cold venv included)."""


@dataclass
class StartedAgent:
    """A local agent process this run started (stopped at the end)."""

    stack: Stack
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path
    log: IO[bytes] = field(repr=False)

    def tail(self, lines: int = 12) -> str:
        self.log.flush()
        text = self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()
        return "\n".join(text[-lines:])


def resolve_stacks(
    specs: Sequence[str], on_line: Callable[[str], None] | None = None, cache_dir: Path | None = None
) -> list[Stack]:
    """The stacks named by key, key prefix or spec (``current`` included); a spec with no stack yet is created
    (:func:`create_stack`), an unknown key (6-12 hex) is an error. StackError when two names are the same stack
    or none is given."""
    if not specs:
        raise StackError("give at least one --stack (a key, a spec such as 'onnxruntime==1.20.1', or current)")
    stacks = []
    for text in specs:
        try:
            stacks.append(get_stack(text, cache_dir))
        except StackError as exc:
            if not str(exc).startswith("no stack") or re.fullmatch(r"[0-9a-f]{6,12}", text.strip()):
                raise  # a key that matches no stack is not a spec to create
            stacks.append(create_stack(text, on_line, cache_dir))
    keys = [s.key for s in stacks]
    dupes = sorted({k for k in keys if keys.count(k) > 1})
    if dupes:
        raise StackError(f"--stack names stack {', '.join(dupes)} more than once ({', '.join(specs)})")
    return stacks


def default_batch_size(loaded: Any, batch: int = 8) -> int:
    """``batch``, or 1 when the manifest's model takes one image at a time (batch axis fixed at 1, or a dynamic
    image axis), so every stack runs the same batches."""
    shape = list(loaded.manifest.inputs[0].shape) if loaded.manifest.inputs else []
    return 1 if shape and (shape[0] == 1 or any(d < 0 for d in shape[1:])) else batch


@contextlib.contextmanager
def versions_differ() -> Iterator[None]:
    """Agents in other stacks differ in package versions on purpose (numpy 1 vs 2): Dask's client/worker version
    check is noise while they run."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Mismatched versions found")
        yield


def live_agent_of(cluster: Cluster, key: str) -> str | None:
    for agent in cluster.agents():
        if agent.alive and (agent.capabilities.stack or {}).get("key") == key:
            return agent.capabilities.agent_id
    return None


def start_stack_agent(cluster: Cluster, stack: Stack, folder: Path) -> StartedAgent:
    """A local agent process in ``stack``'s interpreter joining ``cluster`` (its output in ``folder``)."""
    name = f"stack-{stack.key}-{uuid.uuid4().hex[:6]}"
    log_path = folder / f"{name}.log"
    log = log_path.open("wb")
    process = subprocess.Popen(
        agent_command(stack, cluster.address, name, cluster.security),
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    return StartedAgent(stack, name, process, log_path, log)


def wait_for_started(cluster: Cluster, started: Sequence[StartedAgent], timeout: float) -> None:
    """Block until every started agent is alive on the cluster; StackError with its output when one exits or
    does not join within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    waiting = list(started)
    while waiting:
        alive = {a.capabilities.agent_id for a in cluster.agents() if a.alive}
        for s in list(waiting):
            if s.name in alive:
                waiting.remove(s)
            elif s.process.poll() is not None:
                raise StackError(
                    f"the agent of stack {s.stack.key} ({s.stack.spec}) exited with code "
                    f"{s.process.returncode} before joining {cluster.address}:\n{s.tail()}"
                )
        if waiting and time.monotonic() > deadline:
            raise StackError(
                f"the agent of stack {waiting[0].stack.key} did not join {cluster.address} within "
                f"{timeout:.0f} s:\n{waiting[0].tail()}"
            )
        if waiting:
            time.sleep(0.2)


def stop_started(started: Sequence[StartedAgent]) -> None:
    """SIGTERM each started agent, SIGKILL it after 10 s."""
    for s in started:
        with contextlib.suppress(ProcessLookupError):
            s.process.terminate()
    for s in started:
        try:
            s.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            s.process.kill()
            s.process.wait(timeout=10)
        s.log.close()


def _for_stack(callback: Callable[[str, int], None] | None, key: str) -> Callable[[int], None] | None:
    """``callback`` with the stack key bound (None stays None)."""
    if callback is None:
        return None
    bound = callback

    def call(n: int) -> None:
        bound(key, n)

    return call


def _run_all(
    active: Cluster,
    resolved: list[Stack],
    loaded: Any,
    runtime: str,
    dataset_spec: str,
    matrix_id: str,
    batch: int,
    outcomes: list[JobOutcome | str],
    started: list[StartedAgent],
    say: Callable[[str], None],
    on_progress: Callable[[str, int], None] | None,
    on_total: Callable[[str, int], None] | None,
    limit: int | None,
    label_rule: str | None,
    threads: int,
    manifest: Path,
    agent_timeout: float,
) -> None:
    """Start the missing agents, run one job per stack in order (appending its outcome to ``outcomes``, or why it
    failed on the stack's agent: the other stacks still run), stop the agents."""
    from repliscope.agents.placement import NoAgentMatches, constraints_for
    from repliscope.agents.submit import JobFailedEverywhere, submit_job
    from repliscope.job_execution import JobSpec, RunOptions

    with tempfile.TemporaryDirectory(prefix="repliscope-stack-agents-") as tmp:
        for stack in resolved:
            agent = live_agent_of(active, stack.key)
            if agent is not None:
                say(f"stack {stack.key}: reusing live agent {agent}")
            else:
                started.append(start_stack_agent(active, stack, Path(tmp)))
                say(f"stack {stack.key}: starting agent {started[-1].name} ({stack.python_executable})")
        try:
            wait_for_started(active, started, agent_timeout)
            for stack in resolved:
                job = JobSpec(
                    job_id=uuid.uuid4().hex,
                    kind="evaluate",
                    manifest_ref=f"{loaded.manifest.name}@{loaded.manifest.version}",
                    manifest_text=loaded.text,
                    runtime=runtime,
                    dataset_name=dataset_spec,
                    dataset_spec=dataset_spec,
                    options=RunOptions(
                        keep_outputs=True,
                        limit=limit,
                        label_rule=label_rule,
                        threads=threads,
                        batch_size=batch,
                        manifest_path=str(Path(manifest).resolve()),
                    ),
                    idempotency_key=f"stack-matrix-{matrix_id}-{stack.key}",
                )
                say(f"stack {stack.key} ({stack.spec}): evaluating {loaded.manifest.name} on {runtime}")
                try:
                    outcomes.append(
                        submit_job(
                            active,
                            job,
                            constraints_for(loaded, runtime, stack=stack.key),
                            on_progress=_for_stack(on_progress, stack.key),
                            on_total=_for_stack(on_total, stack.key),
                            log=say,
                        )
                    )
                except (JobFailedEverywhere, NoAgentMatches) as exc:
                    reasons = dict(getattr(exc, "reasons", None) or {})
                    if isinstance(exc, NoAgentMatches):  # only the stack's own agents say why it cannot run
                        reasons = {
                            a: r for a, r in reasons.items() if not any(str(x).startswith("runs stack ") for x in r)
                        }
                    why = (
                        "; ".join(str(r) if isinstance(r, str) else ", ".join(r) for r in reasons.values())
                        if reasons
                        else str(exc)
                    )
                    say(f"stack {stack.key} ({stack.spec}): failed: {why}")
                    outcomes.append(why)
        finally:
            stop_started(started)


def run_stacks(
    manifest: Path,
    stacks: Sequence[str],
    runtime: str,
    dataset_spec: str,
    cluster: Cluster | None = None,
    on_progress: Callable[[str, int], None] | None = None,
    *,
    on_total: Callable[[str, int], None] | None = None,
    log: Callable[[str], None] | None = None,
    limit: int | None = None,
    label_rule: str | None = None,
    threads: int = 1,
    batch_size: int | None = None,
    cache_dir: Path | None = None,
    agent_timeout: float = AGENT_START_TIMEOUT,
) -> tuple[StackMatrix, list[JobOutcome]]:
    """Evaluate ``manifest`` on ``dataset_spec`` (first ``limit`` samples) in each of ``stacks`` (keys or specs,
    ``current`` included; missing ones are created) -> (the matrix, one JobOutcome per stack that ran, in the
    given order). A stack whose job failed (e.g. its runtime refuses the model) is a matrix entry with ``error``
    and no pairs; StackError when every stack failed.

    ``cluster`` None: an in-process scheduler (its in-process agent is the ``current`` stack), closed at the end.
    Every job uses ``threads`` runtime threads and ``batch_size`` (default :func:`default_batch_size`), so the
    stacks differ only in their software. ``on_progress(stack_key, n)``, ``on_total(stack_key, n)`` and
    ``log(line)`` report as the jobs run. Nothing is stored (the caller stores the outcomes and the matrix)."""
    from repliscope.agents.cluster import Cluster
    from repliscope.evaluation.record import EvaluationRecord
    from repliscope.manifest.loader import load_manifest
    from repliscope.stacks.outputs import decode_outputs

    say = log or (lambda _line: None)
    loaded = load_manifest(manifest)
    resolved = resolve_stacks(stacks, say, cache_dir)
    matrix_id = uuid.uuid4().hex
    batch = batch_size or default_batch_size(loaded)
    own = cluster is None
    started: list[StartedAgent] = []
    outcomes: list[JobOutcome | str] = []
    with versions_differ():
        active = Cluster.connect(None) if cluster is None else cluster
        try:
            _run_all(
                active,
                resolved,
                loaded,
                runtime,
                dataset_spec,
                matrix_id,
                batch,
                outcomes,
                started,
                say,
                on_progress,
                on_total,
                limit,
                label_rule,
                threads,
                manifest,
                agent_timeout,
            )
        finally:
            if own:
                active.close()
    ran = [(stack, o) for stack, o in zip(resolved, outcomes, strict=True) if not isinstance(o, str)]
    failures = [
        (i, StackEntry(key=stack.key, spec=stack.spec, versions=stack.main_versions, error=o))
        for i, (stack, o) in enumerate(zip(resolved, outcomes, strict=True))
        if isinstance(o, str)
    ]
    if not ran:
        raise StackError("the job failed on every stack: " + "; ".join(f"{f.key}: {f.error}" for _, f in failures))
    records = [EvaluationRecord.model_validate(o.records[0]) for _, o in ran]
    for (stack, _), record in zip(ran, records, strict=True):
        ran_in = (record.software.get("stack") or {}).get("key")
        if ran_in != stack.key:
            raise StackError(f"the run for stack {stack.key} ran in stack {ran_in}: placement failed")
    matrix = build_matrix(
        records,
        {s.key: decode_outputs(o.outputs) for s, o in ran},
        agents={s.key: str(o.agent.get("agent_id")) for s, o in ran},
        matrix_id=matrix_id,
        failures=failures,
    )
    return matrix, [o for _, o in ran]
