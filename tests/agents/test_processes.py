"""A real ``dask scheduler`` and two ``repliscope agent`` processes on localhost: listing with liveness, placement
by a selector only one agent meets, refusal, a job failing on every agent, and the kill test (an agent SIGKILLed
mid-job: the job completes on the other, exactly one record is stored for its idempotency key).

The tests share one scheduler and two agents (module scope) and run in file order; the kill test comes last."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

pytest.importorskip("distributed", reason="the 'agents' extra (dask, distributed) is not installed")

from repliscope.agents.cluster import Cluster
from repliscope.agents.placement import constraints_for
from repliscope.agents.submit import JobFailedEverywhere, dispatch_overheads, submit_job, submit_sharded
from repliscope.cli.main import app
from repliscope.evaluation.record import EvaluationRecord
from repliscope.job_execution import JobSpec
from repliscope.manifest.loader import load_manifest
from tests.agents.procs import Processes
from tests.conftest import LITE0
from tests.test_jobs import TINY, foolbox_folder, tiny_job


@dataclass
class Agents:
    address: str
    procs: Processes
    cluster: Cluster


@pytest.fixture(scope="module")
def agents(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Agents]:
    procs = Processes(tmp_path_factory.mktemp("procs"))
    try:
        address = procs.scheduler()
        procs.agent("agent-a", address)
        procs.agent("agent-b", address)
        with Cluster.connect(address) as cluster:
            try:
                cluster.wait_for_agents(2, timeout=90)
            except Exception as exc:
                raise RuntimeError(f"{exc}\n{procs.log('agent-a')}\n{procs.log('agent-b')}") from exc
            yield Agents(address, procs, cluster)
    finally:
        procs.stop_all()


def test_both_agents_are_listed_alive_with_their_ids(agents: Agents) -> None:
    found = {a.capabilities.agent_id: a for a in agents.cluster.agents()}
    assert sorted(found) == ["agent-a", "agent-b"]
    for name, agent in found.items():
        assert agent.alive and agent.capabilities.pid == agents.procs.procs[name].pid
        assert agent.capabilities.stack["key"] == "current"
    first_line = agents.procs.log("agent-a").splitlines()[0]
    assert first_line.startswith(f"agent agent-a at {found['agent-a'].address} (stack current")
    res = CliRunner().invoke(app, ["agents", "--scheduler", agents.address, "--json"])
    assert res.exit_code == 0, res.output
    listed = json.loads(res.stdout)
    assert [(a["capabilities"]["agent_id"], a["alive"]) for a in listed] == [("agent-a", True), ("agent-b", True)]


def test_sigterm_stops_an_agent_cleanly_and_it_is_listed_gone(agents: Agents) -> None:
    import signal

    proc = agents.procs.agent("agent-c", agents.address)
    agents.cluster.wait_for_agents(3, timeout=60)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    assert agents.procs.log("agent-c").rstrip().endswith("agent stopped")
    gone = {a.capabilities.agent_id: a for a in agents.cluster.agents()}["agent-c"]
    assert not gone.alive and gone.last_seen is not None and gone.executing == 0
    assert sorted(a.capabilities.agent_id for a in agents.cluster.agents() if a.alive) == ["agent-a", "agent-b"]


def test_a_second_agent_with_a_taken_name_exits_2(agents: Agents) -> None:
    proc = agents.procs.agent("agent-a-again", agents.address, name="agent-a")
    assert proc.wait(timeout=60) == 2
    assert (
        f"error: agent agent-a could not join the scheduler {agents.address}: an agent named 'agent-a' is "
        "already on that scheduler: give another --name"
    ) in agents.procs.log("agent-a-again")
    assert "Unable to connect to scheduler" not in agents.procs.log("agent-a-again")  # said once, by us


def test_placement_goes_only_to_the_agent_meeting_the_selector(agents: Agents) -> None:
    from repliscope.store.repository import RunStore

    c = constraints_for(load_manifest(TINY), "torch", hardware=["agent_id=agent-b"])
    ran = [
        submit_job(agents.cluster, tiny_job(f"sel-{i}", limit=4), c, timeout=120).agent["agent_id"] for i in range(3)
    ]
    assert ran == ["agent-b", "agent-b", "agent-b"]
    res = CliRunner().invoke(
        app,
        [
            "evaluate",
            str(TINY),
            "--dataset",
            foolbox_folder(),
            "--label-rule",
            "none",
            "--limit",
            "4",
            "--threads",
            "1",
            "--batch-size",
            "4",
            "--scheduler",
            agents.address,
            "--hardware",
            "agent_id=agent-b",
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    record = json.loads(res.stdout)
    assert record["hardware"]["agent_id"] == "agent-b" and record["counts"]["evaluated"] == 4
    assert RunStore().get(record["run_id"]).hardware["agent_id"] == "agent-b"


def test_refused_at_once_when_no_agent_matches(agents: Agents) -> None:
    res = CliRunner().invoke(
        app,
        [
            "evaluate",
            str(TINY),
            "--dataset",
            foolbox_folder(),
            "--label-rule",
            "none",
            "--scheduler",
            agents.address,
            "--hardware",
            "agent_id=agent-c",
            "--requires",
            "torch<2",
        ],
    )
    assert res.exit_code == 2
    assert res.stderr.startswith("error: no live agent meets the job's constraints (")
    for name in ("agent-a", "agent-b"):
        assert (
            f"{name}: requires torch<2: torch " in res.stderr
            and f"hardware agent_id=agent-c not met (agent_id is {name})" in res.stderr
        )


def test_a_job_failing_on_every_agent_names_both(agents: Agents) -> None:
    job = tiny_job("fails")
    job.dataset_spec = "/nonexistent/repliscope-images"
    lines: list[str] = []
    with pytest.raises(JobFailedEverywhere) as err:
        submit_job(agents.cluster, job, constraints_for(load_manifest(TINY), "torch"), log=lines.append, timeout=120)
    assert sorted(err.value.reasons) == ["agent-a", "agent-b"]
    for why in err.value.reasons.values():
        assert why.startswith(
            "dataset '/nonexistent/repliscope-images' is neither a registered dataset nor a directory"
        )
    assert any(line.startswith("resubmitted (attempt 2) to agent-") for line in lines)


def test_shards_run_on_both_agents_at_once_and_cover_the_dataset(agents: Agents) -> None:
    c = constraints_for(load_manifest(TINY), "torch")
    outcomes = submit_sharded(agents.cluster, tiny_job("shards", limit=10), c, shards=2, timeout=120)
    assert sorted(o.agent["agent_id"] for o in outcomes) == ["agent-a", "agent-b"]
    ids = [[s["sample_id"] for s in o.records[0]["samples"]] for o in outcomes]
    whole = sorted(p.name for p in Path(foolbox_folder()).iterdir() if p.suffix in (".jpg", ".png"))[:10]
    assert ids == [whole[0::2], whole[1::2]]


def test_a_sharded_run_is_one_record_and_a_shard_that_failed_reruns_on_the_other_agent(
    agents: Agents, tmp_path: Path
) -> None:
    """The manifest file the shards read is broken at first (as on an agent whose copy is stale): the shard(s) that
    read it fail on their agent and are resubmitted to the other one (the file is repaired when the failure is
    logged), where they succeed. One record comes back, merged from both shards: every sample once, the
    single-machine result hash, each shard's agent in its provenance."""
    import re
    import shutil

    from repliscope.agents.submit import submit_merged
    from repliscope.job_execution import execute_job

    shutil.copytree(TINY.parent / "models", tmp_path / "models")
    shutil.copy(TINY.parent / "tiny-labels.txt", tmp_path / "tiny-labels.txt")
    manifest = tmp_path / TINY.name
    manifest.write_text("name: a stale copy\n", encoding="utf-8")
    failed_on: dict[str, str] = {}
    lines: list[str] = []
    repair = threading.Lock()  # each shard logs from its own thread: both may fail at the same moment

    def log(line: str) -> None:
        lines.append(line)
        found = re.match(r"\[shard (\d/2)\] agent (\S+): RepliscopeError: option manifest_path ", line)
        if found:
            with repair:
                if not failed_on:  # repaired once, atomically: a retried shard must never read a half-written file
                    fresh = tmp_path / "fresh.yaml"
                    fresh.write_text(TINY.read_text(encoding="utf-8"), encoding="utf-8")
                    fresh.replace(manifest)
                failed_on[found.group(1)] = found.group(2)

    job = tiny_job("fail-once", limit=10, manifest_path=str(manifest))
    outcome = submit_merged(agents.cluster, job, constraints_for(load_manifest(TINY), "torch"), 2, log=log, timeout=120)
    record = EvaluationRecord.model_validate(outcome.records[0])
    assert failed_on, lines  # the first shard to start read the stale copy
    assert record.shards is not None
    for shard in record.shards:
        if shard.shard in failed_on:
            assert shard.agent_id in {"agent-a", "agent-b"} - {failed_on[shard.shard]}
            assert any(line.startswith(f"[shard {shard.shard}] resubmitted (attempt 2) to ") for line in lines)
    whole = execute_job(tiny_job("whole", limit=10), None, lambda n: None, lambda line: None).records[0]
    assert record.result_hash == whole["result_hash"] and len(record.samples) == 10
    assert [p.samples for p in record.shards] == [5, 5]


