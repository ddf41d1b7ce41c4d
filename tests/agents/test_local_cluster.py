"""Jobs on the in-process cluster (``Cluster.connect(None)``: a TCP scheduler on 127.0.0.1 with one in-process
agent): the same result as the in-process evaluate, stored once per key, refused at once, cancelled."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

pytest.importorskip("distributed", reason="the 'agents' extra (dask, distributed) is not installed")

from repliscope.agents.capabilities import default_agent_id
from repliscope.agents.cluster import Cluster
from repliscope.agents.placement import Constraints, NoAgentMatches, constraints_for
from repliscope.agents.submit import submit_job
from repliscope.job_execution import JobCancelled, JobSpec
from repliscope.manifest.loader import load_manifest
from tests.conftest import LITE0
from tests.test_jobs import TINY, foolbox_folder, tiny_job


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with Cluster.connect(None) as c:
        yield c


def test_the_in_process_agent_is_listed_alive(cluster: Cluster) -> None:
    [agent] = cluster.agents()
    assert agent.alive and agent.capabilities.agent_id == default_agent_id()
    assert agent.address.startswith("tls://127.0.0.1:") and cluster.address.startswith("tls://127.0.0.1:")
    assert agent.executing == 0 and agent.last_seen is not None


def test_evaluate_on_the_agent_equals_the_in_process_evaluate_and_is_stored_once(cluster: Cluster) -> None:
    from repliscope.datasets import resolve_dataset
    from repliscope.evaluation.run import RunSettings, evaluate, prepare
    from repliscope.store.repository import RunStore

    progress: list[int] = []
    totals: list[int] = []
    lines: list[str] = []
    job = tiny_job("local-1", limit=20)
    outcome = submit_job(
        cluster,
        job,
        constraints_for(load_manifest(TINY), "torch"),
        on_progress=progress.append,
        log=lines.append,
        on_total=totals.append,
    )
    direct = evaluate(
        prepare(load_manifest(TINY), RunSettings(runtime="torch", threads=1, batch_size=4)),
        resolve_dataset(foolbox_folder(), "none", limit=20),
    )
    record = outcome.records[0]
    assert record["result_hash"] == direct.result_hash
    assert [s["topk_indices"] for s in record["samples"]] == [s.topk_indices for s in direct.samples]
    assert outcome.agent["agent_id"] == default_agent_id() and record["hardware"]["agent_id"] == default_agent_id()
    assert totals == [20] and sum(progress) == 20
    assert f"running on agent {default_agent_id()}" in lines
    store = RunStore()
    first = store.save_outcome(outcome, job.key)
    again = store.save_outcome(outcome, job.key)
    assert not first.duplicate and again.duplicate and again.run_ids == first.run_ids == [record["run_id"]]
    assert store.count_job_results() == 1 and len(store.list()) == 1


def test_no_matching_agent_is_refused_at_once(cluster: Cluster) -> None:
    c = Constraints(framework="torch", framework_version=">=2.1,<3", runtime="torch", hardware=("gpus>=1",))
    with pytest.raises(NoAgentMatches) as err:
        submit_job(cluster, tiny_job("local-2"), c)
    assert err.value.reasons == {default_agent_id(): ["hardware gpus>=1 not met (gpus is 0)"]}


def test_cancel_stops_the_job_on_the_agent(cluster: Cluster) -> None:
    cancel = threading.Event()
    job = JobSpec(
        "local-3",
        "evaluate",
        "efficientnet-lite0@1",
        LITE0.read_text(encoding="utf-8"),
        "torch",
        "foolbox",
        foolbox_folder(),
        {"manifest_path": str(LITE0), "label_rule": "none", "threads": 1, "batch_size": 1, "limit": 100},
    )
    done: list[int] = []

    def on_progress(n: int) -> None:
        done.append(n)
        cancel.set()

    with pytest.raises(JobCancelled):
        submit_job(cluster, job, constraints_for(load_manifest(LITE0), "torch"), on_progress=on_progress, cancel=cancel)
    assert 0 < sum(done) < 100
    assert cluster.agents()[0].executing == 0


def test_cancel_while_waiting_for_the_busy_agent_is_at_once(cluster: Cluster) -> None:
    import time

    def lite0_job(job_id: str) -> JobSpec:
        return JobSpec(
            job_id,
            "evaluate",
            "efficientnet-lite0@1",
            LITE0.read_text(encoding="utf-8"),
            "torch",
            "foolbox",
            foolbox_folder(),
            {"manifest_path": str(LITE0), "label_rule": "none", "threads": 1, "batch_size": 1, "limit": 100},
        )

    c = constraints_for(load_manifest(LITE0), "torch")
    busy_cancel, busy_started = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def run_busy() -> None:
        try:
            submit_job(
                cluster, lite0_job("busy"), c, on_progress=lambda n: busy_started.set(), cancel=busy_cancel, timeout=120
            )
        except BaseException as exc:  # the cancel is asserted below
            errors.append(exc)

    busy = threading.Thread(target=run_busy)
    busy.start()
    try:
        assert busy_started.wait(60)
        waiting = threading.Event()
        waiting.set()
        start = time.monotonic()
        with pytest.raises(JobCancelled):
            submit_job(cluster, lite0_job("waiting"), c, cancel=_set_after(waiting, 0.3), timeout=60)
        assert time.monotonic() - start < 5
    finally:
        busy_cancel.set()
        busy.join(60)
    assert len(errors) == 1 and isinstance(errors[0], JobCancelled)


def _set_after(flag: threading.Event, seconds: float) -> threading.Event:
    """A new Event that is set ``seconds`` from now (after the job was submitted)."""
    event = threading.Event()
    threading.Timer(seconds, event.set).start()
    del flag
    return event


def test_an_unreachable_scheduler_is_a_clear_error() -> None:
    from repliscope.errors import RepliscopeError
    from tests.agents.procs import free_port

    port = free_port()
    with pytest.raises(RepliscopeError, match=rf"^cannot connect to the scheduler tcp://127.0.0.1:{port}: "):
        Cluster.connect(f"tcp://127.0.0.1:{port}", timeout=1)
    with pytest.raises(RepliscopeError, match=r"^--scheduler '127.0.0.1:8786': give tcp://HOST:PORT"):
        Cluster.connect("127.0.0.1:8786")


def test_a_pitfalls_job_travels_back_and_is_stored_once(cluster: Cluster) -> None:
    from repliscope.store.repository import RunStore

    job = tiny_job("local-pitfalls", limit=4, variants=["batch_size_1"], visual=0)
    job.kind = "pitfalls"
    outcome = submit_job(cluster, job, constraints_for(load_manifest(TINY), "torch"), timeout=120)
    assert len(outcome.sweeps) == 1 and len(outcome.records) == 2  # the baseline and the variant
    assert [r["variant"] for r in outcome.records] == ["reference", "batch_size_1"]
    stored = RunStore().save_outcome(outcome, job.key, kind="pitfalls")
    assert stored.sweep_ids == [outcome.sweeps[0]["sweep_id"]] and len(stored.run_ids) == 2
    assert RunStore().get_sweep(stored.sweep_ids[0]).sweep_id == stored.sweep_ids[0]
