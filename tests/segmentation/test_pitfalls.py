"""Segmentation pitfalls: each derives ONE change (or says why not), and a sweep of the exact colour segmenter
scores each with a paired ΔmIoU."""

from __future__ import annotations

from pathlib import Path

import pytest

from repliscope.datasets.resolve import resolve_dataset
from repliscope.evaluation.run import PreparedRun, RunSettings, prepare
from repliscope.pitfalls.base import PITFALLS, NotApplicable, PitfallContext
from repliscope.pitfalls.sweep import run_sweep, task_pitfalls
from tests.segmentation._data import write_voc

FIXTURES = Path(__file__).parents[1] / "fixtures" / "segmentation"
NAMES = [
    "mask_upsample_nearest",
    "mask_labels_before_upsampling",
    "mask_threshold_0.3",
    "mask_threshold_0.7",
    "mask_class_id_plus_1",
    "mask_class_id_minus_1",
    "mask_void_as_background",
    "segmentation_letterbox_stretch_swapped",
    "segmentation_half_pixel_corner_aligned_swapped",
    "segmentation_input_range_swapped",
]


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> PreparedRun:
    return prepare(
        FIXTURES / "colour-segmenter.yaml",
        RunSettings(runtime="onnxruntime", threads=1, batch_size=1, cache_dir=tmp_path_factory.mktemp("cache")),
    )


def test_registered_for_segmentation_only() -> None:
    names = task_pitfalls("semantic_segmentation")
    assert set(NAMES) <= set(names) and "color_layout_swapped" in names
    assert not set(NAMES) & set(task_pitfalls("image_classification"))


def test_each_is_one_stated_change(prepared: PreparedRun) -> None:
    ctx = PitfallContext(
        input_shape=(1, 32, 32, 3), input_layout="NHWC", runtime="onnxruntime", batch_size=1, threads=1
    )
    base = prepared.pipeline
    changes = {}
    for name in NAMES:
        try:
            changes[name] = PITFALLS.get(name)().derive(base, ctx).change
        except NotApplicable as exc:
            changes[name] = f"n/a: {exc}"
    assert (
        changes["mask_upsample_nearest"] == "mask_resize.method bilinear -> nearest (on the scores, before the labels)"
    )
    assert changes["mask_labels_before_upsampling"] == "mask_argmax moved before mask_resize (method -> nearest)"
    assert changes["mask_threshold_0.3"] == "n/a: the pipeline has no 'mask_threshold' post-processing op"
    assert changes["mask_class_id_plus_1"].startswith("mask_label_offset +1 after mask_argmax")
    assert (
        changes["segmentation_letterbox_stretch_swapped"]
        == "resize -> letterbox [32, 32]; the padding is undone exactly by mask_resize (mapping: geometry)"
    )
    assert (
        changes["segmentation_half_pixel_corner_aligned_swapped"]
        == "n/a: only a bilinear stretch has a corner-aligned twin (warp_resize)"
    )
    assert changes["segmentation_input_range_swapped"] == "input range [0, 1] -> [-1, 1]"


def test_sweep_scores_delta_miou(prepared: PreparedRun, tmp_path: Path) -> None:
    data = resolve_dataset(f"voc_seg:{write_voc(tmp_path / 'voc')}")
    out = run_sweep(
        prepared,
        data,
        ["mask_upsample_nearest", "mask_labels_before_upsampling", "mask_class_id_plus_1", "mask_void_as_background"],
        visual_samples=0,
    )
    by = {v.name: v for v in out.result.variants}
    assert out.result.reference.metric("mIoU").value == 1.0  # type: ignore[union-attr]
    for exact in ("mask_upsample_nearest", "mask_labels_before_upsampling"):  # 2x grid: nearest is exact here
        p = by[exact].paired_task
        assert p is not None and p["delta_miou"] == 0.0 and p["pixel_agreement"] == 1.0 and p["flipped_images"] == 0
    shifted = by["mask_class_id_plus_1"].paired_task
    assert shifted is not None and shifted["delta_miou"] < -0.9 and shifted["delta_miou_ci_high"] < 0
    assert shifted["flipped_images"] == 4
    void = by["mask_void_as_background"].paired_task
    # row 0 (void) of image c is green (16 px) and of image a/b/d background: 16 wrong pixels, masks identical
    assert void is not None and void["pixel_agreement"] == 1.0 and void["delta_miou"] < 0
    accuracy = by["mask_void_as_background"].metric("pixel_accuracy")
    assert accuracy is not None and accuracy.value == pytest.approx(1 - 16 / (4 * 64 * 64))
    from repliscope.report.build import build_sweep_view

    view = build_sweep_view(out.result, {r.run_id: r for r in out.records})
    assert view.pitfall_headers[:5] == ["mIoU", "95 % interval", "person/fg IoU", "paired n", "Δ mIoU (paired)"]
    rows = {r.name: r for r in view.pitfalls}
    assert rows["reference"].top1 == "1.0000" and rows["mask_upsample_nearest"].delta_top1 == "+0.0000"
    assert rows["mask_class_id_plus_1"].significant and rows["mask_class_id_plus_1"].flips == "4/4"
    from repliscope.cli import output

    output.console._width = 160  # as the detection sweep's test; restored below (the console follows COLUMNS)
    try:
        with output.console.capture() as cap:  # the CLI's table: the house's numbers (repliscope.number_text)
            output.print_sweep(out.result)
    finally:
        output.console._width = None
    cells = {row[0]: row[1:] for row in (line.split() for line in cap.get().splitlines()) if row}
    nearest = ["4/0", "1.0000", "[1.0000,", "1.0000]", "+0.0000", "[+0.0000,", "+0.0000]", "100.00", "%", "0"]
    assert cells["mask_upsample_nearest"] == nearest
