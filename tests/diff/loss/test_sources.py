"""What a loss diff feeds both losses from a Darknet manifest: the raw tensors entering the yolo layers (the yolo
layer's logistic of them is libdarknet's own output), the boxes in the letterboxed input, the cfg's settings."""

from __future__ import annotations

import numpy as np
import pytest

from repliscope.diff.loss.sources import YoloModel, _letterboxed_box, load_yolo_model, random_inputs
from tests.yolo._assets import MANIFEST, need_coco, need_darknet, seed_cache


def test_a_box_lands_where_letterbox_image_puts_the_image() -> None:
    # 640x480 in 416x416: resized to 416x312, embedded 52 rows down (letterbox_image's integer arithmetic)
    assert _letterboxed_box((0, 0, 640, 480), 640, 480, 416, 416) == pytest.approx((0.5, 0.5, 1.0, 0.75))
    cx, cy, w, h = _letterboxed_box((320, 240, 480, 480), 640, 480, 416, 416)
    assert (cx, cy, w, h) == pytest.approx((0.625, (52 + 0.75 * 312) / 416, 0.25, 0.375))
    # a box reaching outside the image is clipped to it first
    assert _letterboxed_box((-10, -10, 700, 500), 640, 480, 416, 416) == pytest.approx((0.5, 0.5, 1.0, 0.75))


@pytest.fixture(scope="module")
def model() -> YoloModel:
    need_darknet()
    seed_cache()
    return load_yolo_model(str(MANIFEST))[0]


def test_the_config_is_the_cfgs(model: YoloModel) -> None:
    assert model.yolo_layers == ("yolo_16", "yolo_23")
    assert model.config["mask"] == {"yolo_16": [3, 4, 5], "yolo_23": [0, 1, 2]}
    assert model.config["anchors"][3] == (81.0, 82.0) and model.config["classes"] == 80
    assert (model.config["ignore_thresh"], model.config["truth_thresh"]) == (0.7, 1.0)
    assert (model.config["net_w"], model.config["net_h"]) == (416, 416)
    assert model.class_table is not None and model.class_table[1] == 0 and model.class_table[90] == 79


def test_random_inputs_are_seeded_and_shaped_like_the_network(model: YoloModel) -> None:
    a, b = random_inputs(model, 5, 3), random_inputs(model, 5, 3)
    assert a.inputs.outputs["yolo_23"].shape == (3, 255, 26, 26) and a.inputs.outputs["yolo_16"].dtype == np.float32
    assert np.array_equal(a.inputs.outputs["yolo_16"], b.inputs.outputs["yolo_16"])
    assert all(t.boxes[:, :2].min() >= 0.05 and t.boxes[:, :2].max() <= 0.95 for t in a.inputs.targets)


def test_real_outputs_are_what_enters_the_yolo_layer(model: YoloModel) -> None:
    from repliscope.backends.darknet.loss import darknet_yolo_loss
    from repliscope.diff.loss.sources import darknet_inputs

    prepared = darknet_inputs(model, f"coco:{need_coco()}", 2)
    raw = prepared.inputs.outputs["yolo_16"]
    assert raw.shape == (2, 255, 13, 13)
    assert "yolo_16 <- convolutional_15" in prepared.notes[-1]
    # libdarknet's own yolo layer output (forward_yolo_layer's logistic on x, y, objectness, classes)
    result = darknet_yolo_loss(prepared.inputs)
    assert result.matching is not None and all(len(m) > 0 for m in result.matching)
    targets = prepared.inputs.targets
    assert all(t.boxes[:, :2].min() > 0 and t.boxes[:, :2].max() < 1 for t in targets)
    assert targets[0].classes.dtype == np.int64 and targets[0].classes.max() < 80
    # the same image through libdarknet: its yolo layer's output is the logistic of what the loss diff kept
    from pathlib import Path

    from repliscope.backends.darknet.augment import load_image
    from repliscope.backends.darknet.reference import letterbox_array
    from repliscope.backends.darknet.runner import DarknetRunner
    from repliscope.datasets import resolve_dataset
    from repliscope.datasets.base import read_sample
    from repliscope.runtimes.base import ModelArtifact

    sample = resolve_dataset(f"coco:{need_coco()}").samples[0]
    hwc = load_image(read_sample(sample).data or b"", Path(sample.location or sample.id).suffix)
    x = letterbox_array(np.ascontiguousarray(hwc.transpose(2, 0, 1)), 416, 416)
    artifact = ModelArtifact(
        path=model.weights, sha256="", format="darknet", input_name="data", input_shape=(-1, 3, 416, 416),
        input_dtype="float32", config_path=model.cfg,
    )  # fmt: skip
    yolo = DarknetRunner(artifact, threads=1, cache_dir=Path(".")).layer_outputs(x)["yolo_16"].reshape(3, 85, 13, 13)
    r = raw[0].reshape(3, 85, 13, 13).astype(np.float64)
    logistic = np.concatenate([r[:, 0:2], r[:, 4:]], 1)
    assert np.allclose(1 / (1 + np.exp(-logistic)), np.concatenate([yolo[:, 0:2], yolo[:, 4:]], 1), atol=2e-7)
    assert np.array_equal(r[:, 2:4], yolo[:, 2:4])  # w, h are not activated: copied as they are
