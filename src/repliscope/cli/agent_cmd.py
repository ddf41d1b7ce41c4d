"""``repliscope agent`` (run an agent: a Dask worker advertising its capabilities), ``repliscope agents`` (list
them with liveness) and the agents path of ``repliscope evaluate --scheduler/--stack`` (:func:`evaluate_on_agents`).
Dask is imported only when one of these runs."""

from __future__ import annotations

import os
import sys
import tempfile
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from repliscope.cli.cluster_cmd import (
    InsecureClusterOption,
    TlsCaOption,
    TlsCertOption,
    TlsKeyOption,
    cluster_security,
)
from repliscope.cli.common import JsonOption, emit_json, fail
from repliscope.cli.output import console, print_table, sample_progress
from repliscope.errors import RepliscopeError

if TYPE_CHECKING:
    from repliscope.job_execution import RunOptions

SchedulerOption = Annotated[
    str | None,
    typer.Option(
        "--scheduler",
        help="Dask scheduler address PROTOCOL://HOST:PORT (tcp, ws, tls, wss), or 'local' (an in-process "
        "scheduler with one agent).",
    ),
]


def register(app: typer.Typer) -> None:
    """Add ``agent`` and ``agents`` to ``app`` (``cluster``, the certificates, is :mod:`repliscope.cli.cluster_cmd`)."""
    app.command("agent")(agent)
    app.command("agents")(agents)


def _runtime_versions(caps: Any) -> str:
    """``onnxruntime 1.32.0, torch 2.13.0+cpu``: each available runtime with its first installed distribution."""
    parts = []
    for name, dists in sorted(caps.runtimes.items()):
        version = next((v for v in dists.values() if v), None)
        parts.append(f"{name} {version}" if version else name)
    return ", ".join(parts) or "none"


def describe_agent(caps: Any, address: str) -> str:
    """One line: id, address, stack, runtimes and versions, CPU, cores, memory, GPUs."""
    memory = f"{caps.memory_gib:g} GiB" if caps.memory_gib is not None else "memory unknown"
    return (
        f"agent {caps.agent_id} at {address} (stack {caps.stack.get('key')}, repliscope "
        f"{caps.repliscope_version}, python {caps.python}): runtimes {_runtime_versions(caps)}; "
        f"{caps.cpu_model}, {caps.cores} cores, {memory}, GPUs: {', '.join(caps.gpus) or 'none'}"
    )


def agent(
    scheduler: Annotated[
        str,
        typer.Option("--scheduler", help="Dask scheduler address tcp://HOST:PORT (start one with `dask scheduler`)."),
    ],
    name: Annotated[
        str | None, typer.Option("--name", help="Agent id (unique on the scheduler; default: HOSTNAME-PID).")
    ] = None,
    nthreads: Annotated[int, typer.Option(min=1, help="Jobs this agent runs at once.")] = 1,
    stack: Annotated[
        str | None,
        typer.Option(
            "--stack",
            help="Run the agent inside this provisioned stack's "
            "environment (key or spec; `repliscope stack "
            "create SPEC` first).",
        ),
    ] = None,
    host: Annotated[
        str | None,
        typer.Option(
            "--host",
            help="Interface to listen on (default: 127.0.0.1, required when the scheduler is on another host).",
        ),
    ] = None,
    tls_ca_file: TlsCaOption = None,
    tls_cert: TlsCertOption = None,
    tls_key: TlsKeyOption = None,
    insecure_cluster: InsecureClusterOption = False,
) -> None:
    """Run an agent in the foreground: a Dask worker that advertises its runtimes (exact versions), CPU, memory,
    GPUs and stack, and runs the jobs placed on it. Ctrl-C / SIGTERM stop it cleanly. It listens on loopback
    unless --host names an interface; across machines use tls:// with the --tls-* files."""
    from repliscope.agents.cluster import run_agent

    try:
        security = cluster_security(tls_ca_file, tls_cert, tls_key, insecure_cluster)
    except RepliscopeError as exc:
        fail(exc)
    if stack is not None:
        try:
            from repliscope.stacks.spec import CURRENT
            from repliscope.stacks.store import agent_command, get_stack

            found = get_stack(stack)
        except RepliscopeError as exc:
            fail(exc)
        if found.key != CURRENT:
            cmd = agent_command(found, scheduler, name, security)
            cmd += ["--nthreads", str(nthreads)] + (["--host", host] if host else [])
            print(
                f"starting the agent in stack {found.key} ({found.spec}): {' '.join(cmd)}", file=sys.stderr, flush=True
            )
            os.execv(cmd[0], cmd)

    def ready(caps: Any, address: str) -> None:
        print(describe_agent(caps, address), flush=True)
        print(f"joined {scheduler}; Ctrl-C or SIGTERM stops it", file=sys.stderr, flush=True)

    try:
        run_agent(scheduler, name, nthreads, on_ready=ready, host=host, security=security)
    except RepliscopeError as exc:
        fail(exc)
    print("agent stopped", file=sys.stderr, flush=True)


