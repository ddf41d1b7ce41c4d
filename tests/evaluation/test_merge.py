"""Merging a sharded evaluation into one record (``repliscope.evaluation.merge``): the 10 first foolbox images on
tiny-resnet, evaluated once whole and once as 3 shard jobs (``shard: I/3``, in this process: the merge is core,
no Dask). The merged record is the whole run's (result hash, dataset identity, samples, metrics, verdicts); shards
that are not exactly the dataset once, or ran in different stacks, refuse the merge, naming the shard and field."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from repliscope.evaluation.merge import MergeError
from repliscope.evaluation.record import EvaluationRecord
from repliscope.job_execution import JobOutcome, execute_job, merge_outcomes
from tests.test_jobs import tiny_job

N_SAMPLES = 10


def _quiet(_: Any) -> None:
    return None


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[JobOutcome, list[JobOutcome]]:
    """(the whole run, its 3 shards), batch size 4 in both (the shards' batches hold other samples)."""
    cache = tmp_path_factory.mktemp("cache")
    whole = execute_job(tiny_job("whole", limit=N_SAMPLES), cache, _quiet, _quiet)
    shards = [execute_job(tiny_job(f"s{i}", limit=N_SAMPLES, shard=f"{i}/3"), cache, _quiet, _quiet) for i in range(3)]
    return whole, shards


def _shards(runs: tuple[JobOutcome, list[JobOutcome]]) -> list[JobOutcome]:
    return [o.model_copy(deep=True) for o in runs[1]]


def _merged(outcomes: list[JobOutcome], **kw: Any) -> EvaluationRecord:
    return EvaluationRecord.model_validate(merge_outcomes(outcomes, **kw).records[0])


def test_three_shards_merge_into_the_single_machine_record(runs: tuple[JobOutcome, list[JobOutcome]]) -> None:
    whole = EvaluationRecord.model_validate(runs[0].records[0])
    shards = _shards(runs)
    merged = _merged(shards)
    assert merged.result_hash == whole.result_hash
    assert merged.dataset["identity"] == whole.dataset["identity"]
    assert [s.sample_id for s in merged.samples] == [s.sample_id for s in whole.samples]
    assert len(merged.samples) == N_SAMPLES and merged.counts == whole.counts
    assert merged.dataset["num_samples"] == N_SAMPLES
    assert (
        merged.dataset["description"] == whole.dataset["description"] == "10 images (first 10 of 100 in sorted order)"
    )
    assert merged.metrics == whole.metrics and merged.claims == whole.claims
    assert merged.dataset == whole.dataset and merged.options == whole.options  # the whole run's, not a shard's
    assert merged.run_id not in {s.records[0]["run_id"] for s in shards}
    assert merged.shards is not None
    assert [(p.shard, p.samples, p.run_id) for p in merged.shards] == [
        (f"{i}/3", n, shards[i].records[0]["run_id"]) for i, n in enumerate((4, 3, 3))
    ]
    assert [p.result_hash for p in merged.shards] == [s.records[0]["result_hash"] for s in shards]
    assert all(p.stack["key"] == "current" and p.stack_fields["runtime.framework"] == "torch" for p in merged.shards)
    assert "agent_id" not in merged.hardware and merged.hardware["agents"] == [None, None, None]
    # the shard order given does not matter
    assert _merged(list(reversed(shards))).result_hash == whole.result_hash


def test_metrics_intervals_and_verdict_are_recomputed_over_every_sample(
    runs: tuple[JobOutcome, list[JobOutcome]],
) -> None:
    """Labels chosen so shard 0/3 is 4/4 right, 1/3 0/3 and 2/3 3/3: top-1 is 7/10 (not the mean of the shards'
    1.0, 0.0, 1.0); its Wilson interval is n=10's, and the claims on the declared data are judged once, on it."""
    from repliscope.metrics.intervals import wilson_interval

    shards = _shards(runs)
    claim = (
        "claims:\n  - {metric: top1, value: 30.0, dataset: {name: foolbox, split: val}, source: test}\n"
        "  - {metric: top1, value: 99.0, dataset: {name: foolbox, split: val}, source: test}"
    )
    for i, outcome in enumerate(shards):
        record = outcome.records[0]
        record["manifest"]["text"] = record["manifest"]["text"].replace("claims: []", claim)
        record["dataset"]["evaluated_as"] = {"name": "foolbox", "split": "val"}
        for s in record["samples"]:
            s["label"] = s["topk_indices"][0] if i != 1 else (s["topk_indices"][0] + 1) % 10
    merged = _merged(shards)
    top1 = merged.metric("top1")
    assert top1 is not None and (top1.successes, top1.n, top1.value) == (7, 10, 0.7)
    assert (top1.ci_low, top1.ci_high) == pytest.approx(wilson_interval(7, 10))
    assert {k: merged.counts[k] for k in ("total", "evaluated", "failed")} == {
        "total": 10,
        "evaluated": 10,
        "failed": 0,
    }
    assert [(c.claimed, c.verdict) for c in merged.claims] == [(0.3, "inconsistent"), (0.99, "inconsistent")]
    assert all("of the measured 70.00 % (n=10)" in c.reason for c in merged.claims)


def test_a_missing_or_repeated_shard_refuses_the_merge(runs: tuple[JobOutcome, list[JobOutcome]]) -> None:
    shards = _shards(runs)
    with pytest.raises(MergeError, match=r"^shard\(s\) 1/3 missing \(got 0/3, 2/3\): a merged record holds every"):
        merge_outcomes([shards[0], shards[2]])
    with pytest.raises(MergeError, match=r"^shard 0/3 is given twice \(runs "):
        merge_outcomes([shards[0], shards[1], shards[2], shards[0]])
    with pytest.raises(MergeError, match=r"no shard information is not a shard"):
        merge_outcomes([runs[0], *shards])


def test_a_sample_in_two_shards_refuses_the_merge(runs: tuple[JobOutcome, list[JobOutcome]]) -> None:
    shards = _shards(runs)
    stolen = copy.deepcopy(shards[0].records[0]["samples"][0])
    shards[1].records[0]["samples"][0] = stolen
    with pytest.raises(MergeError) as err:
        merge_outcomes(shards)
    assert str(err.value) == (
        f"1 sample(s) are in more than one shard: {stolen['sample_id']} (shards 0/3 and 1/3); "
        "each sample is merged once"
    )


def test_a_shard_missing_a_sample_or_holding_another_refuses_the_merge(
    runs: tuple[JobOutcome, list[JobOutcome]],
) -> None:
    shards = _shards(runs)
    shards[2].records[0]["samples"].pop()
    with pytest.raises(MergeError) as err:
        merge_outcomes(shards)
    assert str(err.value) == (
        "shard 2/3 holds 2 samples, its slice 2::3 of the 10-sample dataset holds 3 (1 missing): the merged record "
        "would not hold every sample exactly once"
    )
    shards = _shards(runs)
    shards[1].records[0]["samples"][0]["sample_id"] = "not-in-the-dataset.png"
    with pytest.raises(MergeError, match=r"sample ids, interleaved, are not the ids of the dataset they were cut"):
        merge_outcomes(shards)


def test_shards_of_different_stacks_are_refused_unless_allowed(runs: tuple[JobOutcome, list[JobOutcome]]) -> None:
    shards = _shards(runs)
    shards[1].records[0]["software"]["distributions"]["torch"] = "2.12.0+cpu"
    shards[1].agent = {"agent_id": "agent-b", "hostname": "other"}
    with pytest.raises(MergeError) as err:
        merge_outcomes(shards)
    assert str(err.value).startswith(
        "the shards ran in different stacks: software.distributions.torch: '2.13.0+cpu' (shard 0/3), '2.12.0+cpu' "
        "(shard 1/3 on agent agent-b), '2.13.0+cpu' (shard 2/3). Run every shard in one stack"
    )
    assert "--allow-mixed-stacks" in str(err.value)
    merged = _merged(shards, allow_mixed_stacks=True)
    assert merged.options["mixed_stack_fields"] == ["software.distributions.torch"]
    assert merged.shards is not None
    assert [(p.agent_id, p.stack_fields["software.distributions.torch"]) for p in merged.shards] == [
        (None, "2.13.0+cpu"),
        ("agent-b", "2.12.0+cpu"),
        (None, "2.13.0+cpu"),
    ]
    assert merged.shards[1].hostname == "other"
    assert merged.hardware["agents"] == [None, "agent-b", None]
    assert merged.result_hash == runs[0].records[0]["result_hash"]


def test_shards_of_another_model_or_dataset_are_refused_even_when_stacks_may_mix(
    runs: tuple[JobOutcome, list[JobOutcome]],
) -> None:
    shards = _shards(runs)
    shards[2].records[0]["runtime"]["model_sha256"] = "0" * 64
    with pytest.raises(MergeError, match=r"^the shards ran different things.*runtime\.model_sha256: 'c4000efa"):
        merge_outcomes(shards, allow_mixed_stacks=True)
    shards = _shards(runs)
    assert shards[0].shard is not None
    shards[0].shard["of_samples"] = 11
    with pytest.raises(MergeError, match=r"^the shards were cut from different datasets \(of_samples 0/3: 11, 1/3: 10"):
        merge_outcomes(shards)
    shards = _shards(runs)
    shards[1].records[0]["dataset"]["identity"] = "f" * 64
    with pytest.raises(MergeError, match=r"^shard 1/3: its identity lines do not give its record's dataset identity"):
        merge_outcomes(shards)


def test_a_merged_record_is_stored_in_one_transaction_or_not_at_all(
    runs: tuple[JobOutcome, list[JobOutcome]], tmp_path: Path
) -> None:
    from repliscope.job_execution import run_and_store
    from repliscope.store.repository import RunStore

    store = RunStore()
    shards = _shards(runs)
    job = tiny_job("merged", limit=N_SAMPLES)
    with pytest.raises(MergeError):
        run_and_store(job, store, lambda _job: merge_outcomes(shards[:2]))
    assert store.list() == [] and store.count_job_results() == 0
    done = run_and_store(job, store, lambda _job: merge_outcomes(shards))
    [run_id] = done.stored.run_ids
    back = store.get(run_id)
    assert back.result_hash == runs[0].records[0]["result_hash"] and len(back.samples) == N_SAMPLES
    assert back.shards is not None and [p.shard for p in back.shards] == ["0/3", "1/3", "2/3"]
    assert [r.run_id for r in store.list()] == [run_id]  # the shards' own records are not stored


def test_detection_shards_merge_with_their_ground_truth(tmp_path: Path) -> None:
    """The exact rectangle detector on ``synthetic_detection`` (16 images): the 3 shards' ground truth is
    interleaved back and COCO's metrics, intervals and per-class rows are recomputed from it, as the whole run's."""
    from repliscope.job_execution import JobSpec

    manifest = Path(__file__).parents[1] / "fixtures" / "detection" / "rect-detector.yaml"

    def job(**options: Any) -> JobSpec:
        return JobSpec(
            "det",
            "evaluate",
            "rect-detector@1",
            manifest.read_text(encoding="utf-8"),
            "onnxruntime",
            "synthetic_detection",
            "synthetic_detection",
            {"manifest_path": str(manifest), "threads": 1, "batch_size": 1, **options},
        )

    whole = EvaluationRecord.model_validate(execute_job(job(), tmp_path, _quiet, _quiet).records[0])
    shards = [execute_job(job(shard=f"{i}/3"), tmp_path, _quiet, _quiet) for i in range(3)]
    merged = _merged(shards)
    assert whole.task == merged.task == "object_detection" and len(merged.samples) == 16
    assert merged.result_hash == whole.result_hash and merged.dataset == whole.dataset
    assert merged.ground_truth == whole.ground_truth
    assert merged.metrics == whole.metrics and merged.per_class == whole.per_class
    assert merged.counts == whole.counts and merged.claims == whole.claims


def test_the_report_and_the_cli_show_each_shard(runs: tuple[JobOutcome, list[JobOutcome]], tmp_path: Path) -> None:
    """Provenance lists each shard's agent, samples and result hash: the HTML and Markdown reports, and the CLI."""
    from repliscope.cli.output import console, print_record
    from repliscope.report.write import write_report

    merged = _merged(_shards(runs))
    assert merged.shards is not None
    html = write_report(merged, "html", tmp_path / "r.html").read_text()
    assert '<table id="shards-table">' in html and "One record merged from 3 shards" in html
    for shard in merged.shards:
        assert f"<td>{shard.shard}</td>" in html and shard.result_hash[:12] in html
    md = write_report(merged, "md", tmp_path / "r.md").read_text()
    assert "### Shards" in md and "| 1/3 |" in md
    with console.capture() as captured:
        print_record(merged)
    assert "shards    3 merged into this record: 0/3 on " in captured.get()


def test_the_merged_rate_is_over_the_slowest_shards_whole_work(runs: tuple[JobOutcome, list[JobOutcome]]) -> None:
    """A shard that read samples ahead while its model loaded is charged for them (its ``throughput_seconds``):
    the merged throughput is the samples over the slowest shard's charged seconds, not over its bare loop."""
    shards = _shards(runs)
    for i, (loop, charged, ahead) in enumerate(((2.0, 2.0, 0), (1.5, 4.0, 3), (3.0, 3.0, 0))):
        timings = shards[i].records[0]["timings"]
        timings.update(loop_seconds=loop, throughput_seconds=charged, read_ahead_samples=ahead)
        timings["read_ahead_cpu_seconds"] = 1.25 if ahead else 0.0
    t = _merged(shards).timings
    assert (t.loop_seconds, t.throughput_seconds, t.read_ahead_samples) == (3.0, 4.0, 3)
    assert (t.read_ahead_cpu_seconds, t.throughput_samples_per_second) == (1.25, N_SAMPLES / 4.0)
    for shard in shards:  # shards stored before the charge: the rate is over the slowest loop
        shard.records[0]["timings"].update(throughput_seconds=None, read_ahead_samples=0, read_ahead_cpu_seconds=0.0)
    old = _merged(shards).timings
    assert (old.throughput_seconds, old.throughput_samples_per_second) == (None, N_SAMPLES / 3.0)
