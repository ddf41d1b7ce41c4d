"""A sharded evaluation on the in-process cluster (``evaluate --scheduler local --shards N``): the command stores
ONE record merged from the shards (2 here; 1 vs 3 shards: ``tests/evaluation/test_merge.py``), equal to the
in-process run's, and ends with its id; a run whose shards cannot be merged stores nothing. (Two agent processes,
a shard re-run elsewhere: ``test_processes.py``.) The CLI test starts a real in-process cluster (TLS certificates,
a scheduler, an agent): a few seconds."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

pytest.importorskip("distributed", reason="the 'agents' extra (dask, distributed) is not installed")

from repliscope.agents.cluster import Cluster
from repliscope.agents.placement import constraints_for
from repliscope.cli.main import app
from repliscope.errors import RepliscopeError
from repliscope.job_execution import JobCancelled, JobOutcome, execute_job
from repliscope.manifest.loader import load_manifest
from tests.test_jobs import TINY, foolbox_folder, tiny_job

CONSTRAINTS = constraints_for(load_manifest(TINY), "torch")

ARGS = [
    "evaluate",
    str(TINY),
    "--dataset",
    foolbox_folder(),
    "--label-rule",
    "none",
    "--limit",
    "7",
    "--threads",
    "1",
    "--batch-size",
    "4",
    "--scheduler",
    "local",
]


def test_a_sharded_evaluate_stores_one_record_equal_to_the_single_run_and_ends_with_its_id() -> None:
    from repliscope.store.repository import RunStore

    whole = execute_job(tiny_job(limit=7), None, lambda n: None, lambda line: None).records[0]
    res = CliRunner().invoke(app, [*ARGS, "--shards", "2", "--idempotency-key", "sharded-1"])
    assert res.exit_code == 0, res.output
    [stored] = RunStore().list()
    said = " ".join(res.stdout.split())
    assert re.search(r"ran 2 shards \(0/2 on \S+, 1/2 on \S+\) in [0-9.]+ s, idempotency key sharded-1;", said)
    assert said.endswith(f"merged into one record, stored as run {stored.run_id}"), said[-200:]
    record = RunStore().get(stored.run_id)
    assert record.result_hash == whole["result_hash"] and record.dataset["identity"] == whole["dataset"]["identity"]
    assert [s.sample_id for s in record.samples] == [s["sample_id"] for s in whole["samples"]]
    assert record.shards is not None and [(p.shard, p.samples) for p in record.shards] == [("0/2", 4), ("1/2", 3)]
    assert len({p.agent_id for p in record.shards}) == 1 and record.shards[0].agent_id is not None
    assert record.hardware["agents"] == [p.agent_id for p in record.shards]
    assert "[shard 1/2] running on agent " in res.stderr and "merged 2 shard(s) (0/2 on " in res.stderr
    # the same key again runs nothing and stores nothing
    again = CliRunner().invoke(app, [*ARGS, "--shards", "2", "--idempotency-key", "sharded-1", "--json"])
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["run_id"] == stored.run_id and len(RunStore().list()) == 1


def test_shards_without_a_scheduler_are_refused_naming_the_flag() -> None:
    res = CliRunner().invoke(app, [*ARGS[:-2], "--shards", "2"])
    assert res.exit_code == 2
    assert res.stderr.strip() == (
        "error: --shards and --allow-mixed-stacks run shard jobs on agents: add --scheduler tcp://HOST:PORT"
    )


def test_only_an_evaluate_job_is_merged_and_a_shard_is_not_sharded_again() -> None:
    from repliscope.agents.submit import shard_jobs, submit_merged

    job = tiny_job("p", limit=4)
    job.kind = "pitfalls"
    with pytest.raises(RepliscopeError, match=r"^only an evaluate job can be sharded and merged into one record"):
        submit_merged(None, job, None, 2)  # type: ignore[arg-type]  # refused before any cluster is used
    with pytest.raises(RepliscopeError, match=r"^job s is a shard already \(option shard 0/2\)"):
        shard_jobs(tiny_job("s", shard="0/2"), 2)
    assert [j.run_options.shard for j in shard_jobs(tiny_job("t"), 3)] == ["0/3", "1/3", "2/3"]
    assert [j.job_id for j in shard_jobs(tiny_job("t"), 2)] == ["t-s0", "t-s1"]


def test_a_shard_failing_on_every_agent_stores_nothing() -> None:
    from repliscope.store.repository import RunStore

    args = [*ARGS, "--shards", "2"]
    args[args.index("--dataset") + 1] = "/nonexistent/repliscope-images"
    res = CliRunner().invoke(app, args)
    assert res.exit_code != 0
    said = " ".join(res.stderr.split())  # the first shard to fail (the other is cancelled then)
    assert re.search(r"error: job \w+-s[01] failed on every agent it could run on \(1\): \S+: dataset ", said), said
    assert RunStore().list() == [] and RunStore().count_job_results() == 0


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with Cluster.connect(None) as c:
        yield c


def test_a_cancelled_sharded_run_cancels_every_shard_and_returns_nothing(cluster: Cluster) -> None:
    import threading

    from repliscope.agents.submit import submit_merged

    cancel = threading.Event()
    cancel.set()
    lines: list[str] = []
    with pytest.raises(JobCancelled) as err:
        submit_merged(cluster, tiny_job("c", limit=4), CONSTRAINTS, 2, cancel=cancel, log=lines.append)
    assert str(err.value) == "c" and not any("merged" in line for line in lines)


def test_a_job_with_option_shards_is_run_as_shards_and_merged_as_the_service_submits_it(cluster: Cluster) -> None:
    """The service's executors call ``submit_job`` with the API's options: ``shards: 2`` makes it one merged
    record; in-process (no agents) the option is refused, naming it."""
    from repliscope.agents.submit import submit_job
    from repliscope.service.routers.jobs import JobOptions

    options = JobOptions(limit=5, threads=1, batch_size=4, shards=2).run_options()
    assert (options.shards, options.allow_mixed_stacks) == (2, False)
    with pytest.raises(ValueError, match=r"shards\n  Input should be greater than or equal to 1"):
        JobOptions(shards=0)
    progress: list[int] = []
    totals: list[int] = []
    outcome = submit_job(
        cluster, tiny_job("opt", limit=5, shards=2), CONSTRAINTS, on_progress=progress.append, on_total=totals.append
    )
    [record] = outcome.records
    whole = execute_job(tiny_job(limit=5), None, lambda n: None, lambda line: None).records[0]
    assert record["result_hash"] == whole["result_hash"] and [p["shard"] for p in record["shards"]] == ["0/2", "1/2"]
    assert totals == [5] and sum(progress) == 5
    with pytest.raises(RepliscopeError, match=r"^option shards \(2\) runs the job as shard jobs on agents: submit"):
        execute_job(tiny_job(limit=5, shards=2), None, lambda n: None, lambda line: None)


def test_each_shard_is_handed_over_as_it_arrives_and_a_refusal_there_fails_the_run(cluster: Cluster) -> None:
    """``submit_merged`` validates each shard's record in that shard's thread, as it arrives (while the others
    run): ``on_outcome`` gets every shard once, in its own thread; what it raises is the run's error."""
    import threading

    from repliscope.agents.submit import submit_sharded
    from repliscope.evaluation.merge import MergeError

    seen: list[tuple[int, int, bool]] = []

    def take(index: int, outcome: JobOutcome) -> None:
        seen.append(
            (index, len(outcome.records[0]["samples"]), threading.current_thread().name.startswith("repliscope-shard"))
        )

    outcomes = submit_sharded(cluster, tiny_job("h", limit=5), CONSTRAINTS, 2, on_outcome=take)
    assert sorted(seen) == [(0, 3, True), (1, 2, True)] and [o.shard["index"] for o in outcomes if o.shard] == [0, 1]

    def refuse(index: int, outcome: JobOutcome) -> None:
        if index == 1:
            raise MergeError("shard 1/2: refused by the test")

    with pytest.raises(MergeError, match=r"^shard 1/2: refused by the test$"):
        submit_sharded(cluster, tiny_job("r", limit=5), CONSTRAINTS, 2, on_outcome=refuse)


