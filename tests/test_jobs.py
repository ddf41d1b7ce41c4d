"""The core job layer: ``execute_job`` runs the CLI's core functions and stores nothing; the service stores the
outcome exactly once per idempotency key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from repliscope.errors import RepliscopeError
from repliscope.job_execution import JobOutcome, JobSpec, execute_job, parse_shard
from tests.conftest import EXAMPLES

TINY = EXAMPLES / "tiny-resnet.yaml"


def foolbox_folder() -> str:
    """The folder of foolbox's 100 sample images (ImageNet, CIFAR, MNIST...), evaluated unlabelled here (tiny-resnet
    has 10 classes)."""
    from pathlib import Path

    from repliscope.datasets import resolve_dataset

    return str(Path(resolve_dataset("foolbox_imagenet").samples[0].location).parent)


def tiny_job(job_id: str = "job-1", **options: object) -> JobSpec:
    return JobSpec(
        job_id,
        "evaluate",
        "tiny-resnet@1.0.0",
        TINY.read_text(encoding="utf-8"),
        "torch",
        "foolbox",
        foolbox_folder(),
        {"manifest_path": str(TINY), "label_rule": "none", "threads": 1, "batch_size": 4, **options},
    )


def test_execute_job_matches_the_in_process_evaluate_and_stores_nothing() -> None:
    from repliscope.datasets import resolve_dataset
    from repliscope.evaluation.run import RunSettings, evaluate, prepare
    from repliscope.manifest.loader import load_manifest
    from repliscope.store.repository import RunStore

    progress: list[int] = []
    totals: list[int] = []
    outcome = execute_job(tiny_job(limit=6), None, progress.append, lambda line: None, totals.append)
    assert totals == [6] and sum(progress) == 6
    assert len(outcome.records) == 1 and outcome.sweeps == [] and outcome.benchmarks == []
    assert outcome.agent == {} and outcome.outputs == {} and outcome.seconds > 0
    record = outcome.records[0]
    assert record["counts"]["total"] == 6
    direct = evaluate(
        prepare(load_manifest(TINY), RunSettings(runtime="torch", threads=1, batch_size=4)),
        resolve_dataset(foolbox_folder(), "none", limit=6),
    )
    assert record["result_hash"] == direct.result_hash
    assert RunStore().count_job_results() == 0 and RunStore().list() == []
    # JSON-safe: the outcome travels as JSON text
    assert JobOutcome.model_validate_json(outcome.model_dump_json()) == outcome


def test_shard_evaluates_every_nth_sample() -> None:
    whole = execute_job(tiny_job(limit=5), None, lambda n: None, lambda line: None).records[0]
    shard = execute_job(tiny_job(limit=5, shard="1/2"), None, lambda n: None, lambda line: None).records[0]
    assert [s["sample_id"] for s in shard["samples"]] == [s["sample_id"] for s in whole["samples"]][1::2]
    assert shard["counts"]["total"] == 2
    assert "shard 1/2" in shard["dataset"]["description"]


@pytest.mark.parametrize("text", ["2/2", "1", "a/b", "-1/3", "0/0"])
def test_bad_shard_names_the_option_and_form(text: str) -> None:
    with pytest.raises(RepliscopeError, match=r"option shard must be 'I/N'"):
        parse_shard(text)


def test_unknown_kind_lists_the_kinds() -> None:
    job = tiny_job()
    job.kind = "train"
    with pytest.raises(RepliscopeError, match=r"unknown job kind .train. \(allowed: evaluate, pitfalls, bench, diff"):
        execute_job(job, None, lambda n: None, lambda line: None)


def test_job_kinds_are_one_registry_each_owning_its_options_and_core_call() -> None:
    from repliscope.job_execution import KINDS, RunOptions
    from repliscope.job_kinds import JOB_KINDS, kind_names
    from repliscope.service.executor import KINDS as SERVICE_KINDS

    assert KINDS == kind_names() == SERVICE_KINDS == ("evaluate", "pitfalls", "bench", "diff")
    owned = {name: sorted(JOB_KINDS.get(name).options.model_fields) for name in KINDS}
    assert owned == {
        "evaluate": ["keep_outputs"],
        "pitfalls": ["variants", "visual"],
        "bench": ["min_duration_s", "min_queries", "samples_per_query", "scenario"],
        "diff": ["runtime_b"],
    }
    for name in KINDS:  # every kind option is a RunOptions field with the same default: one definition of each
        kind = JOB_KINDS.get(name)
        for field, info in kind.options.model_fields.items():
            assert RunOptions.model_fields[field].default == info.default, (name, field)
        assert kind.name == name and callable(kind.core) and kind.summary
    bench = JOB_KINDS.get("bench").options_of(RunOptions(scenario="offline", min_queries=3, threads=2))
    assert (bench.scenario, bench.min_queries, bench.samples_per_query) == ("offline", 3, None)


def test_a_diff_job_without_its_second_runtime_names_the_option_and_runs_nothing(tmp_path: Path) -> None:
    job = tiny_job(limit=2)
    job.kind = "diff"
    cache = tmp_path / "cache"
    with pytest.raises(RepliscopeError, match=r"^a diff job needs options.runtime_b \(the second runtime\)$"):
        execute_job(job, cache, lambda n: None, lambda line: None)
    assert not cache.exists()  # refused before any runtime was prepared


def test_manifest_path_must_hold_the_submitted_text(tmp_path: Path) -> None:
    other = tmp_path / "m.yaml"
    other.write_text("name: other\n", encoding="utf-8")
    job = tiny_job(manifest_path=str(other))
    with pytest.raises(RepliscopeError, match="differs, where the job runs, from the manifest submitted"):
        execute_job(job, None, lambda n: None, lambda line: None)


def test_service_run_job_stores_once_per_idempotency_key() -> None:
    from repliscope.service.executor import JobSpec as ServiceJobSpec
    from repliscope.service.executor import run_job
    from repliscope.store.repository import RunStore

    assert ServiceJobSpec is JobSpec
    store = RunStore()
    job = tiny_job("job-a", limit=2)
    job.idempotency_key = "key-1"
    from repliscope.store.service_tables import create_job

    for job_id in ("job-a", "job-b"):
        created = create_job(store, "evaluate", "tiny-resnet@1.0.0", "torch", "foolbox_imagenet", {}, created_by="test")
        job.job_id = created.id
        first = run_job(job, store, None, lambda n: None, lambda line: None)
        if job_id == "job-a":
            ids = first["run_ids"]
        assert first["run_ids"] == ids
    assert store.count_job_results() == 1 and len(store.list()) == 1
    assert json.loads(json.dumps(first)) == first


def test_keep_outputs_returns_every_sample_raw_output_and_the_same_record() -> None:
    from repliscope.stacks.outputs import decode_outputs

    plain = execute_job(tiny_job(limit=3), None, lambda n: None, lambda line: None).records[0]
    kept = execute_job(tiny_job(limit=3, keep_outputs=True), None, lambda n: None, lambda line: None)
    outputs = decode_outputs(kept.outputs)
    record = kept.records[0]
    assert record["result_hash"] == plain["result_hash"]
    assert sorted(outputs) == sorted(s["sample_id"] for s in record["samples"])
    for sample in record["samples"]:
        raw = outputs[sample["sample_id"]]
        assert raw.dtype.name == "float32" and raw.shape == (10,)
        assert int(raw.argmax()) == sample["topk_indices"][0]
