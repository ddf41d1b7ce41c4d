"""Issue 20 item 3 (hostile input: a burst of jobs): the submitter polled ``future.result(timeout=0.25)``, whose
timeout cancelled the gather the Dask client shares across jobs; after ~30 successes every later job failed with
``UnboundLocalError: cannot access local variable 'result'`` until a restart. Item 16: one job of the burst was
refused "no live agent" while the agents were alive (a shared ``scheduler_info`` cache). Now 100 concurrent jobs
all succeed and each is stored once; an internal failure keeps the agent's traceback in the job's log."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytest.importorskip("distributed", reason="the 'agents' extra (dask, distributed) is not installed")

from repliscope.agents.cluster import Cluster
from repliscope.agents.placement import constraints_for
from repliscope.agents.submit import JobFailedEverywhere, submit_job
from repliscope.job_execution import JobOutcome
from repliscope.manifest.loader import load_manifest
from tests.agents.procs import Processes
from tests.test_jobs import TINY, tiny_job

JOBS = 100


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with Cluster.connect(None) as c:
        yield c


def _store_write(_line: str) -> None:
    """A log callback as slow as the service's (it writes each line to its store): it runs on the Dask client's
    event loop, so results take longer to collect; this is what made the old poll's timeout cancel a gather."""
    time.sleep(0.05)


def _burst(cluster: Cluster, prefix: str, n: int = JOBS) -> list[JobOutcome]:
    constraints = constraints_for(load_manifest(TINY), "torch")
    jobs = [tiny_job(f"{prefix}-{i}", limit=1, batch_size=1) for i in range(n)]
    with ThreadPoolExecutor(max_workers=n) as pool:
        futures = [pool.submit(submit_job, cluster, job, constraints, log=_store_write) for job in jobs]
        return [f.result() for f in futures]  # the first failure is raised here


def _store_each_once(outcomes: list[JobOutcome], prefix: str, tmp_path: Path) -> None:
    from repliscope.store.repository import RunStore

    store = RunStore(f"sqlite:///{tmp_path / 'burst.db'}")
    stored = [store.save_outcome(o, f"{prefix}-{i}") for i, o in enumerate(outcomes)]
    again = [store.save_outcome(o, f"{prefix}-{i}") for i, o in enumerate(outcomes)]
    assert not any(s.duplicate for s in stored) and all(s.duplicate for s in again)
    assert store.count_job_results() == len(outcomes)
    assert len({rid for s in stored for rid in s.run_ids}) == len(outcomes) == len(store.list(limit=1000))


def test_a_burst_of_100_jobs_on_the_embedded_cluster_all_succeed_and_later_jobs_too(
    cluster: Cluster, tmp_path: Path
) -> None:
    start = time.monotonic()
    outcomes = _burst(cluster, "burst")
    print(f"{JOBS} concurrent jobs on the embedded cluster: {time.monotonic() - start:.1f} s")
    assert [o.records[0]["counts"]["evaluated"] for o in outcomes] == [1] * JOBS
    _store_each_once(outcomes, "burst", tmp_path)
    after = submit_job(cluster, tiny_job("after-burst", limit=1), constraints_for(load_manifest(TINY), "torch"))
    assert after.records[0]["counts"]["evaluated"] == 1  # the client still works after the burst


def test_an_internal_failure_keeps_the_agents_traceback_in_the_log(cluster: Cluster) -> None:
    lines: list[str] = []
    job = tiny_job("broken", limit=1, batch_size="eight")  # a wrong option type: an internal error on the agent
    with pytest.raises(JobFailedEverywhere) as failed:
        submit_job(cluster, job, constraints_for(load_manifest(TINY), "torch"), log=lines.append)
    text = "\n".join(lines)
    assert "Traceback (most recent call last)" in text and "execute_job" in text
    assert "AgentJobError(" not in str(failed.value) and "AgentJobError(" not in text


@pytest.mark.slow
def test_a_burst_on_a_tcp_scheduler_with_two_agent_processes(tmp_path: Path) -> None:
    procs = Processes(tmp_path)
    try:
        address = procs.scheduler()
        procs.agent("agent-a", address)
        procs.agent("agent-b", address)
        with Cluster.connect(address) as tcp:
            tcp.wait_for_agents(2, timeout=90)
            outcomes = _burst(tcp, "tcp-burst")
        assert {o.agent["agent_id"] for o in outcomes} == {"agent-a", "agent-b"}
        _store_each_once(outcomes, "tcp-burst", tmp_path)
    finally:
        procs.stop_all()


def test_a_job_error_names_no_server_path_and_no_nested_repr(cluster: Cluster) -> None:
    """Item 16: the job error showed ``AgentJobError('agent', 'RepliscopeError', '/tmp/repliscope-job-…/x.yaml…')``."""
    import dataclasses

    from repliscope.agents.submit import AgentJobError, public_message

    lines: list[str] = []
    job = dataclasses.replace(tiny_job("bad-yaml"), manifest_text="name: [\n", options={"label_rule": "none"})
    with pytest.raises(JobFailedEverywhere) as failed:
        submit_job(cluster, job, constraints_for(load_manifest(TINY), "torch"), log=lines.append)
    message = str(failed.value)
    assert message.endswith(
        ": tiny-resnet-1.0.0.yaml:2: malformed YAML: while parsing a flow node, did not find expected node content"
    ), message
    assert "/tmp/" not in message + "\n".join(lines) and "AgentJobError(" not in message
    assert repr(AgentJobError("a", "ValueError", "bad")) == "ValueError on agent a: bad"
    assert (
        public_message("/var/tmp/repliscope-job-ab_12/m.yaml:3: x; /srv/cache/onnx/m.onnx", "/srv/cache/")
        == "m.yaml:3: x; <cache>/onnx/m.onnx"
    )


def test_live_agents_do_not_depend_on_the_clients_shared_cache(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Item 16, "no live agent" while the agents were alive: ``client.scheduler_info()`` refreshes a cache shared by
    every thread and returns it; when the client's periodic refresh (which asks for no workers) or another thread
    wins the race, the caller sees no worker. Simulated deterministically: the cache holds no worker."""
    from distributed.client import SchedulerInfo

    async def refresh_without_workers(n_workers: int = 0) -> None:
        cluster.client._scheduler_identity = SchedulerInfo({"workers": {}, "type": "Scheduler", "id": "x"})

    monkeypatch.setattr(cluster.client, "_update_scheduler_info", refresh_without_workers)
    assert [a.alive for a in cluster.agents()] == [True]
    assert len(cluster.live_workers()) == 1
