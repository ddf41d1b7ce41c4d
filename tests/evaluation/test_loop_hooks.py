"""The one batch loop (``drive`` with ``LoopHooks``) and the one per-batch step (``BatchInference.predict``) that the
evaluation, the pitfall sweep and the benchmark share; the one record builder (``record_builder``)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from repliscope.datasets import resolve_dataset
from repliscope.datasets.base import Sample
from repliscope.errors import SampleError
from repliscope.evaluation.engine import (
    SCHEDULES,
    BatchInference,
    LoopHooks,
    PreparedItem,
    drive,
    fail_fast_hook,
)
from repliscope.evaluation.record_builder import build_record, manifest_info, provenance
from repliscope.evaluation.run import PreparedRun, RunSettings, evaluate, prepare
from tests.conftest import LITE0
from tests.evaluation.test_engine_reading import FakeRunner


class ScoreRunner(FakeRunner):
    """Class ``int(mean * 1e6) % 1000`` wins; counts its inference calls."""

    calls = 0

    def _infer(self, batch: np.ndarray) -> np.ndarray:
        type(self).calls += 1
        scores = np.tile(np.linspace(0, 1, 1000, dtype=np.float32), (batch.shape[0], 1))
        for i, x in enumerate(batch):
            scores[i, int(abs(float(x.mean())) * 1e6) % 1000] = 5.0
        return scores


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> PreparedRun:
    prepared = prepare(LITE0, RunSettings(runtime="torch", threads=1, batch_size=3))  # nothing loaded
    return replace(
        prepared, runner=ScoreRunner(prepared.artifact, threads=1, cache_dir=tmp_path_factory.mktemp("fake"))
    )


def _samples(n: int) -> list[Sample]:
    return [Sample(id=f"s{i}", label=i, read=lambda: b"", location=f"/nowhere/{i}.jpg") for i in range(n)]


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_drive_prepares_each_sample_once_and_collects_every_batch_in_order(schedule: str) -> None:
    samples = _samples(11)
    batches = [samples[i : i + 3] for i in range(0, 11, 3)]
    prepared: list[str] = []
    lock = threading.Lock()
    collected: list[tuple[int, list[str], str]] = []

    def prep(sample: Sample) -> str:
        with lock:
            prepared.append(sample.id)
        return sample.id.upper()

    def infer(worker: str, index: int, batch: Sequence[Sample], items: list[str]) -> str:
        return f"{worker}:{index}"

    def collect(index: int, batch: Sequence[Sample], items: list[str], outcome: str) -> None:
        collected.append((index, items, outcome.split(":")[1]))

    progress: list[int] = []
    drive(
        batches,
        LoopHooks(prep, infer, collect),
        ["w0", "w1"],
        schedule=schedule,  # type: ignore[arg-type]
        prep_threads=2,
        prefetch=1,
        on_progress=progress.append,
    )
    assert sorted(prepared) == sorted(s.id for s in samples) and len(prepared) == 11
    assert [(i, items, int(o)) for i, items, o in collected] == [
        (i, [s.id.upper() for s in b], i) for i, b in enumerate(batches)
    ]
    assert progress == [3, 3, 3, 2]


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_an_error_in_a_batch_stops_the_loop_and_the_batches_after_it_are_not_collected(schedule: str) -> None:
    batches = [[s] for s in _samples(40)]
    collected: list[int] = []

    def infer(worker: int, index: int, batch: Sequence[Sample], items: list[str]) -> int:
        if index == 2:
            raise SampleError(f"batch {index} is broken")
        return index

    with pytest.raises(SampleError, match="batch 2 is broken"):
        drive(
            batches,
            LoopHooks(lambda s: s.id, infer, lambda i, b, items, o: collected.append(o)),
            [0, 1],
            schedule=schedule,  # type: ignore[arg-type]
            prep_threads=1,
            prefetch=1,
        )
    assert collected == [0, 1]


def test_predict_records_a_bad_sample_with_its_reason_and_infers_the_rest(fake: PreparedRun) -> None:
    batch = resolve_dataset("foolbox_imagenet", None, limit=3).samples
    good = np.zeros((3, 224, 224), np.float32) + np.float32(0.25)
    items = [PreparedItem(good, None), PreparedItem(None, "unreadable: truncated JPEG"), PreparedItem(good + 1, None)]
    inference = fake.inference
    before = ScoreRunner.calls
    out = inference.predict(fake.runner, batch, items)
    assert [p.sample_id for p in out.predictions] == [s.id for s in batch]  # none dropped
    assert out.predictions[1].error == "unreadable: truncated JPEG" and out.predictions[1].top1 is None
    assert out.predictions[0].error is None and out.predictions[2].error is None
    assert out.rows == [0, 2] and len(out.latencies) == 1 and ScoreRunner.calls == before + 1
    # in chunks of one row: two calls, the same records
    chunked = inference.predict(fake.runner, batch, items, chunk=1)
    assert chunked.predictions == out.predictions and len(chunked.latencies) == 2
    # outputs given by the reuse hook are not computed again
    computed = out.outputs
    assert computed is not None
    calls = ScoreRunner.calls
    reused = inference.predict(fake.runner, batch, items, reuse=lambda rows, x: (computed, [0.5]))
    assert ScoreRunner.calls == calls and reused.predictions == out.predictions and reused.latencies == [0.5]
    # the fail-fast hook stops at the bad sample, naming it, where and why, before anything is inferred
    with pytest.raises(SampleError, match=rf"^sample '{batch[1].id}' failed in v: unreadable: truncated JPEG"):
        inference.predict(fake.runner, batch, items, on_error=fail_fast_hook(" in v"))
    assert ScoreRunner.calls == calls


def test_evaluation_and_benchmark_records_state_what_ran_through_one_builder(fake: PreparedRun) -> None:
    data = resolve_dataset("foolbox_imagenet", None, limit=4)
    record = evaluate(fake, data)
    header = provenance(fake, fake.runner, fake.pipeline)
    assert set(header) == {"manifest", "pipeline", "runtime", "software", "hardware"}
    assert record.manifest == manifest_info(fake.loaded) == header["manifest"]
    assert record.pipeline == header["pipeline"] and record.runtime == header["runtime"]
    assert record.runtime["model_sha256"] == fake.artifact.sha256
    assert isinstance(BatchInference(fake.pipeline, fake.task, fake.runner), BatchInference)
    assert build_record.__module__ == "repliscope.evaluation.record_builder"
    import repliscope.bench.run as bench_run
    import repliscope.pitfalls.sweep as sweep

    assert sweep.build_record is build_record and bench_run.provenance is provenance


def test_a_dataset_with_every_sample_unreadable_is_recorded_sample_by_sample(fake: PreparedRun, tmp_path: Path) -> None:
    for i in range(3):
        (tmp_path / f"img{i}.jpg").write_bytes(b"not a jpeg at all")
    data = resolve_dataset(str(tmp_path), "none")
    record = evaluate(fake, data)
    assert record.counts == {"total": 3, "evaluated": 0, "failed": 3, "labelled": 0}
    assert [s.sample_id for s in record.samples] == [s.id for s in data.samples]
    assert all(s.error for s in record.samples)
