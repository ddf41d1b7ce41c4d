"""The TF Model Garden's YOLOv3-tiny (tf-models-official 2.20.0, ``official/projects/yolo``) with pjreddie's
Darknet weights: what a user reproducing YOLOv3-tiny in the Model Garden writes.

Runs in the Model Garden's provisioned stack (see docs/guides/tfmg-yolo.md): ``build(cfg, weights)`` builds the
model from the Model Garden's own parts (the ``darknettiny`` backbone, the v3 ``tiny`` YoloDecoder, the YoloHead)
and loads the Darknet weights with the hand-written mapping :data:`DARKNET_TO_TFMG`. ``python yolov3_tiny.py save
CFG WEIGHTS OUT [darknet-bn]`` saves it as tf_keras' SavedModel (``model.save(OUT)``), which ``repliscope diff
--candidate OUT --candidate-format savedmodel --mapping examples/tfmg/mapping.yaml`` compares layer by layer with
libdarknet; ``python yolov3_tiny.py detect CFG WEIGHTS COCO OUT.json`` writes its detections the Model Garden's
serving way (:func:`detect`).

The Model Garden has no layer for Darknet's ``yolo``, ``route`` and ``upsample`` layers and nests its convolutions
(``yolo_pan/dark_route_process/conv_bn``); its batch norm is Keras' ``(x - mean) / sqrt(var + eps)``, eps 1e-3 by
default, where Darknet computes ``(x - mean) / (sqrt(var) + .000001)``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

DARKNET_TO_TFMG: dict[str, str] = {
    "convolutional_0": "darknettiny/ConvBN_0_0",
    "convolutional_2": "darknettiny/DarkTiny_1_tiny/conv",
    "convolutional_4": "darknettiny/DarkTiny_2_tiny/conv",
    "convolutional_6": "darknettiny/DarkTiny_3_tiny/conv",
    "convolutional_8": "darknettiny/DarkTiny_4_tiny/conv",
    "convolutional_10": "darknettiny/DarkTiny_5_tiny/conv",
    "convolutional_12": "darknettiny/DarkTiny_6_tiny/conv",
    "convolutional_13": "YoloDecoder/yolo_pan/dark_route_process/conv_bn",
    "convolutional_14": "YoloDecoder/yolo_pan/dark_route_process/conv_bn_1",
    "convolutional_15": "yolo_head/conv_bn_1",
    "convolutional_18": "YoloDecoder/yolo_pan/path_aggregation_block/conv_bn_2",
    "convolutional_21": "YoloDecoder/yolo_pan/dark_route_process_1/conv_bn_3",
    "convolutional_22": "yolo_head/conv_bn",
}
"""Darknet's convolutional layers -> the Model Garden's ConvBN blocks (conv + batch norm + leaky, or the head's
conv with bias), by path in the built model."""


def _walk(layer: Any, prefix: str = "") -> dict[str, Any]:
    out = {}
    for sub in layer._flatten_layers(include_self=False, recursive=False):
        path = f"{prefix}{sub.name}"
        out[path] = sub
        out.update(_walk(sub, path + "/"))
    return out


def build(cfg: Path, weights: Path, *, norm_epsilon: float = 0.001, darknet_bn: bool = False) -> Any:
    """The Model Garden model (tf_keras, NHWC input (None, 416, 416, 3)) with the Darknet weights loaded.

    ``darknet_bn``: store each moving variance as ``(sqrt(var) + 1e-6)**2 - norm_epsilon``, so that Keras'
    ``sqrt(var' + eps)`` equals Darknet's ``sqrt(var) + 1e-6`` (the fix the layer diff points to); False loads the
    variances as they are (the Model Garden's own convention then applies)."""
    import tf_keras
    from official.projects.yolo.modeling.backbones import darknet
    from official.projects.yolo.modeling.decoders import yolo_decoder
    from official.projects.yolo.modeling.heads import yolo_head

    from repliscope.convert.darknet_cfg import load_network_cfg, read_weights

    tf_keras.backend.clear_session()  # the layer names below are the ones a fresh session gives
    net = load_network_cfg(cfg)
    spec = tf_keras.layers.InputSpec(shape=[None, net.height, net.width, 3])
    backbone = darknet.Darknet(
        model_id="darknettiny", input_specs=spec, min_level=4, max_level=5, activation="leaky",
        norm_epsilon=norm_epsilon,
    )  # fmt: skip
    decoder = yolo_decoder.YoloDecoder(
        backbone.output_specs, activation="leaky", norm_epsilon=norm_epsilon, **yolo_decoder.YOLO_MODELS["v3"]["tiny"]
    )
    head = yolo_head.YoloHead(min_level=4, max_level=5, classes=80, boxes_per_level=3, norm_epsilon=norm_epsilon)
    x = tf_keras.Input((net.height, net.width, 3))
    model = tf_keras.Model(x, head(decoder(backbone(x))), name="tfmg_yolov3_tiny")
    layers = _walk(model)
    loaded = read_weights(weights, net)
    for dn_name, path in DARKNET_TO_TFMG.items():
        w = loaded.layers[dn_name]
        block = layers[path]
        conv = next(v for v in block.weights if v.name.endswith("kernel:0"))
        # (n, c, kh, kw) -> (kh, kw, c, n); convolutional_21 reads [upsampled (128), level 4 (256)] in both (the
        # Model Garden's path_aggregation_block concatenates in Darknet's route order: checked on the outputs)
        conv.assign(w.kernel.transpose(2, 3, 1, 0))
        named = {v.name.split("/")[-1].split(":")[0]: v for v in block.weights}
        if w.scales is not None:
            named["gamma"].assign(w.scales)
            named["beta"].assign(w.biases)
            named["moving_mean"].assign(w.mean)
            variance = w.variance
            if darknet_bn:
                variance = ((np.sqrt(w.variance.astype(np.float64)) + 1e-6) ** 2 - norm_epsilon).astype(np.float32)
            named["moving_variance"].assign(variance)
        else:
            named["bias"].assign(w.biases)
    return model


ANCHORS = {"4": [(10.0, 14.0), (23.0, 27.0), (37.0, 58.0)], "5": [(81.0, 82.0), (135.0, 169.0), (344.0, 319.0)]}
"""yolov3-tiny.cfg's anchors (pixels) per Model Garden level: mask 0,1,2 on the 26x26 level 4, 3,4,5 on level 5."""


def detect(model: Any, images: list[Path], size: int = 416) -> list[dict[str, Any]]:
    """The Model Garden's own inference on each image: ``serving/model_fn.letterbox`` (nearest resize, zero pad),
    x / 255, the model, its ``YoloLayer`` detection generator with its default evaluation settings (score
    threshold 0.001, greedy NMS at 0.6, 200 boxes) and ``model_fn.undo_info``. COCO-style detections: ``file``,
    ``class`` (0..79), ``bbox`` (x, y, w, h pixels), ``score``."""
    import tensorflow as tf
    from official.projects.yolo.modeling.layers import detection_generator
    from official.projects.yolo.serving import model_fn

    generator = detection_generator.YoloLayer(
        anchors=ANCHORS, classes=80, iou_thresh=0.001, nms_thresh=0.6, max_boxes=200, pre_nms_points=5000,
        box_type={"4": "original", "5": "original"}, path_scale={"4": 16, "5": 32}, scale_xy={"4": 1.0, "5": 1.0},
        nms_version="greedy",
    )  # fmt: skip
    out: list[dict[str, Any]] = []
    for path in images:
        image = tf.io.decode_image(path.read_bytes(), channels=3, expand_animations=False)
        boxed, info = model_fn.letterbox(tf.cast(image, tf.float32), [size, size])
        raw = model(boxed[None] / 255.0, training=False)
        det = generator(raw)
        n = int(det["num_detections"][0])
        boxes = model_fn.undo_info(det["bbox"][:, :n], n, info).numpy()[0]  # normalised yxyx of the image
        h, w = float(info[0, 0]), float(info[0, 1])
        classes, scores = det["classes"][0, :n].numpy(), det["confidence"][0, :n].numpy()
        for (y0, x0, y1, x1), cls, score in zip(boxes, classes, scores, strict=True):
            out.append({"file": path.name, "class": int(cls), "score": float(score),
                        "bbox": [float(v) for v in (x0 * w, y0 * h, (x1 - x0) * w, (y1 - y0) * h)]})  # fmt: skip
    return out


def coco_ap(annotations: Path, detections: list[dict[str, Any]], files: list[str]) -> dict[str, float]:
    """AP / AP50 of ``detections`` on the images ``files``, by repliscope's COCO evaluation (faster-coco-eval; run
    where repliscope's detection extra is installed, not in the Model Garden's stack)."""
    import json

    from repliscope.metrics.coco import faster_coco_eval
    from repliscope.ops.detection.class_map import COCO80_TO_91

    gt = json.loads(annotations.read_text())
    ids = {img["file_name"]: img["id"] for img in gt["images"]}
    keep = {ids[f] for f in files}
    gt = {**gt, "images": [i for i in gt["images"] if i["id"] in keep],
          "annotations": [a for a in gt["annotations"] if a["image_id"] in keep]}  # fmt: skip
    dets = [{"image_id": ids[d["file"]], "category_id": COCO80_TO_91[d["class"]], "bbox": d["bbox"],
             "score": d["score"]} for d in detections]  # fmt: skip
    stats, _ = faster_coco_eval(gt, dets)
    return {"AP": float(stats[0]), "AP50": float(stats[1])}


if __name__ == "__main__":
    import json

    if sys.argv[1] == "save":  # save CFG WEIGHTS OUT [darknet-bn]
        cfg, weights, out = (Path(a) for a in sys.argv[2:5])
        darknet_bn = sys.argv[5:] == ["darknet-bn"]
        build(cfg, weights, darknet_bn=darknet_bn).save(str(out), include_optimizer=False)  # tf_keras' SavedModel
        print(json.dumps({"saved": str(out)}))
    elif sys.argv[1] == "detect":  # detect CFG WEIGHTS COCO_FOLDER OUT.json [LIMIT]: the Model Garden's detections
        cfg, weights, root, out = (Path(a) for a in sys.argv[2:6])
        limit = int(sys.argv[6]) if len(sys.argv) > 6 else None
        images = sorted((root / "images").glob("*.jpg"))[:limit]
        dets = detect(build(cfg, weights), images)
        out.write_text(json.dumps(dets))
        print(json.dumps({"images": len(images), "detections": len(dets)}))
    else:
        raise SystemExit(
            f"usage: {sys.argv[0]} save CFG WEIGHTS OUT [darknet-bn] | detect CFG WEIGHTS COCO OUT.json [LIMIT]"
        )