def test_a_sampling_declared_for_the_whole_run_is_the_merged_records(tmp_path: Path) -> None:
    """``--as NAME/SPLIT@random`` on a sharded run: each shard alone is a selection (it runs declared as
    NAME/SPLIT, the declaration aside as option whole_sampling), the merged record is the declared random sample,
    as the whole run's record says; a declaration that is not allowed is refused before any shard is made."""
    import shutil

    from repliscope.agents.submit import shard_jobs
    from repliscope.job_execution import merge_outcomes

    folder = tmp_path / "images"
    folder.mkdir()
    for name in sorted(p.name for p in Path(foolbox_folder()).iterdir() if p.suffix == ".png")[:5]:
        shutil.copy(Path(foolbox_folder()) / name, folder / name)
    job = tiny_job("declared", evaluated_as="foolbox/val@random")
    job.dataset_spec = str(folder)
    parts = shard_jobs(job, 2)
    assert [(p.run_options.evaluated_as, p.run_options.whole_sampling) for p in parts] == [
        ("foolbox/val", "random"),
        ("foolbox/val", "random"),
    ]
    quiet = lambda _: None  # noqa: E731
    whole = execute_job(job, None, quiet, quiet).records[0]
    merged = merge_outcomes([execute_job(p, None, quiet, quiet) for p in parts]).records[0]
    assert merged["dataset"]["sampling"] == whole["dataset"]["sampling"]
    assert merged["dataset"]["sampling"]["kind"] == "random sample" and merged["result_hash"] == whole["result_hash"]
    with pytest.raises(RepliscopeError, match=r"'all' is not allowed \(allowed: whole, random, selection\)"):
        shard_jobs(tiny_job("bad", evaluated_as="foolbox/val@all"), 2)
    with pytest.raises(RepliscopeError, match=r"'whole' contradicts the first 3 samples in sorted order \(--limit 3\)"):
        shard_jobs(tiny_job("bad", evaluated_as="foolbox/val@whole", limit=3), 2)