def agents(
    scheduler: SchedulerOption = None,
    as_json: JsonOption = False,
    tls_ca_file: TlsCaOption = None,
    tls_cert: TlsCertOption = None,
    tls_key: TlsKeyOption = None,
    insecure_cluster: InsecureClusterOption = False,
) -> None:
    """List the agents the scheduler knows: alive (a live worker now) or gone (last seen when), with what each
    advertises. Without --scheduler: the in-process agent this machine would start."""
    from repliscope.agents.cluster import Cluster

    try:
        from repliscope.stacks.run import versions_differ

        security = cluster_security(tls_ca_file, tls_cert, tls_key, insecure_cluster)
        with versions_differ(), Cluster.connect(scheduler, security=security) as cluster:
            found = cluster.agents()
    except RepliscopeError as exc:
        fail(exc)
    if as_json:
        emit_json([a.model_dump(mode="json") for a in found])
        return
    rows = []
    for a in found:
        c = a.capabilities
        rows.append(
            [
                c.agent_id,
                "alive" if a.alive else "gone",
                c.hostname,
                c.stack.get("key", "?"),
                _runtime_versions(c),
                c.cpu_model,
                c.cores,
                "?" if c.memory_gib is None else f"{c.memory_gib:g} GiB",
                a.executing,
                "now" if a.alive else (a.last_seen.strftime("%Y-%m-%d %H:%M:%S UTC") if a.last_seen else "?"),
            ]
        )
    print_table(
        f"agents on {scheduler or 'an in-process scheduler'}",
        ["agent", "alive", "host", "stack", "runtimes", "cpu", "cores", "memory", "executing", "last seen"],
        rows,
    )


# -- evaluate --scheduler / --stack ---------------------------------------------------------------------------
def _stack_key(stack: str | None) -> tuple[str | None, Any]:
    """(stack key, Stack) of ``--stack`` (None, None without one)."""
    if stack is None:
        return None, None
    from repliscope.stacks.store import get_stack

    found = get_stack(stack)
    return found.key, found


