"""YOLO pitfall variants derived from examples/yolov3-tiny.yaml, each one stated change, and what each does to
Darknet's sample image (on onnxruntime through the conversion; the run is the same pipeline a sweep runs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from repliscope.ops.pipeline import Pipeline, decode_input
from repliscope.pitfalls import yolo_variants
from repliscope.pitfalls.base import PITFALLS, NotApplicable, PitfallContext
from repliscope.pitfalls.sweep import task_pitfalls
from tests.yolo._assets import DARKNET_DATA, MANIFEST, seed_cache

NAMES = [
    "darknet_letterbox_stretch",
    "darknet_nms_class_agnostic",
    "darknet_nms_sort_obj_swapped",
    "yolo_anchors_other_head",
    "yolo_demo_threshold",
    "yolo_objectness_not_multiplied",
]
CTX = PitfallContext(input_shape=(-1, 3, 416, 416), input_layout="NCHW", runtime="onnxruntime", batch_size=1, threads=1)


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    from repliscope.evaluation.run import RunSettings, prepare
    from repliscope.runtimes import create_runner

    seed_cache()
    p = prepare(MANIFEST, RunSettings(runtime="onnxruntime", threads=1, batch_size=1))
    runner = create_runner("onnxruntime", p.artifact, 1, tmp_path_factory.mktemp("onnx"))
    return p.pipeline, runner


def _detect(pipeline: Pipeline, runner, image: Path) -> list[tuple[int, float]]:  # type: ignore[no-untyped-def]
    item = pipeline.preprocess(decode_input(image.read_bytes()))
    preds = pipeline.postprocess(runner.infer_outputs(item.data[None]), geometry=[item.geometry])
    d = preds.detections[0]
    return sorted(zip(d.classes.tolist(), d.scores.tolist(), strict=True), key=lambda t: -t[1])


def test_registered_for_detection() -> None:
    assert set(NAMES) <= set(task_pitfalls("object_detection"))
    assert all(PITFALLS.get(n).tasks == ("object_detection",) for n in NAMES)
    assert yolo_variants.DEMO_THRESHOLD == 0.25


def test_each_variant_is_one_change_with_an_effect(prepared) -> None:  # type: ignore[no-untyped-def]
    pipeline, runner = prepared
    base = _detect(pipeline, runner, DARKNET_DATA / "dog.jpg")
    assert len(base) == 70  # thresh .005 after do_nms_sort: the 70 libdarknet gives (test_darknet_pipeline)
    assert [c for c, _ in base[:4]] == [3, 2, 18, 8]  # COCO ids: car, bicycle, dog, truck
    changes = {}
    counts = {}
    for name in NAMES:
        derived = PITFALLS.get(name)().derive(pipeline, CTX)
        changes[name] = derived.change
        counts[name] = len(_detect(derived.pipeline, runner, DARKNET_DATA / "dog.jpg"))
    assert changes["darknet_nms_sort_obj_swapped"] == "darknet_nms method sort -> obj"
    assert changes["yolo_demo_threshold"] == "yolo_decode threshold 0.005 -> 0.25"
    assert changes["yolo_anchors_other_head"] == "yolo_decode masks [[3, 4, 5], [0, 1, 2]] -> [[0, 1, 2], [3, 4, 5]]"
    assert changes["darknet_letterbox_stretch"].startswith("letterbox -> stretch")
    # the detections on dog.jpg (70 with the manifest's own pipeline)
    assert counts == {
        "darknet_letterbox_stretch": 65,
        "darknet_nms_class_agnostic": 66,
        "darknet_nms_sort_obj_swapped": 68,
        "yolo_anchors_other_head": 72,
        "yolo_demo_threshold": 6,
        "yolo_objectness_not_multiplied": 660,
    }


def test_not_applicable_without_darknet_ops() -> None:
    from repliscope.ops.pipeline import Pipeline

    empty = Pipeline((), ())
    for name in NAMES:
        with pytest.raises(NotApplicable):
            PITFALLS.get(name)().derive(empty, CTX)
