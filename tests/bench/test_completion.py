"""A query's latency ends at its response (LoadGen's ``QuerySamplesComplete``): the manifest's post-processing runs
after the scenario stamped the completion (``QueryIssuer.complete``), and gives the predictions it gave inside the
query, sample for sample."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from repliscope.bench import sut
from repliscope.bench.clock import VirtualClock
from repliscope.bench.scenarios import ScenarioSettings, run_scenario
from repliscope.bench.sut import QueryIssuer
from repliscope.evaluation.run import evaluate
from repliscope.runtimes.base import ModelArtifact, Runner
from repliscope.tracing import make_tracer
from tests.bench._fakes import UNIT, Base, FakeIssue


class RecordingIssuer(QueryIssuer):
    """A :class:`QueryIssuer` that remembers the library positions of every query, in issue order."""

    def __init__(self, *args: object, **kw: object) -> None:
        super().__init__(*args, **kw)  # type: ignore[arg-type]
        self.issued: list[int] = []

    def __call__(self, indices: Sequence[int]) -> None:
        self.issued += list(indices)
        super().__call__(indices)


class SlowCompletion(FakeIssue):
    """A fake query of ``latencies_s``, and a completion (post-processing) of 1000 units on the same clock."""

    def __init__(self, clock: VirtualClock, latencies_s: Sequence[float]) -> None:
        super().__init__(clock, latencies_s)
        self.completed_after: list[int] = []
        self.done = 0

    def complete(self, limit: int | None = None) -> int:
        count = len(self.calls) - self.done if limit is None else min(limit, len(self.calls) - self.done)
        if count:
            self.completed_after.append(len(self.calls))
            self.clock.advance(1000 * UNIT)
            self.done += count
        return count


class BufferReusingRunner(Runner):
    """Writes every inference's scores into ONE buffer it returns each time (as some runtimes reuse their output
    memory): class (first input value * 1000) % 1000 scores 5."""

    name = "reusing"

    def __init__(self, artifact: ModelArtifact, *, threads: int, cache_dir: Path) -> None:
        super().__init__(artifact, threads=threads, cache_dir=cache_dir)
        self.buffer = np.zeros((1, 1000), dtype=np.float32)

    def framework(self) -> tuple[str, str]:
        return "reusing", "1"

    def _load(self) -> None:
        return None

    def _infer(self, batch: np.ndarray) -> np.ndarray:
        self.buffer[:] = 0.0
        self.buffer[0, int(abs(float(batch[0].flat[0])) * 1000) % 1000] = 5.0
        return self.buffer


def _top1(x: np.ndarray) -> int:
    return int(abs(float(x.flat[0])) * 1000) % 1000


def test_single_stream_predictions_are_the_evaluation_records(base: Base) -> None:
    """The real Lite0 on ONNX Runtime over the 20 foolbox images (about 1 s: one evaluation, 22 queries and one
    inference per distinct sample; the real model's outputs are what the post-processing must not change):
    every query's post-processed top-k is the evaluation record's for that sample, and bit for bit what the
    post-processing inside the query gave before."""
    prepared, data, qsl = base
    record = {s.sample_id: s for s in evaluate(prepared, data).samples}
    issue = RecordingIssuer(qsl, prepared.runner, prepared.pipeline, make_tracer("none"), keep=True)
    s = ScenarioSettings("single-stream", min_duration_s=0.0, min_queries=20, warmup_queries=2)
    run = run_scenario(issue, len(qsl), s, VirtualClock())
    assert run.queries == 20 and issue.pending == 0 and issue.postprocessed == 22
    measured = list(zip(issue.issued, issue.predictions, strict=True))[2:]  # after the warm-up
    assert len({i for i, _ in measured}) > 8  # the seeded picks cover much of the library
    inside = {i: prepared.pipeline.postprocess(prepared.runner.infer(qsl.row(i)), None) for i, _ in measured}
    for i, preds in measured:
        assert preds.topk_indices is not None and preds.topk_scores is not None
        want = record[qsl.ids[i]]
        assert preds.topk_indices[0].tolist() == want.topk_indices
        assert preds.topk_scores[0].tolist() == pytest.approx(want.topk_probs, abs=1e-6)
        before = inside[i]  # post-processed inside the query, as before
        np.testing.assert_array_equal(preds.topk_indices, before.topk_indices)
        np.testing.assert_array_equal(preds.topk_scores, before.topk_scores)
        assert preds.topk_labels == before.topk_labels


@pytest.mark.parametrize(
    ("scenario", "extra"),
    [("single-stream", {}), ("multi-stream", {"samples_per_query": 4}), ("offline", {"samples_per_query": 12})],
)
def test_the_completion_work_is_in_no_latency(scenario: str, extra: dict[str, int]) -> None:
    clock = VirtualClock()
    issue = SlowCompletion(clock, [3 * UNIT])
    s = ScenarioSettings(scenario, min_duration_s=0.0, min_queries=12, warmup_queries=2, **extra)
    run = run_scenario(issue, 20, s, clock)
    if scenario == "offline":  # 12 batches of 1, completed once, after the query
        assert issue.completed_after == [1, 2, 14]
        assert run.latencies_s.tolist() == [3 * k * UNIT for k in range(1, 13)]
        return
    assert issue.completed_after == list(range(1, 15))  # each query, warm-up included, after its completion
    assert run.latencies_s.tolist() == [3 * UNIT] * 12  # 1000-unit completions in none
    assert run.duration_s == (12 * 3 + 11 * 1000) * UNIT  # but in the issue cycle (the next query waits)


def test_server_completes_every_response() -> None:
    clock = VirtualClock()
    issue = SlowCompletion(clock, [UNIT])
    s = ScenarioSettings("server", min_duration_s=0.0, min_queries=30, warmup_queries=0, target_qps=10.0)
    run = run_scenario(issue, 20, s, clock)
    assert run.queries == len(issue.calls) >= 30
    assert issue.done == run.queries and issue.completed_after[-1] == run.queries  # every response completed


def test_server_post_processes_one_response_at_a_time_while_no_query_waits(base: Base) -> None:
    prepared, _, qsl = base
    runner = BufferReusingRunner(prepared.artifact, threads=1, cache_dir=prepared.runner.cache_dir)
    issue = QueryIssuer(qsl, runner, prepared.pipeline, make_tracer("none"), keep=True)
    for i in range(3):
        issue([i])
    assert issue.complete(1) == 1 and issue.pending == 2 and issue.postprocessed == 1
    assert issue.last is not None and issue.last.topk_indices is not None
    assert int(issue.last.topk_indices[0, 0]) == _top1(qsl.inputs[0])  # the oldest first
    assert issue.complete() == 2 and issue.complete() == 0 and issue.pending == 0
    got = [int(p.topk_indices[0, 0]) for p in issue.predictions if p.topk_indices is not None]
    assert got == [_top1(qsl.inputs[i]) for i in range(3)]


def test_a_runtime_reusing_its_output_buffer_gives_each_sample_its_own_prediction(base: Base) -> None:
    """Offline holds its responses until the query completed: each is a copy, not the runtime's buffer."""
    prepared, _, qsl = base
    runner = BufferReusingRunner(prepared.artifact, threads=1, cache_dir=prepared.runner.cache_dir)
    issue = RecordingIssuer(qsl, runner, prepared.pipeline, make_tracer("none"), keep=True)
    s = ScenarioSettings("offline", min_duration_s=0.0, min_queries=1, warmup_queries=0, samples_per_query=16)
    run_scenario(issue, len(qsl), s, VirtualClock())
    got = [int(p.topk_indices[0, 0]) for p in issue.predictions if p.topk_indices is not None]
    assert got == [_top1(qsl.inputs[i]) for i in issue.issued] and len(set(got)) > 1


def test_responses_over_the_hold_are_post_processed_in_the_next_query(
    base: Base, monkeypatch: pytest.MonkeyPatch
) -> None:
    prepared, _, qsl = base
    runner = BufferReusingRunner(prepared.artifact, threads=1, cache_dir=prepared.runner.cache_dir)
    monkeypatch.setattr(sut, "RESPONSE_HOLD_BYTES", 2 * 4000)  # two (1, 1000) float32 responses
    issue = QueryIssuer(qsl, runner, prepared.pipeline, make_tracer("none"))
    for i in range(3):
        issue([i])
    assert issue.pending == 3 and issue.postprocessed == 0
    issue([3])  # 12,000 bytes held > 8,000: post-processed first
    assert issue.pending == 1 and issue.postprocessed == 3
    assert issue.last is not None and issue.last.topk_indices is not None
    assert int(issue.last.topk_indices[0, 0]) == _top1(qsl.inputs[2])


def test_the_compare_page_tells_a_benchmark_that_timed_its_post_processing() -> None:
    """A benchmark stored before the latency ended at the response (no ``latency_ends``) timed the post-processing:
    its timing condition says so, so comparing it with a newer one reads ``not comparable``."""
    from repliscope.service.web.compare_perf import bench_timing_text

    assert bench_timing_text({"latency_ends": "response", "timed_preprocess": False}) == "infer only"
    assert bench_timing_text({"latency_ends": "response", "timed_preprocess": True}) == "pre-process + infer"
    assert bench_timing_text({"timed_preprocess": False}) == "infer + post-process"
    assert bench_timing_text({"timed_preprocess": True}) == "pre-process + infer + post-process"
