"""Selfie segmentation on coco-val-mini (158 images, person vs background; slow): the measured figures of
docs/guides/segmentation.md on tflite and on onnxruntime through the tf2onnx conversion (equal to 1e-4)."""

from __future__ import annotations

import pytest

from repliscope.datasets.resolve import resolve_dataset
from repliscope.evaluation.run import RunSettings, evaluate, prepare
from tests.segmentation._selfie import MANIFESTS, need_coco, seed_cache

EXPECTED = {
    "general": {"mIoU": 0.5844, "person": 0.3176, "background": 0.8511, "pixel_accuracy": 0.8608},
    "landscape": {"mIoU": 0.6013, "person": 0.3261, "background": 0.8765, "pixel_accuracy": 0.8835},
}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("which", "runtime"), [("general", "tflite"), ("landscape", "tflite"), ("general", "onnxruntime")]
)
def test_coco_person_iou(which: str, runtime: str) -> None:
    coco = need_coco()
    seed_cache()
    prepared = prepare(MANIFESTS[which], RunSettings(runtime=runtime, threads=1, batch_size=1))
    record = evaluate(prepared, resolve_dataset(f"coco:{coco}"))
    assert record.counts["evaluated"] == 158 and record.counts["failed"] == 0
    want = EXPECTED[which]
    miou = record.metric("mIoU")
    assert miou is not None and miou.value == pytest.approx(want["mIoU"], abs=1e-4) and miou.n == 158
    assert miou.ci_low < miou.value < miou.ci_high
    acc = record.metric("pixel_accuracy")
    assert acc is not None and acc.value == pytest.approx(want["pixel_accuracy"], abs=1e-4)
    assert record.per_class is not None
    iou = {row["name"]: row["iou"] for row in record.per_class}
    assert iou["person"] == pytest.approx(want["person"], abs=1e-4)
    assert iou["background"] == pytest.approx(want["background"], abs=1e-4)
    assert [row["gt_pixels"] for row in record.per_class] == [38941549, 3792889]  # the COCO person masks, exact
    assert record.dataset["categories_evaluated"] == [[1, "person"]]
    from repliscope.units.segmentation import mask_units

    sizes = mask_units(record.samples, replicates=100).sizes
    assert [(b.name, b.n_objects) for b in sizes] == [("small", 116), ("medium", 112), ("large", 95)]
    if (which, runtime) == ("general", "tflite"):
        assert [round(b.recall or 0, 4) for b in sizes] == [0.077, 0.3354, 0.7271]