def test_dispatch_overhead_on_the_tcp_scheduler(agents: Agents) -> None:
    """Each job's dispatch overhead is measured (positive) and is part of the call's own wall time; how fast it is
    is measured by benchmarks/bench_agents.py, not here."""
    c = constraints_for(load_manifest(TINY), "torch", hardware=["agent_id=agent-b"])
    start = time.perf_counter()
    overheads = dispatch_overheads(agents.cluster, [tiny_job(f"noop-{i}", limit=1) for i in range(5)], c)
    wall = time.perf_counter() - start
    assert len(overheads) == 5 and all(0 < o <= wall for o in overheads)
    assert sum(overheads) <= wall  # one job after the other


@pytest.mark.slow
def test_kill_an_agent_mid_job_completes_elsewhere_and_stores_once(agents: Agents) -> None:
    """SIGKILL the agent the job started on once its progress shows it running: Dask reschedules the task on the
    other agent, the job completes there, one record is stored for the key; the same key again stores nothing."""
    from repliscope.store.repository import RunStore

    job = JobSpec(
        "kill-1",
        "evaluate",
        "efficientnet-lite0@1",
        LITE0.read_text(encoding="utf-8"),
        "torch",
        "foolbox",
        foolbox_folder(),
        {"manifest_path": str(LITE0), "label_rule": "none", "threads": 1, "batch_size": 1, "limit": 100},
        idempotency_key="kill-key",
    )
    started: list[str] = []
    killed: list[str] = []
    progress: list[int] = []
    lock = threading.Lock()

    def log(line: str) -> None:
        if line.startswith("running on agent "):
            started.append(line.removeprefix("running on agent "))

    def on_progress(n: int) -> None:
        progress.append(n)
        with lock:
            if not killed and started:
                killed.append(started[0])
                agents.procs.kill(started[0])

    outcome = submit_job(
        agents.cluster,
        job,
        constraints_for(load_manifest(LITE0), "torch"),
        log=log,
        on_progress=on_progress,
        timeout=180,
    )
    assert len(killed) == 1
    survivor = {"agent-a", "agent-b"} - set(killed)
    assert outcome.agent["agent_id"] in survivor and started[-1] in survivor and len(started) == 2
    assert outcome.records[0]["counts"]["evaluated"] == 100 and sum(progress) == 100
    store = RunStore()
    stored = store.save_outcome(outcome, job.key)
    assert not stored.duplicate and store.count_job_results() == 1 and len(store.list()) == 1
    res = CliRunner().invoke(
        app,
        [
            "evaluate",
            str(LITE0),
            "--dataset",
            foolbox_folder(),
            "--label-rule",
            "none",
            "--limit",
            "100",
            "--scheduler",
            agents.address,
            "--idempotency-key",
            "kill-key",
        ],
    )
    assert res.exit_code == 0, res.output
    assert (
        f"idempotency key kill-key is already stored (run(s) {stored.run_ids[0]}): nothing was run or stored"
        in " ".join(res.stdout.split())
    )
    assert store.save_outcome(outcome, job.key).duplicate
    assert store.count_job_results() == 1 and len(store.list()) == 1
    gone = {a.capabilities.agent_id: a for a in agents.cluster.agents()}[killed[0]]
    assert not gone.alive and gone.last_seen is not None and gone.executing == 0


@pytest.mark.slow
def test_the_last_agent_killed_mid_job_fails_it_naming_the_agent(agents: Agents) -> None:
    """After the kill test one agent is left: SIGKILL it mid-job -> JobFailedEverywhere naming it (not a job that
    waits forever for an agent)."""
    [survivor] = [a.capabilities.agent_id for a in agents.cluster.agents() if a.alive]
    job = JobSpec(
        "kill-2",
        "evaluate",
        "efficientnet-lite0@1",
        LITE0.read_text(encoding="utf-8"),
        "torch",
        "foolbox",
        foolbox_folder(),
        {"manifest_path": str(LITE0), "label_rule": "none", "threads": 1, "batch_size": 1, "limit": 100},
    )
    killed: list[str] = []

    def on_progress(n: int) -> None:
        if not killed:
            killed.append(survivor)
            agents.procs.kill(survivor)

    with pytest.raises(JobFailedEverywhere) as err:
        submit_job(
            agents.cluster, job, constraints_for(load_manifest(LITE0), "torch"), on_progress=on_progress, timeout=120
        )
    assert err.value.reasons == {survivor: "the agent died or left while it ran the job"}
