"""``bench`` on a detection model: the exact rectangle detector (onnxruntime, one image at a time, three named
outputs) on synthetic_detection. Queries run ``infer_outputs`` and the manifest's detection post-processing
with each sample's geometry, exactly as the evaluation loop does."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from repliscope.bench.clock import RealClock
from repliscope.bench.qsl import QuerySampleLibrary
from repliscope.bench.run import (
    BenchOptions,
    default_offline_batch,
    measure_overhead,
    run_benchmark,
    thread_mismatch,
)
from repliscope.bench.scenarios import ScenarioSettings
from repliscope.bench.sut import NoopRunner, QueryIssuer
from repliscope.cli.main import app
from repliscope.datasets import resolve_dataset
from repliscope.datasets.base import Dataset
from repliscope.errors import RepliscopeError
from repliscope.evaluation.run import PreparedRun, RunSettings, evaluate, input_shape, prepare
from repliscope.tracing import make_tracer

MANIFEST = Path(__file__).parents[1] / "fixtures" / "detection" / "rect-detector.yaml"
POST = [
    "postprocess/detections_from_outputs",
    "postprocess/score_threshold",
    "postprocess/class_map",
    "postprocess/to_source",
]


@pytest.fixture(scope="module")
def rect(tmp_path_factory: pytest.TempPathFactory) -> tuple[PreparedRun, Dataset, QuerySampleLibrary]:
    cache = tmp_path_factory.mktemp("cache")
    prepared = prepare(MANIFEST, RunSettings(runtime="onnxruntime", threads=1, batch_size=1, cache_dir=cache))
    data = resolve_dataset("synthetic_detection")
    qsl = QuerySampleLibrary.load(prepared.pipeline, data.samples, input_shape(prepared), False, "uint8")
    return prepared, data, qsl


def _issuer(prepared: PreparedRun, qsl: QuerySampleLibrary, level: str = "model") -> QueryIssuer:
    return QueryIssuer(
        qsl, prepared.runner, prepared.pipeline, make_tracer(level, otel=False), named_outputs=True, max_batch=1
    )


def test_each_query_gives_the_evaluation_loops_detections(
    rect: tuple[PreparedRun, Dataset, QuerySampleLibrary],
) -> None:
    prepared, data, qsl = rect
    record = evaluate(prepared, data)
    issue = _issuer(prepared, qsl)
    assert len(qsl) == 16 and all(g is not None for g in qsl.geometry)
    for i, sample in enumerate(record.samples):
        before = issue.last
        issue([i])
        assert issue.pending == 1 and issue.last is before  # post-processed after the completion, not in the query
        issue.complete()
        assert issue.pending == 0 and issue.postprocessed == i + 1
        assert issue.last is not None and issue.last.detections is not None
        boxes = issue.last.detections[0]
        assert sample.detections is not None and len(boxes.boxes) == len(sample.detections)
        got = sorted(zip(boxes.boxes.tolist(), boxes.classes.tolist(), strict=True))
        want = sorted((d.box, d.class_id) for d in sample.detections)
        assert got == want
    first = issue.last  # synthetic_015: checked above against the record; sample 0 pinned as in the CLI test
    issue([0])
    issue.complete()
    assert issue.last is not None and issue.last.detections is not None and first is not issue.last
    assert sorted(issue.last.detections[0].boxes.tolist()) == [[3.0, 7.0, 26.0, 33.0], [56.0, 62.0, 75.0, 113.0]]
    spans = [s.name for s in issue.tracer.spans]
    assert spans[-6:] == ["inference", "query", *POST]  # the post-processing after the query


def test_a_multi_sample_query_runs_one_inference_per_image(
    rect: tuple[PreparedRun, Dataset, QuerySampleLibrary],
) -> None:
    prepared, _, qsl = rect
    issue = _issuer(prepared, qsl)
    issue([0, 1, 2, 3])
    assert issue.pending == 4
    issue.complete()
    names = [s.name for s in issue.tracer.spans]
    assert names.count("query") == 1 and names.count("inference") == 4 and names.count(POST[-1]) == 4


def test_timed_preprocess_keeps_each_samples_geometry(rect: tuple[PreparedRun, Dataset, QuerySampleLibrary]) -> None:
    prepared, data, qsl = rect
    timed = QuerySampleLibrary.load(prepared.pipeline, data.samples, input_shape(prepared), True, "uint8")
    tracer = make_tracer("model", otel=False)
    for i in (0, 5):
        x, geometry = timed.batch_with_geometry([i], tracer)
        np.testing.assert_array_equal(x[0], qsl.inputs[i])
        assert geometry == [qsl.geometry[i]]
    copies = timed.repeat(5, count=3)
    assert len(copies) == 3 and copies.geometry == [qsl.geometry[5]] * 3
    np.testing.assert_array_equal(copies.inputs[2], qsl.inputs[5])


def test_offline_runs_batch_one_and_measures_the_detection_post_processing(
    rect: tuple[PreparedRun, Dataset, QuerySampleLibrary],
) -> None:
    prepared, data, qsl = rect
    s = ScenarioSettings(
        scenario="offline", min_duration_s=0.0, min_queries=1, warmup_queries=2, samples_per_query=32, batch_size=1
    )
    rec = run_benchmark(prepared, data, qsl, 1, BenchOptions(scenario=s, overhead_queries=200))
    assert rec.samples == 32 and rec.queries == 1
    assert rec.settings["batch_size"] == 1 and rec.settings["inference_batch"] == 1
    assert rec.settings["outputs"] == "infer_outputs (named)"
    assert rec.software["distributions"]["onnxruntime"] == rec.runtime["framework_version"]
    # the no-op runtime replays sample 0's real outputs: the four detection ops run on them after each query's
    # completion, timed there (outside the latency)
    assert rec.overhead.postprocess_mean_us is not None and rec.overhead.postprocess_mean_us > 0.0
    assert rec.settings["latency_ends"] == "response"
    with pytest.raises(
        RepliscopeError,
        match=r"the model takes one image at a time \(inputs\[0\]\.shape \[1, -1, "
        r"-1, 3\]\): offline --batch-size 4 is not possible, use --batch-size 1",
    ):
        run_benchmark(
            prepared,
            data,
            qsl,
            1,
            BenchOptions(
                scenario=ScenarioSettings(
                    scenario="offline", min_duration_s=0.0, min_queries=1, samples_per_query=8, batch_size=4
                )
            ),
        )


def test_the_overhead_of_a_detection_model_needs_its_runner(
    rect: tuple[PreparedRun, Dataset, QuerySampleLibrary],
) -> None:
    prepared, _, _ = rect
    with pytest.raises(RepliscopeError, match="needs its runner and library"):
        measure_overhead(prepared, ScenarioSettings("single-stream", 0.0, 1), "none", 10, RealClock())


def test_noop_runner_repeats_its_canned_outputs(rect: tuple[PreparedRun, Dataset, QuerySampleLibrary]) -> None:
    prepared, _, _ = rect
    canned = {"boxes": np.arange(12, dtype=np.float32).reshape(1, 3, 4), "scores": np.ones((1, 3), np.float32)}
    noop = NoopRunner(prepared.artifact, threads=1, cache_dir=Path("."), num_classes=1, canned=canned)
    out = noop.infer_outputs(np.zeros((3, 4, 4, 3), np.uint8))
    assert list(out) == ["boxes", "scores"] and out["boxes"].shape == (3, 3, 4)
    np.testing.assert_array_equal(out["boxes"][2], canned["boxes"][0])
    out["boxes"] = np.zeros(1)  # a post-processing op replacing an entry does not change the next answer
    assert noop.infer_outputs(np.zeros((3, 4, 4, 3), np.uint8))["boxes"].shape == (3, 3, 4)


def test_default_offline_batch() -> None:
    assert default_offline_batch([1, -1, -1, 3]) == 1  # batch fixed at 1
    assert default_offline_batch([-1, -1, -1, 3]) == 1  # images of any size cannot be stacked
    assert default_offline_batch([-1, 3, 224, 224]) == 8


def test_cli_bench_offline_on_a_detection_model(tmp_path: Path) -> None:
    runner = CliRunner(env={"COLUMNS": "200", "REPLISCOPE_CACHE": str(tmp_path / "cache")})
    result = runner.invoke(
        app,
        [
            "bench",
            str(MANIFEST),
            "--runtime",
            "onnxruntime",
            "--dataset",
            "synthetic_detection",
            "--scenario",
            "offline",
            "--samples-per-query",
            "16",
            "--min-duration",
            "0",
            "--warmup-queries",
            "1",
            "--db",
            f"sqlite:///{tmp_path / 'runs.db'}",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["samples"] == 16 and summary["batch_size"] == 1


def test_a_runner_whose_thread_pools_were_fixed_earlier_makes_the_run_invalid(
    rect: tuple[PreparedRun, Dataset, QuerySampleLibrary],
) -> None:
    prepared, _, _ = rect
    noop = NoopRunner(prepared.artifact, threads=2, cache_dir=Path("."))
    assert thread_mismatch(noop, 2) is None
    noop.notes["thread_pools"] = {"intra_op": 1, "inter_op": 1, "set_now": False, "matches_requested": False}
    assert thread_mismatch(noop, 2) == (
        "noop runs 1 intra-op threads, not the 2 asked: its thread pools are process-global and were fixed earlier "
        "in this process (benchmark each thread count in a process of its own)"
    )
