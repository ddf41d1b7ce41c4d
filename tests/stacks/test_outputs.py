"""Raw outputs kept by the loop (``LoopOptions.keep_outputs``) for stack comparisons: float32 rows per sample id,
bit-exact through the JSON encoding, and the record (result hash) unchanged by keeping them."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from repliscope.datasets import resolve_dataset
from repliscope.evaluation.engine import LoopOptions, raw_rows, run_loop
from repliscope.evaluation.run import PreparedRun, RunSettings, evaluate, prepare
from repliscope.stacks.current import current_stack
from repliscope.stacks.outputs import decode_outputs, encode_outputs
from tests.conftest import FOOLBOX_LABELS, LITE0
from tests.evaluation.test_engine_reading import FakeRunner


class ScoreRunner(FakeRunner):
    """Scores derived from the input: class (mean pixel * 1000) mod 1000 wins, deterministic per image."""

    def _infer(self, batch: np.ndarray) -> np.ndarray:
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


def test_evaluate_keeps_raw_outputs_without_changing_the_record(fake: PreparedRun) -> None:
    data = resolve_dataset("foolbox_imagenet", None)
    plain = evaluate(fake, data)
    outputs: dict[str, np.ndarray] = {}
    kept = evaluate(fake, data, outputs=outputs)
    assert kept.result_hash == plain.result_hash
    assert "keep_outputs" not in kept.options
    assert sorted(outputs) == sorted(s.sample_id for s in kept.samples) and len(outputs) == 20
    for sample in kept.samples:
        row = outputs[sample.sample_id]
        assert row.dtype == np.float32 and row.shape == (1000,)
        assert int(np.argmax(row)) == sample.top1 and row.max() == np.float32(5.0)
    assert [s.label for s in kept.samples] == FOOLBOX_LABELS


@pytest.mark.parametrize("schedule", ["pipelined", "data_parallel"])
def test_loop_keeps_outputs_in_both_schedules(fake: PreparedRun, schedule: str) -> None:
    samples = resolve_dataset("foolbox_imagenet", None, limit=7).samples
    options = LoopOptions(batch_size=3, prep_workers=2, schedule=schedule, warmup=False)  # type: ignore[arg-type]
    loop = run_loop(fake.pipeline, fake.runner, samples, replace(options, keep_outputs=True), (3, 224, 224))
    assert loop.outputs is not None and list(loop.outputs) == [s.id for s in samples]
    assert run_loop(fake.pipeline, fake.runner, samples, options, (3, 224, 224)).outputs is None


def test_raw_rows_of_named_outputs_concatenate_in_name_order() -> None:
    rows = raw_rows(
        {"b": np.arange(4, dtype=np.float64).reshape(2, 2), "a": np.array([[9], [8]]), "count": np.array(5)}, 2
    )  # a 0-d output has no batch axis: left out
    assert [r.tolist() for r in rows] == [[9.0, 0.0, 1.0], [8.0, 2.0, 3.0]]
    assert all(r.dtype == np.float32 for r in rows)


def test_encoded_outputs_round_trip_bit_exact() -> None:
    rows = {"a.jpg": np.array([0.1, np.float32(1) / 3, -0.0], dtype=np.float32), "b.jpg": np.zeros(0, np.float32)}
    back = decode_outputs(encode_outputs(rows))
    assert list(back) == ["a.jpg", "b.jpg"]
    assert back["a.jpg"].dtype == np.float32 and back["a.jpg"].tobytes() == rows["a.jpg"].tobytes()


def test_a_record_names_the_current_stack(fake: PreparedRun) -> None:
    record = evaluate(fake, resolve_dataset("foolbox_imagenet", None, limit=2))
    stack = record.software["stack"]
    assert stack == current_stack() and stack["key"] == "current" and stack["spec"] == "current"
    assert len(stack["lock_sha256"]) == 64
