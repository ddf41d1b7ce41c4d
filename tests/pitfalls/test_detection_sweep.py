"""A pitfall sweep of a detection manifest (the exact rectangle detector on synthetic_detection): variants are
post-processed and recorded by the detection task and paired with its statistics; exact expected values."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from repliscope.datasets import resolve_dataset
from repliscope.datasets.base import Dataset
from repliscope.evaluation.run import RunSettings, prepare
from repliscope.pitfalls.sweep import SweepOutput, run_sweep, task_pitfalls

MANIFEST = Path(__file__).parents[1] / "fixtures" / "detection" / "rect-detector.yaml"
NAMES = [
    "box_off_by_one",
    "class_id_plus_1",
    "color_layout_swapped",
    "decoder_swapped",
    "float16_inference",
    "letterbox_not_undone",
]


@pytest.fixture(scope="module")
def synthetic() -> Dataset:
    return resolve_dataset("synthetic_detection")


@pytest.fixture(scope="module")
def sweep(synthetic: Dataset, tmp_path_factory: pytest.TempPathFactory) -> SweepOutput:
    prepared = prepare(
        MANIFEST,
        RunSettings(runtime="onnxruntime", threads=1, batch_size=1, cache_dir=tmp_path_factory.mktemp("cache")),
    )
    return run_sweep(prepared, synthetic, NAMES, visual_samples=1)


def test_default_variants_follow_the_task() -> None:
    detection, classification = task_pitfalls("object_detection"), task_pitfalls("image_classification")
    assert {"box_off_by_one", "class_id_plus_1", "letterbox_not_undone", "color_layout_swapped"} <= set(detection)
    assert "color_layout_swapped" in classification and "box_off_by_one" not in classification


def test_variants_scored_and_paired_exactly(sweep: SweepOutput, synthetic: Dataset) -> None:
    result = sweep.result
    assert result.reference.metric("AP").value == 1.0  # type: ignore[union-attr]
    v = {o.name: o for o in result.variants}
    assert v["letterbox_not_undone"].status == "not applicable"
    assert v["float16_inference"].status == "failed" and "cannot run" in (v["float16_inference"].reason or "")
    objects = [o for s in synthetic.samples for o in s.objects or ()]
    # RGB <-> BGR swaps red and blue: only green (12 of the 33 rectangles) is right
    swapped = v["color_layout_swapped"]
    assert swapped.metric("AP").value == pytest.approx(1 / 3, abs=1e-12)  # type: ignore[union-attr]
    p = swapped.paired_task or {}
    assert (p["n_samples"], p["matched_fraction"], p["mean_iou"]) == (16, 12 / 33, 1.0)
    assert p["flipped_images"] == sum(1 for s in synthetic.samples if any(o.class_id != 2 for o in s.objects or ()))
    assert v["class_id_plus_1"].metric("AP").value == 0.0  # type: ignore[union-attr]
    assert v["class_id_plus_1"].paired_task["matched_fraction"] == 0.0  # type: ignore[index]
    assert v["decoder_swapped"].paired_task == {
        **v["decoder_swapped"].paired_task,  # type: ignore[dict-item]
        "matched_fraction": 1.0,
        "mean_iou": 1.0,
        "flipped_images": 0,
    }
    # reading the pixel boxes as 1-based moves every box 1 px up and left: IoU (w-1)(h-1) / (2wh - (w-1)(h-1))
    ious = [
        (w - 1) * (h - 1) / (2 * w * h - (w - 1) * (h - 1))
        for w, h in ((o.box[2] - o.box[0], o.box[3] - o.box[1]) for o in objects)
    ]
    off = v["box_off_by_one"].paired_task or {}
    assert off["matched_fraction"] == 1.0 and off["mean_iou"] == pytest.approx(float(np.mean(ious)), abs=1e-6)
    assert all(o.paired is None for o in result.variants)  # the classification statistics stay empty


def test_variant_records_carry_detections_and_ground_truth(sweep: SweepOutput) -> None:
    by_variant = {r.variant: r for r in sweep.records}
    swapped = by_variant["color_layout_swapped"]
    assert swapped.task == "object_detection" and swapped.ground_truth is not None
    assert {d.class_id for s in swapped.samples for d in s.detections or []} == {1, 2, 3}
    assert by_variant["reference"].result_hash == by_variant["decoder_swapped"].result_hash


def test_sweep_report_reads_ap_and_the_paired_detection_statistics(sweep: SweepOutput) -> None:
    from repliscope.report.markdown import render_sweep_markdown

    md = render_sweep_markdown(sweep.result)
    assert (
        "| variant | the one change | evaluated / failed | AP | 95 % interval | AP50 | paired n | Δ AP (paired) | "
        "Δ AP 95 % interval | matched | images differ | mean IoU | status |"
    ) in md
    assert (
        "| `color_layout_swapped` | decode.channels: RGB -> BGR | 16 / 0 | 0.3333 | [0.3333, 0.3333] | 0.3333 | 16 | "
        "-0.6667 | [-0.6667, -0.6667] \\* | 36.36 % | 15/16 | 1.0000 | ok |"
    ) in md
    assert "Δ top-1 per variant" not in md and "top-1 changed" not in md
    # the reference's AP intervals are bootstrap intervals over images, not Wilson's (was: Wilson)
    assert "COCOeval's numbers as fractions, 95 % bias-corrected bootstrap intervals over images." in md
    assert "Wilson" not in md


def test_the_cli_table_reads_the_house_numbers(sweep: SweepOutput, monkeypatch: pytest.MonkeyPatch) -> None:
    """AP and its intervals as fractions (``0.3333``, ``[0.3333, 0.3333]``), the matched share in percent
    (``36.36 %``), as the report's table above (repliscope.number_text)."""
    from repliscope.cli import output

    monkeypatch.setattr(output.console, "_width", 160)
    with output.console.capture() as cap:
        output.print_sweep(sweep.result)
    rows = {cells[0]: cells[1:] for cells in (line.split() for line in cap.get().splitlines()) if cells}
    swapped = ["16/0", "0.3333", "[0.3333,", "0.3333]", "-0.6667", "[-0.6667,", "-0.6667]", "36.36", "%", "1.0000"]
    assert rows["color_layout_swapped"] == [*swapped, "15"]
    assert rows["reference"][:4] == ["16/0", "1.0000", "[1.0000,", "1.0000]"]


