"""Honest timings: the model load (e.g. an ONNX export) and one warm-up inference are recorded apart from the
measured loop, and the throughput covers only the loop. A fake runner whose load sleeps stands in for the export."""

from __future__ import annotations

import io
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from pydantic import ValidationError

from repliscope.datasets import resolve_dataset
from repliscope.evaluation.engine import warmup_shape
from repliscope.evaluation.record import Timings
from repliscope.evaluation.run import PreparedRun, RunSettings, evaluate, prepare
from repliscope.runtimes.base import ModelArtifact, Runner
from tests.conftest import LITE0

LOAD_SLEEP = 0.6
WARMUP_SLEEP = 0.15


class SlowLoadRunner(Runner):
    """Loads in LOAD_SLEEP seconds (like a torch -> ONNX export); an all-zero batch (the warm-up) takes
    WARMUP_SLEEP; real batches are instant. Class 7 always wins."""

    name = "fake"

    def __init__(self, artifact: ModelArtifact, *, threads: int, cache_dir: Path) -> None:
        super().__init__(artifact, threads=threads, cache_dir=cache_dir)
        self.shapes: list[tuple[int, ...]] = []
        self.loads = 0

    def framework(self) -> tuple[str, str]:
        return "fake", "1.0"

    def _load(self) -> None:
        self.loads += 1
        time.sleep(LOAD_SLEEP)

    def _infer(self, batch: np.ndarray) -> np.ndarray:
        self.shapes.append(tuple(batch.shape))
        if not batch.any():
            time.sleep(WARMUP_SLEEP)
        scores = np.zeros((batch.shape[0], 1000), dtype=np.float32)
        scores[:, 7] = 10.0
        return scores


@pytest.fixture(scope="module")
def lite0() -> PreparedRun:
    return prepare(LITE0, RunSettings(runtime="onnxruntime", threads=1, batch_size=4))


def _folder(tmp_path: Path, n: int) -> Path:
    folder = tmp_path / "imgs"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for i in range(n):
        buf = io.BytesIO()
        Image.fromarray(rng.integers(1, 255, (40, 60, 3), dtype=np.uint8)).save(buf, format="PNG")
        (folder / f"img_{i}_{i}.png").write_bytes(buf.getvalue())
    return folder


def test_load_and_warmup_are_not_in_the_measured_loop(lite0: PreparedRun, tmp_path: Path) -> None:
    runner = SlowLoadRunner(lite0.artifact, threads=1, cache_dir=tmp_path)
    prepared = replace(lite0, runner=runner)
    rec = evaluate(prepared, resolve_dataset(str(_folder(tmp_path, 6)), "filename_index"))
    t = rec.timings
    assert runner.loads == 1
    # one warm-up on zeros of the first batch's shape, then the 2 real batches (4 + 2 samples)
    assert runner.shapes == [(4, 3, 224, 224), (4, 3, 224, 224), (2, 3, 224, 224)]
    assert len(t.batch_latencies_seconds) == 2
    assert t.load_seconds >= LOAD_SLEEP
    assert t.warmup_seconds >= WARMUP_SLEEP
    assert t.loop_seconds is not None and t.loop_seconds < t.total_seconds - LOAD_SLEEP - WARMUP_SLEEP + 1e-6
    assert t.total_seconds == pytest.approx(t.load_seconds + t.warmup_seconds + t.loop_seconds, abs=0.05)
    assert rec.counts["evaluated"] == 6
    assert t.throughput_samples_per_second == pytest.approx(6 / t.loop_seconds)
    assert t.throughput_samples_per_second > 6 / t.total_seconds
    assert rec.options["warmup"] is True
    assert [s.top1 for s in rec.samples] == [7] * 6


def test_warmup_shape() -> None:
    assert warmup_shape(8, (3, 224, 224)) == (8, 3, 224, 224)
    assert warmup_shape(0, (3, 224, 224)) is None  # no samples, nothing to warm up
    assert warmup_shape(8, (3, -1, -1)) is None  # a dynamic dimension: no shape to warm up on
    assert warmup_shape(8, None) is None


def test_records_stored_before_the_split_still_read() -> None:
    old = Timings.model_validate(
        {
            "total_seconds": 17.0,
            "inference_seconds": 2.0,
            "batch_latencies_seconds": [1.0, 1.0],
            "throughput_samples_per_second": 2.9,
        }
    )
    assert (old.load_seconds, old.warmup_seconds, old.loop_seconds) == (0.0, 0.0, None)


@pytest.mark.parametrize("field", ["read_ahead_samples", "read_ahead_cpu_seconds", "throughput_seconds"])
def test_negative_read_ahead_timings_are_refused(field: str) -> None:
    """An imported record cannot carry a negative read-ahead charge (it would inflate the stated rate)."""
    base = {"total_seconds": 1.0, "inference_seconds": 0.5, "batch_latencies_seconds": [0.5]}
    with pytest.raises(ValidationError, match=field):
        Timings.model_validate({**base, "throughput_samples_per_second": 2.0, field: -1})
    assert getattr(Timings.model_validate({**base, "throughput_samples_per_second": 2.0}), field) in (0, 0.0, None)
