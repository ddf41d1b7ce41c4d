"""A NaN or an infinity in a model's output is no prediction: the sample fails with the reason (before: all-NaN
rows became top-5 0..4 and the run said "10 evaluated, 0 failed"); ties of the scores ``topk`` ranks are counted in
the record. Detection and segmentation outputs go through the same check (``non_finite_rows``)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from repliscope.datasets import resolve_dataset
from repliscope.errors import SampleError
from repliscope.evaluation.engine import NON_FINITE, PreparedItem, fail_fast_hook, non_finite_rows
from repliscope.evaluation.run import PreparedRun, RunSettings, evaluate, prepare
from repliscope.metrics.classification import tie_counts, tie_line
from tests.conftest import LITE0
from tests.evaluation.test_engine_reading import FakeRunner


class HostileRunner(FakeRunner):
    """Per row, by the sample's position in the run (rows counted over the calls; the warm-up's zeros are not a
    sample): rows 0-3 all NaN, row 4 one +inf, row 5 one NaN, rows 6-7 all equal, rows 8-9 a clear winner
    (class 7)."""

    seen = 0

    def _infer(self, batch: np.ndarray) -> np.ndarray:
        out = np.tile(np.linspace(0, 1, 1000, dtype=np.float32), (batch.shape[0], 1))
        out[:, 7] = 50.0
        if not batch.any():  # the warm-up
            return out
        for i in range(batch.shape[0]):
            row = type(self).seen + i
            if row < 4:
                out[i] = np.nan
            elif row == 4:
                out[i, 3] = np.inf
            elif row == 5:
                out[i, 999] = np.nan
            elif row in (6, 7):
                out[i] = 1.0
        type(self).seen += batch.shape[0]
        return out


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> PreparedRun:
    prepared = prepare(LITE0, RunSettings(runtime="torch", threads=1, batch_size=4))  # nothing loaded
    return replace(
        prepared, runner=HostileRunner(prepared.artifact, threads=1, cache_dir=tmp_path_factory.mktemp("nan"))
    )


def test_nan_and_inf_outputs_fail_their_samples_and_ties_are_counted(hostile: PreparedRun) -> None:
    data = resolve_dataset("foolbox_imagenet", None, limit=10)
    HostileRunner.seen = 0
    record = evaluate(hostile, data)
    failed = [p for p in record.samples if p.error is not None]
    assert [p.sample_id for p in failed] == [s.id for s in data.samples[:6]]
    assert failed[0].error == f"{NON_FINITE}: 'output' holds 1000 NaN and 0 infinite of 1000 values"
    assert failed[4].error == f"{NON_FINITE}: 'output' holds 0 NaN and 1 infinite of 1000 values"
    assert failed[5].error == f"{NON_FINITE}: 'output' holds 1 NaN and 0 infinite of 1000 values"
    assert all(p.topk_indices == [] and p.topk_probs == [] for p in failed)  # no top-5 0..4 made up
    # rows 6, 7: constant output, top-5 is classes 0..4 by the tie rule, and the label ties are counted
    equal = record.samples[6:8]
    assert [p.topk_indices for p in equal] == [[0, 1, 2, 3, 4]] * 2
    assert record.counts["failed"] == 6 and record.counts["evaluated"] == 4 and record.counts["labelled"] == 10
    assert record.counts["all_equal_rows"] == 2
    assert record.counts["label_ties_top1"] == 2 and record.counts["label_ties_top5"] == 2
    top1 = record.metric("top1")
    assert top1 is not None and top1.n == 4  # the failed six are out of n
    line = tie_line(record.counts)
    assert line == (
        "2 all-equal output rows; labels tied at the top-k boundary: top-1 2, top-5 2 "
        "(a tie goes to the lower class index)"
    )
    from repliscope.report.markdown import render_run_markdown

    md = render_run_markdown(record)
    assert f"Ties: {line}." in md and f"{NON_FINITE}: 'output' holds 1000 NaN" in md  # the report says both
    from repliscope.cli.output import console, print_record

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COLUMNS", "300")  # the shared console reads it (its width is never set: other tests rely on it)
        with console.capture() as captured:
            print_record(record)
    assert "samples   4 evaluated, 6 failed, 10 labelled" in captured.get()
    assert f"ties      {line}" in captured.get()  # what evaluate prints


def test_fail_fast_stops_at_a_non_finite_output(hostile: PreparedRun) -> None:
    batch = resolve_dataset("foolbox_imagenet", None, limit=2).samples
    items = [PreparedItem(np.ones((3, 224, 224), np.float32), None) for _ in batch]
    HostileRunner.seen = 0
    with pytest.raises(SampleError, match=rf"^sample '{batch[0].id}' failed: {NON_FINITE}: 'output' holds 1000 NaN"):
        hostile.inference.predict(hostile.runner, batch, items, on_error=fail_fast_hook())


def test_named_outputs_name_the_output_and_skip_integer_and_unbatched_ones() -> None:
    boxes = np.zeros((3, 2, 4), np.float32)
    boxes[1, 0, 2] = np.inf
    scores = np.zeros((3, 2), np.float32)
    scores[1, 1] = scores[2, 0] = np.nan
    outputs: dict[str, np.ndarray] = {
        "boxes": boxes,
        "scores": scores,
        "classes": np.zeros((3, 2), np.int64),
        "anchors": np.full(4, np.nan),
    }
    assert non_finite_rows(outputs, 3) == {
        1: f"{NON_FINITE}: 'boxes' holds 0 NaN and 1 infinite of 8 values; "
        "'scores' holds 1 NaN and 0 infinite of 2 values",
        2: f"{NON_FINITE}: 'scores' holds 1 NaN and 0 infinite of 2 values",
    }
    assert non_finite_rows(np.ones((2, 5), np.float32), 2) == {}


def test_tie_counts_only_where_the_rule_decides() -> None:
    scores = np.array(
        [
            [0.1, 0.5, 0.5, 0.1, 0.1, 0.1, 0.1],  # label 2 tied with 1 at the top-1 boundary (out by the rule)
            [0.1, 0.5, 0.5, 0.1, 0.1, 0.1, 0.1],  # label 1: also decided by the rule (in)
            [0.1, 0.5, 0.5, 0.1, 0.1, 0.1, 0.1],  # label 0: 0.1 ties 5 classes across the top-5 boundary
            [0.9, 0.5, 0.5, 0.1, 0.0, 0.0, 0.0],  # label 1: tied with 2 but both inside the top-5, out of top-1
            [0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2],  # all equal: every label is a tie at both boundaries
            [0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2],  # all equal, unlabelled: counted as a row only
        ],
        np.float32,
    )
    assert tie_counts(scores, [2, 1, 0, 1, 3, None], kept=5) == {
        "all_equal_rows": 2,
        "label_ties_top1": 3,
        "label_ties_top5": 2,
    }
    assert tie_counts(scores, [2, 1, 0, 1, 3, None], kept=1) == {"all_equal_rows": 2, "label_ties_top1": 3}
    assert tie_line({"all_equal_rows": 0, "label_ties_top1": 0}) is None and tie_line({}) is None


def test_a_detection_image_with_a_nan_box_fails_alone() -> None:
    """Detection: the image whose boxes hold a NaN fails with the reason naming the output; the others keep their
    boxes, mapped back through their geometry as before (the loop of tests/evaluation/test_engine_tasks.py)."""
    from typing import Any, cast

    from repliscope.datasets.base import BoxAnnotation, Sample
    from repliscope.evaluation.engine import LoopOptions, run_loop
    from repliscope.ops.base import BuildContext
    from repliscope.ops.pipeline import Pipeline
    from repliscope.runtimes.base import ModelArtifact
    from repliscope.tasks import get_task
    from tests.evaluation.test_engine_tasks import POST, PRE, _FixedBoxes, _png

    Specs = list[dict[str, Any]]

    class _NanSecond(_FixedBoxes):
        def _infer_outputs(self, batch: np.ndarray) -> dict[str, np.ndarray]:
            out = super()._infer_outputs(batch)
            if batch.any():  # not the warm-up's zeros: the second image of the first batch
                out["boxes"][1, 0, 3] = np.nan
            return out

    samples = [
        Sample(f"s{i}.png", None, lambda: _png(32, 48), objects=(BoxAnnotation((0, 0, 1, 1), 0),)) for i in range(2)
    ]
    artifact = ModelArtifact(
        path=Path("none"),
        sha256="0" * 64,
        format="onnx",
        input_name="x",
        input_shape=(-1, 32, 48, 3),
        input_dtype="uint8",
        output_names=("boxes", "scores"),
    )
    loop = run_loop(
        Pipeline.from_specs(cast(Specs, PRE), cast(Specs, POST), BuildContext()),
        _NanSecond(artifact, threads=1, cache_dir=Path(".")),
        samples,
        LoopOptions(batch_size=2, prep_workers=1),
        (32, 48, 3),
        task=get_task("object_detection"),
    )
    first, second = loop.predictions
    assert first.error is None and first.detections is not None and len(first.detections) == 2
    assert second.detections is None
    assert second.error == f"{NON_FINITE}: 'boxes' holds 1 NaN and 0 infinite of 8 values"


def test_a_segmentation_image_with_an_infinite_score_fails_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Segmentation: the exact colour segmenter (tests/segmentation) with one +inf in image b's logits: b fails
    naming 'logits', the three others score exactly as before (mIoU 1.0 over them)."""
    from tests.segmentation._data import write_voc

    manifest = Path(__file__).parents[1] / "fixtures" / "segmentation" / "colour-segmenter.yaml"
    prepared = prepare(manifest, RunSettings(runtime="onnxruntime", threads=1, batch_size=1, cache_dir=tmp_path))
    runner = prepared.runner
    original = runner.infer_outputs
    seen: list[int] = []

    def hostile(batch: np.ndarray) -> dict[str, np.ndarray]:
        out = original(batch)
        if batch.any():  # a sample, not the warm-up's zeros
            seen.append(1)
            if len(seen) == 2:  # image b
                out = {k: v.copy() for k, v in out.items()}
                out["logits"][0, 5, 5, 1] = np.inf
        return out

    monkeypatch.setattr(runner, "infer_outputs", hostile)
    record = evaluate(prepared, resolve_dataset(f"voc_seg:{write_voc(tmp_path / 'voc')}"))
    errors = {s.sample_id: s.error for s in record.samples}
    assert errors == {
        "a.jpg": None,
        "b.jpg": f"{NON_FINITE}: 'logits' holds 0 NaN and 1 infinite of 3072 values",
        "c.jpg": None,
        "d.jpg": None,
    }
    assert record.counts == {"total": 4, "evaluated": 3, "failed": 1, "labelled": 4}
    miou = record.metric("mIoU")
    assert miou is not None and (miou.value, miou.n) == (1.0, 3)
