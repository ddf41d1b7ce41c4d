"""run_benchmark (via ``run_fake``) on the real Lite0 manifest and foolbox images with a fake runtime on a
virtual clock: exact record values, early stopping, validity, claim verdicts, spans, store round trip."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from repliscope.bench.clock import RealClock, VirtualClock
from repliscope.bench.matrix import ratio_rows
from repliscope.bench.qsl import QuerySampleLibrary
from repliscope.bench.run import BenchOptions, make_tracer, measured_performance, run_benchmark
from repliscope.bench.scenarios import ScenarioSettings, poisson_schedule, run_scenario
from repliscope.bench.stats import early_stopping_estimate
from repliscope.evaluation.claims import judge_performance_claim
from repliscope.evaluation.provenance import cpu_model
from repliscope.evaluation.run import input_shape
from repliscope.manifest.schema import ClaimSpec
from repliscope.store.repository import RunStore, sqlite_url
from tests.bench._fakes import UNIT, Base, FakeRunner, run_fake


def test_single_stream_record_is_exact(base: Base) -> None:
    s = ScenarioSettings("single-stream", min_duration_s=0.0, min_queries=100, warmup_queries=3)
    rec, fake = run_fake(base, s)
    assert len(fake.batch_sizes) == 103 and set(fake.batch_sizes) == {1}
    assert rec.queries == 100 and rec.samples == 100
    ms = UNIT * 1e3
    assert rec.latency.percentiles["p50"].value == pytest.approx(6 * ms, rel=1e-6)  # float32 microseconds
    assert rec.latency.percentiles["p90"].value == pytest.approx(10 * ms, rel=1e-6)
    assert rec.latency.mean == pytest.approx(5.5 * ms, rel=1e-6)
    assert rec.duration_seconds == pytest.approx(550 * UNIT)
    assert rec.throughput_samples_per_second == pytest.approx(100 / (550 * UNIT))
    est = early_stopping_estimate(rec.latencies_ms(), 0.9)
    assert rec.early_stopping is not None and rec.early_stopping.estimate_ms == est.estimate
    assert rec.valid and rec.invalid_reasons == []
    assert rec.dataset["query_samples"] == 20 and rec.dataset["num_samples"] == 20
    assert rec.settings["threads"] == 1 and rec.settings["clock"] == "VirtualClock"
    assert rec.settings["latency_ends"] == "response"  # the post-processing runs after the completion
    assert rec.hardware["cpu_model"] == cpu_model() and "cpu_governor" in rec.hardware
    assert rec.runtime["runtime"] == "fake" and rec.runtime["model_sha256"] == base[0].artifact.sha256
    assert rec.overhead.queries == 100  # the no-op runner does not advance the virtual clock
    assert rec.summary()["latency_ms"]["p90"] == rec.latency.percentiles["p90"].value


def test_claim_verdicts(base: Base) -> None:
    s = ScenarioSettings("single-stream", min_duration_s=0.0, min_queries=200, warmup_queries=0)
    rec, _ = run_fake(base, s)
    verdicts = [(c.metric, c.verdict) for c in rec.claims]
    assert verdicts == [
        ("latency_p90_ms", "consistent"),
        ("latency_p90_ms", "inconsistent"),
        ("throughput", "not comparable"),
        ("latency_p99_ms", "not comparable"),
    ]
    assert "CPU 'Some Other CPU'" in rec.claims[2].reason and "2 threads vs 1" in rec.claims[2].reason
    assert "scenario server vs single-stream" in rec.claims[3].reason
    assert rec.claims[1].ci_low is not None and rec.claims[1].ci_low > 1.0


def test_too_few_queries_is_not_valid(base: Base) -> None:
    s = ScenarioSettings("multi-stream", min_duration_s=0.0, min_queries=50, warmup_queries=0, samples_per_query=4)
    rec, fake = run_fake(base, s)
    assert set(fake.batch_sizes) == {4} and rec.samples == 200
    assert not rec.valid and rec.invalid_reasons == ["early stopping needs at least 662 queries for the p99 estimate"]


def test_model_level_spans_nest(base: Base) -> None:
    tracer = make_tracer("model")
    s = ScenarioSettings("single-stream", min_duration_s=0.0, min_queries=20, warmup_queries=2)
    run_fake(base, s, tracer=tracer)
    events = [e for e in tracer.chrome_trace()["traceEvents"] if e.get("ph") == "X"]
    names = [e["name"] for e in events]
    assert names.count("run") == 1 and names.count("query") == 22 and names.count("inference") == 22
    warmup = [e for e in events if e["name"] == "warmup"]
    assert len(warmup) == 1 and warmup[0]["args"] == {"queries": 2}
    inside = [
        e
        for e in events
        if e["name"] == "query"
        and warmup[0]["ts"] <= e["ts"]
        and e["ts"] + e["dur"] <= warmup[0]["ts"] + warmup[0]["dur"]
    ]
    first_two = sorted((e for e in events if e["name"] == "query"), key=lambda e: e["ts"])[:2]
    assert inside == first_two
    assert names.count("postprocess/softmax") == 22 and names.count("postprocess/topk") == 22
    queries = [e for e in events if e["name"] == "query"]
    for e in events:
        if e["name"] == "inference":
            assert any(q["ts"] <= e["ts"] and e["ts"] + e["dur"] <= q["ts"] + q["dur"] + 1e-3 for q in queries)


def test_store_round_trip_and_ratios(base: Base, tmp_path: Path) -> None:
    s = ScenarioSettings("single-stream", min_duration_s=0.0, min_queries=64, warmup_queries=0)
    fast, _ = run_fake(base, s, latencies=[UNIT])
    slow, _ = run_fake(base, s, latencies=[3 * UNIT])
    fast.matrix_id = slow.matrix_id = "m1"
    with RunStore(sqlite_url(tmp_path / "b.db")) as store:
        store.save_benchmark(fast)
        store.save_benchmark(slow)
        again = store.get_benchmark(fast.benchmark_id[:8])
        assert again == fast
        assert {r.benchmark_id for r in store.list_benchmarks(matrix_id="m1")} == {fast.benchmark_id, slow.benchmark_id}
    rows = ratio_rows([slow, fast])
    assert [r["ratio_to_fastest"] for r in rows] == pytest.approx([3.0, 1.0])
    assert np.asarray(fast.latencies_us, dtype=np.float32).astype(float).tolist() == fast.latencies_us


def test_timed_preprocess_runs_the_pipeline_inside_each_query(base: Base) -> None:
    prepared, full, _ = base
    data = replace(full, samples=full.samples[:4])
    timed = QuerySampleLibrary.load(prepared.pipeline, data.samples, input_shape(prepared), True)
    assert len(timed.encoded) == 4 and timed.inputs == []
    x = timed.batch([0, 3], make_tracer("none"))
    assert x.shape == (2, 3, 224, 224) and x.dtype == np.float32
    tracer = make_tracer("model")
    s = ScenarioSettings("single-stream", min_duration_s=0.0, min_queries=5, warmup_queries=0)
    rec, _ = run_fake((prepared, data, timed), s, tracer=tracer)
    names = [e["name"] for e in tracer.chrome_trace()["traceEvents"] if e.get("ph") == "X"]
    for op in prepared.pipeline.pre_ops:
        assert names.count(f"preprocess/{op.name}") == 5
    assert rec.queries == 5 and rec.dataset["query_samples"] == 4


def test_find_peak_qps_on_the_virtual_clock(base: Base) -> None:
    """Service 8 units (~7.8 ms): one worker saturates at 128 QPS; with a 40 ms p99 bound the peak lies below."""
    s = ScenarioSettings(
        "server", min_duration_s=0.0, min_queries=700, warmup_queries=0, target_qps=1.0, latency_bound_ms=40.0
    )
    prepared, data, qsl = base
    clock = VirtualClock()
    fake = FakeRunner(
        prepared.artifact, threads=1, cache_dir=prepared.runner.cache_dir, clock=clock, latencies_s=[8 * UNIT]
    )
    rec = run_benchmark(
        replace(prepared, runner=fake),
        data,
        qsl,
        1,
        BenchOptions(scenario=s, find_peak_qps=True, overhead_queries=10),
        clock=clock,
    )
    assert rec.peak is not None and rec.peak.peak_qps is not None
    tried = {p.qps: p for p in rec.peak.tried}
    assert tried[rec.peak.peak_qps].meets_bound and tried[rec.peak.peak_qps].p99_ms <= 40.0
    assert min(tried) == pytest.approx(128 / 16) and max(tried) == pytest.approx(128.0)
    assert not any(p.meets_bound for q, p in tried.items() if q > rec.peak.peak_qps)
    assert rec.settings["target_qps"] == rec.peak.peak_qps and rec.latency.percentiles["p99"].value <= 40.0
    assert 64 < rec.peak.peak_qps < 128 and len(rec.peak.tried) == 2 + 6


def test_server_on_the_real_clock() -> None:
    """The dispatcher thread in real time: every scheduled query is served, none before its arrival."""
    clock = RealClock()

    def issue(indices: Sequence[int]) -> None:
        time.sleep(0.001)

    s = ScenarioSettings("server", min_duration_s=0.3, min_queries=10, warmup_queries=0, target_qps=200.0)
    run = run_scenario(issue, 20, s, clock)
    assert run.queries == len(poisson_schedule(200.0, 10, 0.3, 0))
    assert run.latencies_s.min() >= 0.001 and np.median(run.latencies_s) < 0.05


def test_a_server_throughput_claim_is_not_comparable_rather_than_run_longer(base: Base) -> None:
    s = ScenarioSettings(
        "server", min_duration_s=0.0, min_queries=200, warmup_queries=0, target_qps=1.0, latency_bound_ms=1e6
    )
    rec, _ = run_fake(base, s)
    measured = measured_performance(rec)
    assert sorted(measured.values) == ["latency_p90_ms", "latency_p99_ms"]
    claim = ClaimSpec.model_validate(
        {
            "metric": "throughput",
            "value": 1.0,
            "source": "test",
            "scenario": "server",
            "dataset": {"name": "imagenet-1k", "split": "val"},
            "batch_size": 1,
            "hardware": {"cpu_model": measured.cpu_model, "threads": 1},
            "runtime": measured.runtime,
        }
    )
    verdict = judge_performance_claim(claim, measured)
    assert verdict.verdict == "not comparable"
    assert verdict.reason == "the server benchmark does not measure throughput"