def evaluate_on_agents(
    manifest: Path,
    runtime: str | None,
    dataset: str,
    options: RunOptions,
    scheduler: str | None,
    requires: list[str],
    hardware: list[str],
    stack: str | None,
    idempotency_key: str | None,
    db: str | None,
    as_json: bool,
    security: Any = None,
    shards: int | None = None,
    allow_mixed_stacks: bool = False,
) -> None:
    """``evaluate`` on an agent: build a JobSpec (kind evaluate) from the run ``options``, place it (refused at once
    when no live agent qualifies), and through ``run_and_store`` run it with ``submit_job`` and store it under the
    idempotency key (a key already stored runs nothing and shows the stored run), print the record like the
    in-process evaluate and the agent.
    ``--stack`` without a live agent of that stack starts one (in the stack's venv) and stops it afterwards.
    ``shards`` (``--shards N``): N shard jobs at once (:func:`~repliscope.agents.submit.submit_merged`), merged
    into ONE record that is stored (the shards' own records are not); the output ends with its run id."""
    from repliscope.agents.cluster import Cluster
    from repliscope.agents.placement import constraints_for
    from repliscope.agents.submit import submit_job, submit_merged
    from repliscope.cli.output import print_record
    from repliscope.evaluation.record import EvaluationRecord
    from repliscope.job_execution import JobOutcome, JobSpec, run_and_store
    from repliscope.manifest.loader import load_manifest
    from repliscope.stacks.run import (
        AGENT_START_TIMEOUT,
        live_agent_of,
        start_stack_agent,
        stop_started,
        versions_differ,
        wait_for_started,
    )
    from repliscope.store.repository import RunStore

    started: list[Any] = []
    try:
        if scheduler is not None:  # a usage error before anything is loaded or stored
            from repliscope.agents.cluster import check_scheduler_address

            check_scheduler_address(scheduler, local_allowed=True)
        loaded = load_manifest(manifest)
        for warning in loaded.warnings:
            print(f"warning: {warning}", file=sys.stderr)
        from repliscope.cli.common import flag_of

        # resolved as the agent will resolve the job's options: a bad --schedule or --as is refused before any agent
        runtime = options.run_settings(runtime, manifest=loaded, source="cli", name=flag_of).runtime
        key_of_stack, found = _stack_key(stack)
        constraints = constraints_for(loaded, runtime, requires, hardware, key_of_stack)
        store = RunStore(db)
        job_id = uuid.uuid4().hex
        key = idempotency_key or job_id
        local_path = Path(dataset).expanduser()
        dataset_spec = str(local_path.resolve()) if local_path.is_dir() else dataset
        job = JobSpec(
            job_id,
            "evaluate",
            f"{loaded.manifest.name}@{loaded.manifest.version}",
            loaded.text,
            runtime,
            dataset,
            dataset_spec,
            options.model_copy(update={"manifest_path": str(loaded.path.resolve())}),
            idempotency_key=key,
        )

        def run(job: JobSpec) -> JobOutcome:
            with (
                versions_differ(),
                Cluster.connect(scheduler, security=security) as cluster,
                tempfile.TemporaryDirectory(prefix="repliscope-stack-agent-") as agent_logs,
            ):
                if found is not None and live_agent_of(cluster, found.key) is None:
                    print(f"starting a local agent in stack {found.key} ({found.spec})", file=sys.stderr)
                    started.append(start_stack_agent(cluster, found, Path(agent_logs)))
                    try:
                        wait_for_started(cluster, started, AGENT_START_TIMEOUT)
                    except RepliscopeError:
                        stop_started(started)
                        started.clear()
                        raise
                try:
                    with sample_progress(disable=as_json) as progress:
                        task = progress.add_task(f"{loaded.manifest.name} on {runtime} (agents)", total=None)
                        if shards is not None:
                            return submit_merged(
                                cluster,
                                job,
                                constraints,
                                shards,
                                allow_mixed_stacks=allow_mixed_stacks,
                                on_progress=lambda n: progress.advance(task, n),
                                log=lambda line: print(line, file=sys.stderr),
                                on_total=lambda n: progress.update(task, total=n),
                            )
                        return submit_job(
                            cluster,
                            job,
                            constraints,
                            on_progress=lambda n: progress.advance(task, n),
                            log=lambda line: print(line, file=sys.stderr),
                            on_total=lambda n: progress.update(task, total=n),
                        )
                finally:
                    stop_started(started)

        done = run_and_store(job, store, run)
        stored, outcome = done.stored, done.outcome
        if outcome is None:  # the key was stored already: nothing ran
            record = store.get(stored.run_ids[0]) if stored.run_ids else None
            if as_json:
                emit_json(record.model_dump(mode="json") if record else stored.model_dump(mode="json"))
            else:
                if record is not None:
                    print_record(record)
                console.print(
                    f"idempotency key {key} is already stored (run(s) {', '.join(stored.run_ids)}): "
                    "nothing was run or stored",
                    highlight=False,
                )
            return
    except RepliscopeError as exc:
        fail(exc)
    record = EvaluationRecord.model_validate(outcome.records[0])
    agent_id = outcome.agent.get("agent_id")
    if as_json:
        emit_json(record.model_dump(mode="json"))
    else:
        print_record(record)
        note = " (duplicate: stored earlier under this key, nothing new stored)" if stored.duplicate else ""
        if record.shards is not None:  # the last words: the id of the one merged record
            on = ", ".join(f"{p.shard} on {p.agent_id}" for p in record.shards)
            console.print(
                f"ran {len(record.shards)} shards ({on}) in {outcome.seconds:.2f} s, idempotency key {key}{note}; "
                f"merged into one record, stored as run [bold]{', '.join(stored.run_ids)}[/]",
                highlight=False,
            )
        else:
            console.print(
                f"ran on agent [bold]{agent_id}[/] in {outcome.seconds:.2f} s; stored as run "
                f"[bold]{', '.join(stored.run_ids)}[/] (idempotency key {key}){note}",
                highlight=False,
            )
    if record.counts["evaluated"] == 0:
        print(f"error: every one of the {record.counts['total']} samples failed (see the record)", file=sys.stderr)
        raise typer.Exit(code=1)