def test_paired_delta_ap_is_on_the_categories_the_model_detects(
    synthetic: Dataset, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A dataset category the labels do not name ('lime') is left out of the paired ΔAP as of the AP itself
    (was: the paired ΔAP over every dataset category: -2/3 here with green counted, -0.005 for SSDLite's
    class_id_plus_1 whose AP fell 0.179 -> 0)."""
    renamed = Dataset(
        "renamed", synthetic.samples, license="x", label_rule="x", categories={1: "red", 2: "lime", 3: "blue"}
    )
    prepared = prepare(
        MANIFEST,
        RunSettings(runtime="onnxruntime", threads=1, batch_size=1, cache_dir=tmp_path_factory.mktemp("cache")),
    )
    out = run_sweep(prepared, renamed, ["color_layout_swapped"], visual_samples=0)
    result = out.result
    variant = result.variants[0]  # red and blue swapped: only green (left out here) would be right
    assert (result.reference.metric("AP").value, variant.metric("AP").value) == (1.0, 0.0)  # type: ignore[union-attr]
    paired = variant.paired_task or {}
    assert (paired["ap_reference"], paired["ap_variant"], paired["delta_ap"]) == (1.0, 0.0, -1.0)  # not -2/3
    from repliscope.report.markdown import render_sweep_markdown

    md = render_sweep_markdown(result, {r.run_id: r for r in out.records})
    assert (
        "Scored on 2 of 3 dataset categories, the ones the model's labels name (1 red, 3 blue); 1 left out "
        "with their 12 ground-truth boxes: lime."
    ) in md