def test_ctrl_c_in_the_submitter_stops_every_shard_before_it_returns(monkeypatch: pytest.MonkeyPatch) -> None:
    """KeyboardInterrupt while the submitter waits for its shards: every shard's job gets its cancel (here each
    shard is a stand-in for ``submit_job`` that waits for it) before the interrupt goes on."""
    import concurrent.futures
    import threading

    from repliscope.agents import submit

    real_wait = concurrent.futures.wait
    calls: list[int] = []

    def interrupted_wait(*args: object, **kwargs: object) -> object:
        calls.append(1)
        if len(calls) == 1:
            raise KeyboardInterrupt
        return real_wait(*args, **kwargs)  # type: ignore[arg-type]

    cancelled: list[bool] = []

    def shard_job(_c: object, part: object, _constraints: object, *, cancel: threading.Event, **_: object) -> None:
        cancelled.append(cancel.wait(10))  # the real one stops its agent's job at its next progress callback
        raise JobCancelled(getattr(part, "job_id", ""))

    monkeypatch.setattr(concurrent.futures, "wait", interrupted_wait)
    monkeypatch.setattr(submit, "submit_job", shard_job)
    with pytest.raises(KeyboardInterrupt):
        submit.submit_sharded(None, tiny_job("ctrl-c", limit=4), CONSTRAINTS, 2)  # type: ignore[arg-type]
    assert cancelled == [True, True]
