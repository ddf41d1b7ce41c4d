"""What runs between a query's issue and its completion: the lean path (no spans recorded, pre-processed library)
does the query's own work only, and gives the same predictions as the spanned path."""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass

import numpy as np
import pytest

from repliscope.bench.clock import VirtualClock
from repliscope.bench.qsl import QuerySampleLibrary
from repliscope.bench.sut import QueryIssuer
from repliscope.errors import RepliscopeError
from repliscope.tracing import make_tracer
from tests.bench._fakes import Base, FakeRunner


@dataclass
class SpanFreeTracer:
    """A tracer that records nothing (rank 0) and fails if a span is entered anyway."""

    rank: int = 0

    def span(self, name: str, level: str, **attributes: object) -> AbstractContextManager[None]:
        raise AssertionError(f"span {name!r} entered on the lean path")


class ScoringRunner(FakeRunner):
    """Row i of a batch scores class (i-th input's first value * 1000) % 1000 highest: predictions follow the
    inputs, so a wrong row or order shows in the top-1."""

    def _infer(self, batch: np.ndarray) -> np.ndarray:
        super()._infer(batch)
        out = np.zeros((batch.shape[0], 1000), dtype=np.float32)
        for r, x in enumerate(batch):
            out[r, int(abs(float(x.flat[0])) * 1000) % 1000] = 5.0
        return out


def _runner(base: Base) -> ScoringRunner:
    prepared, _, _ = base
    return ScoringRunner(
        prepared.artifact, threads=1, cache_dir=prepared.runner.cache_dir, clock=VirtualClock(), latencies_s=[0.0]
    )


def test_lean_query_enters_no_span_and_skips_the_runners_own_timestamps(base: Base) -> None:
    prepared, _, qsl = base
    runner = _runner(base)
    issue = QueryIssuer(qsl, runner, prepared.pipeline, SpanFreeTracer())
    issue([3])
    assert issue.pending == 1 and issue.last is None  # the query ends at the response
    issue.complete()
    assert runner.loaded  # the first query loaded it (query_call)
    assert runner.batch_sizes == [1]
    assert runner.last_inference_seconds == 0.0  # the scenario times the query, not the runner
    assert issue.last is not None and issue.last.topk_indices is not None


@pytest.mark.parametrize("indices", [[3], [0, 5, 2], [7, 7]])
def test_lean_and_spanned_queries_give_the_same_predictions_in_order(base: Base, indices: list[int]) -> None:
    prepared, _, qsl = base
    lean = QueryIssuer(qsl, _runner(base), prepared.pipeline, make_tracer("none"))
    spanned = QueryIssuer(qsl, _runner(base), prepared.pipeline, make_tracer("model", otel=False))
    lean(indices)
    spanned(indices)
    lean.complete()
    spanned.complete()
    assert lean.last is not None and spanned.last is not None
    assert lean.last.topk_indices is not None and spanned.last.topk_indices is not None
    np.testing.assert_array_equal(lean.last.topk_indices, spanned.last.topk_indices)
    assert lean.last.topk_labels == spanned.last.topk_labels
    assert len(lean.last.topk_indices) == len(indices)  # no sample lost
    expected = [int(abs(float(qsl.inputs[i].flat[0])) * 1000) % 1000 for i in indices]
    assert lean.last.topk_indices[:, 0].tolist() == expected  # rows in the query's order
    assert [s.name for s in spanned.tracer.spans].count("inference") == 1


def test_lean_query_of_a_one_image_model_infers_sample_by_sample(base: Base) -> None:
    prepared, _, qsl = base
    runner = _runner(base)
    issue = QueryIssuer(qsl, runner, prepared.pipeline, SpanFreeTracer(), max_batch=1)
    issue([4, 1, 6])
    issue.complete()
    assert runner.batch_sizes == [1, 1, 1]
    assert issue.last is not None and issue.last.topk_indices is not None
    assert issue.last.topk_indices[0, 0] == int(abs(float(qsl.inputs[6].flat[0])) * 1000) % 1000


def test_library_row_is_the_held_input_with_a_batch_axis(base: Base) -> None:
    _, _, qsl = base
    row = qsl.row(2)
    assert row.shape == (1, *qsl.inputs[2].shape)
    assert np.shares_memory(row, qsl.inputs[2])  # a view, nothing copied per query
    assert qsl.row(2) is row  # made once
    assert qsl.row_geometry(2) == [qsl.geometry[2]]


def test_timed_library_has_no_held_rows(base: Base) -> None:
    prepared, data, _ = base
    timed = QuerySampleLibrary.load(prepared.pipeline, data.samples[:2], None, True)
    with pytest.raises(RepliscopeError, match=r"timed-preprocess library pre-processes inside each query: use batch"):
        timed.row(0)


def test_spanned_path_on_request_times_the_runner_as_before(base: Base) -> None:
    prepared, _, qsl = base
    runner = _runner(base)
    issue = QueryIssuer(qsl, runner, prepared.pipeline, make_tracer("none"), lean=False)
    issue([1])
    issue.complete()
    assert runner.last_inference_seconds > 0.0  # through Runner.infer's timing wrapper
    assert issue.last is not None and issue.last.topk_indices is not None
