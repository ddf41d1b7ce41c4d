"""The YOLOv3 loss in Darknet's form, in numpy: the assignment ``forward_yolo_layer`` makes and the loss VALUES
whose gradient is Darknet's ``delta`` (negated), with one knob per classic mistake (:class:`YoloForm`).

Darknet never computes a loss value: ``forward_yolo_layer`` writes ``l.delta`` (the negative gradient with respect
to the raw outputs) and ``*l.cost = |delta|^2``. The loss this module evaluates is the one whose gradient is
``-delta`` (pjreddie's darknet, 2018, src/yolo_layer.c), per image and yolo layer, summed (Darknet never
normalises):

- box, at each assigned (anchor, cell) with its truth ``(x, y, w, h)`` and ``s = 2 - w*h``:
  ``s * [BCE(sigmoid(rx), tx) + BCE(sigmoid(ry), ty) + (tw - rw)^2 / 2 + (th - rh)^2 / 2]`` with
  ``tx = x*W - i``, ``tw = log(w * net_w / anchor_w)`` (``delta_yolo_box``: ``s * (tx - sigmoid(rx))``,
  ``s * (tw - rw)``);
- objectness at the assigned cells: ``BCE(sigmoid(ro), 1)``; no-object elsewhere, except where the prediction's
  best IoU with any truth exceeds ``ignore_thresh``: ``BCE(sigmoid(ro), 0)``;
- class at the assigned cells: ``sum_c BCE(sigmoid(rc), t_c)``, ``t`` the union of the classes of the truths
  assigned there (``delta_yolo_class``).

BCE is written ``softplus(r) - t*r`` (``BCE(sigmoid(r), t)``, exact for soft targets). A scaled sigmoid
``k*sigmoid - (k-1)/2`` (``scale_x_y`` of later Darknets, whose delta is ``s * (t - q)`` without the chain rule
factor) has the loss ``s * [k*softplus(r) - (t + (k-1)/2) * r]``, which is BCE at ``k = 1``.

The assignment (per image and layer): each truth takes the anchor (over ALL the cfg's anchors) whose centred box
has the best IoU with it (first on ties), in the cell ``(int(x*W), int(y*H))``, when that anchor is in the layer's
mask; a later truth in the same anchor and cell replaces the box target and adds its class. A prediction whose
best IoU exceeds ``truth_thresh`` is also assigned (to its best truth) before that.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from repliscope.diff.loss.contract import ImageTargets, LossInputs

Reduction = Literal["sum", "mean"]
Normaliser = Literal["none", "image", "box", "anchor"]
BoxLoss = Literal["mse", "iou", "giou", "ciou"]


@dataclass(frozen=True)
class YoloForm:
    """How a YOLOv3 loss is written: Darknet's is the default; each other value is one classic mistake."""

    reduction: Reduction = "sum"
    """``mean``: each component averaged over its own terms (torch's ``reduction='mean'``)."""
    normaliser: Normaliser = "none"
    """Every component divided by the batch's images, truths or predictions (anchor slots)."""
    scale_x_y: float = 1.0
    box: BoxLoss = "mse"
    ignore: bool = True
    objectness_target: Literal["one", "iou"] = "one"
    class_loss: Literal["bce", "softmax_ce"] = "bce"
    focal: tuple[float, float] | None = None
    """(alpha, gamma) of a focal class loss."""
    noobj_weight: float = 1.0


DARKNET = YoloForm()


@dataclass(frozen=True)
class YoloLayerConfig:
    """One yolo layer's loss settings, from the Darknet cfg (the contract's ``config``)."""

    name: str
    anchors: tuple[tuple[float, float], ...]
    mask: tuple[int, ...]
    classes: int
    ignore_thresh: float
    truth_thresh: float
    net_w: int
    net_h: int


REQUIRED_KEYS = ("anchors", "mask", "classes", "ignore_thresh", "truth_thresh", "net_w", "net_h")


def layer_configs(inputs: LossInputs) -> list[YoloLayerConfig]:
    """The yolo layers of ``inputs`` (its ``outputs`` order) with their settings; ValueError naming the key or
    the layer when the config or a tensor's shape does not fit."""
    config: Mapping[str, Any] = inputs.config
    missing = [k for k in REQUIRED_KEYS if k not in config]
    if missing:
        raise ValueError(f"yolo loss config: missing {', '.join(missing)} (needs {', '.join(REQUIRED_KEYS)})")
    anchors = tuple((float(a[0]), float(a[1])) for a in config["anchors"])
    masks = config["mask"]
    out = []
    for name, tensor in inputs.outputs.items():
        if name not in masks:
            raise ValueError(f"yolo loss config: no mask for output '{name}' (masks: {', '.join(masks)})")
        mask = tuple(int(m) for m in masks[name])
        if any(not 0 <= m < len(anchors) for m in mask):
            raise ValueError(f"yolo loss config: mask of '{name}' {list(mask)} indexes {len(anchors)} anchors")
        classes = int(config["classes"])
        want = len(mask) * (5 + classes)
        if tensor.ndim != 4 or tensor.shape[1] != want:
            raise ValueError(
                f"output '{name}': shape {tuple(tensor.shape)}, expected (N, {want}, H, W) = (N, len(mask) "
                f"{len(mask)} x (5 + classes {classes}), H, W)"
            )
        out.append(
            YoloLayerConfig(
                name,
                anchors,
                mask,
                classes,
                float(config["ignore_thresh"]),
                float(config["truth_thresh"]),
                int(config["net_w"]),
                int(config["net_h"]),
            )
        )
    return out


def softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(0.0, x)


def sigmoid(x: np.ndarray) -> np.ndarray:
    out: np.ndarray = 0.5 * (1.0 + np.tanh(0.5 * x))
    return out


def _iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of cx, cy, w, h boxes broadcast against each other (``box_iou``)."""
    ax0, ax1 = a[..., 0] - a[..., 2] / 2, a[..., 0] + a[..., 2] / 2
    ay0, ay1 = a[..., 1] - a[..., 3] / 2, a[..., 1] + a[..., 3] / 2
    bx0, bx1 = b[..., 0] - b[..., 2] / 2, b[..., 0] + b[..., 2] / 2
    by0, by1 = b[..., 1] - b[..., 3] / 2, b[..., 1] + b[..., 3] / 2
    iw = np.minimum(ax1, bx1) - np.maximum(ax0, bx0)
    ih = np.minimum(ay1, by1) - np.maximum(ay0, by0)
    inter = np.where((iw > 0) & (ih > 0), iw * ih, 0.0)
    union = a[..., 2] * a[..., 3] + b[..., 2] * b[..., 3] - inter
    out: np.ndarray = np.where(union > 0, inter / np.where(union > 0, union, 1.0), 0.0)
    return out


def box_iou_kind(pred: np.ndarray, truth: np.ndarray, kind: str) -> np.ndarray:
    """IoU, GIoU or CIoU of matching rows of two (K, 4) cx, cy, w, h arrays."""
    iou = _iou(pred, truth)
    if kind == "iou":
        return iou
    px0, px1 = pred[:, 0] - pred[:, 2] / 2, pred[:, 0] + pred[:, 2] / 2
    py0, py1 = pred[:, 1] - pred[:, 3] / 2, pred[:, 1] + pred[:, 3] / 2
    tx0, tx1 = truth[:, 0] - truth[:, 2] / 2, truth[:, 0] + truth[:, 2] / 2
    ty0, ty1 = truth[:, 1] - truth[:, 3] / 2, truth[:, 1] + truth[:, 3] / 2
    cw = np.maximum(px1, tx1) - np.minimum(px0, tx0)
    ch = np.maximum(py1, ty1) - np.minimum(py0, ty0)
    if kind == "giou":
        hull = cw * ch
        inter_union = pred[:, 2] * pred[:, 3] + truth[:, 2] * truth[:, 3]
        union = inter_union / (1 + iou)  # inter = iou * union, union = a + b - inter
        out: np.ndarray = iou - (hull - union) / hull
        return out
    diag = cw**2 + ch**2
    dist = (pred[:, 0] - truth[:, 0]) ** 2 + (pred[:, 1] - truth[:, 1]) ** 2
    v = (4 / math.pi**2) * (np.arctan(truth[:, 2] / truth[:, 3]) - np.arctan(pred[:, 2] / pred[:, 3])) ** 2
    alpha = v / np.maximum(1 - iou + v, 1e-12)
    out = iou - dist / diag - alpha * v
    return out


@dataclass
class LayerAssignment:
    """Darknet's assignment in one yolo layer of one image."""

    truth_of: dict[tuple[int, int, int], int] = field(default_factory=dict)
    """(anchor, j, i) -> the truth whose box is the target (the last one assigned there)."""
    classes_of: dict[tuple[int, int, int], set[int]] = field(default_factory=dict)
    pairs: list[tuple[tuple[int, int, int], int, float]] = field(default_factory=list)
    """Every (position, truth, 1 - anchor IoU) the matching made, in truth order."""
    ignored: np.ndarray | None = None
    """(A, H, W) bool: best IoU with any truth above ignore_thresh."""
    best_iou: np.ndarray | None = None


def pred_boxes(raw: np.ndarray, cfg: YoloLayerConfig, scale_x_y: float = 1.0) -> np.ndarray:
    """(A, H, W, 4) cx, cy, w, h of the predictions of one image's raw (A*(5+C), H, W) tensor (``get_yolo_box``)."""
    a_n = len(cfg.mask)
    _, h, w = raw.shape
    r = raw.reshape(a_n, 5 + cfg.classes, h, w).astype(np.float64)
    px = scale_x_y * sigmoid(r[:, 0]) - (scale_x_y - 1) / 2
    py = scale_x_y * sigmoid(r[:, 1]) - (scale_x_y - 1) / 2
    ii = np.arange(w)[None, None, :]
    jj = np.arange(h)[None, :, None]
    aw = np.array([cfg.anchors[m][0] for m in cfg.mask])[:, None, None]
    ah = np.array([cfg.anchors[m][1] for m in cfg.mask])[:, None, None]
    return np.stack(
        [(ii + px) / w, (jj + py) / h, np.exp(r[:, 2]) * aw / cfg.net_w, np.exp(r[:, 3]) * ah / cfg.net_h], -1
    )


def assign(raw: np.ndarray, target: ImageTargets, cfg: YoloLayerConfig, scale_x_y: float = 1.0) -> LayerAssignment:
    """``forward_yolo_layer``'s assignment for one image (``raw``: (A*(5+C), H, W))."""
    _, h, w = raw.shape
    boxes = np.asarray(target.boxes, np.float64).reshape(-1, 4)
    classes = np.asarray(target.classes).reshape(-1)
    out = LayerAssignment()
    preds = pred_boxes(raw, cfg, scale_x_y)
    if len(boxes):
        ious = _iou(preds[:, :, :, None, :], boxes[None, None, None, :, :])  # (A, H, W, K)
        best = ious.max(-1)
        best_t = ious.argmax(-1)
    else:
        best = np.zeros(preds.shape[:3])
        best_t = np.zeros(preds.shape[:3], np.int64)
    out.best_iou, out.ignored = best, best > cfg.ignore_thresh
    for pos in zip(*np.nonzero(best > cfg.truth_thresh), strict=True):
        key = (int(pos[0]), int(pos[1]), int(pos[2]))
        t = int(best_t[key])
        out.truth_of[key] = t
        out.classes_of[key] = {int(classes[t])}
    anchors = np.array(cfg.anchors, np.float64)
    for t, (x, y, bw, bh) in enumerate(boxes):
        shapes = np.column_stack([np.zeros(len(anchors)), np.zeros(len(anchors)), anchors[:, 0] / cfg.net_w,
                                  anchors[:, 1] / cfg.net_h])  # fmt: skip
        anchor_iou = _iou(shapes, np.array([0.0, 0.0, bw, bh])[None, :])
        best_n = int(np.argmax(anchor_iou)) if anchor_iou.max() > 0 else 0
        if best_n not in cfg.mask:
            continue
        key = (cfg.mask.index(best_n), int(np.float32(y) * np.float32(h)), int(np.float32(x) * np.float32(w)))
        out.truth_of[key] = t
        out.classes_of.setdefault(key, set()).add(int(classes[t]))
        out.pairs.append((key, t, float(1.0 - anchor_iou[best_n])))
    return out


@dataclass
class FormValues:
    """Loss values of one batch: per component name (``yolo_16/box``...) and per image (sum form)."""

    components: dict[str, float]
    per_image: list[float]
    matching: list[list[tuple[int, int, float]]]


def _bce(r: np.ndarray, t: np.ndarray | float) -> np.ndarray:
    out: np.ndarray = softplus(r) - t * r
    return out


def layer_values(
    raw: np.ndarray,
    target: ImageTargets,
    cfg: YoloLayerConfig,
    form: YoloForm,
    assignment: LayerAssignment,
    positive_classes: dict[tuple[int, int, int], set[int]] | None = None,
    noobj: np.ndarray | None = None,
) -> tuple[dict[str, float], dict[str, int]]:
    """One image's summed component values in one layer and the term counts (for ``mean``).

    ``noobj``: the (A, H, W) no-object mask to use (default: not assigned and, with ``form.ignore``, not
    ignored); ``positive_classes``: the class targets per position (default: the assignment's)."""
    a_n = len(cfg.mask)
    _, h, w = raw.shape
    r = raw.reshape(a_n, 5 + cfg.classes, h, w).astype(np.float64)
    boxes = np.asarray(target.boxes, np.float64).reshape(-1, 4)
    classes_of = assignment.classes_of if positive_classes is None else positive_classes
    keys = sorted(assignment.truth_of)
    pos = np.zeros((a_n, h, w), bool)
    for key in keys:
        pos[key] = True
    values = {"box": 0.0, "objectness": 0.0, "no_object": 0.0, "class": 0.0}
    counts = {"box": 0, "objectness": 0, "no_object": 0, "class": 0}
    if noobj is None:
        noobj = ~pos & ~assignment.ignored if form.ignore else ~pos  # type: ignore[operator]
    values["no_object"] = form.noobj_weight * float(softplus(r[:, 4][noobj]).sum())
    counts["no_object"] = int(noobj.sum())
    if not keys:
        return values, counts
    idx = tuple(np.array(k) for k in zip(*keys, strict=True))
    truths = boxes[[assignment.truth_of[k] for k in keys]]
    k = form.scale_x_y
    preds = pred_boxes(raw, cfg, k)[idx]
    if form.box == "mse":
        s = 2.0 - truths[:, 2] * truths[:, 3]
        tx = truths[:, 0] * w - idx[2]
        ty = truths[:, 1] * h - idx[1]
        anchors = np.array([cfg.anchors[cfg.mask[a]] for a in idx[0]])
        tw = np.log(truths[:, 2] * cfg.net_w / anchors[:, 0])
        th = np.log(truths[:, 3] * cfg.net_h / anchors[:, 1])
        rx, ry, rw, rh = (r[:, c][idx] for c in range(4))
        xy = k * softplus(rx) - (tx + (k - 1) / 2) * rx + k * softplus(ry) - (ty + (k - 1) / 2) * ry
        values["box"] = float((s * (xy + 0.5 * (tw - rw) ** 2 + 0.5 * (th - rh) ** 2)).sum())
        counts["box"] = 4 * len(keys)
    else:
        values["box"] = float((1.0 - box_iou_kind(preds, truths, form.box)).sum())
        counts["box"] = len(keys)
    ro = r[:, 4][idx]
    obj_t = 1.0 if form.objectness_target == "one" else _iou(preds, truths)
    values["objectness"] = float(_bce(ro, obj_t).sum())
    counts["objectness"] = len(keys)
    rc = r[:, 5:].transpose(0, 2, 3, 1)[idx]  # (P, C)
    t = np.zeros_like(rc)
    for row, key in enumerate(keys):
        t[row, sorted(classes_of.get(key, set()))] = 1.0
    if form.class_loss == "softmax_ce":
        logp = rc - np.logaddexp.reduce(rc, axis=1, keepdims=True)
        values["class"] = float(-(t * logp).sum())
        counts["class"] = len(keys)
    else:
        bce = _bce(rc, t)
        if form.focal is not None:
            alpha, gamma = form.focal
            p = sigmoid(rc)
            p_t = np.where(t > 0, p, 1 - p)
            bce = np.where(t > 0, alpha, 1 - alpha) * (1 - p_t) ** gamma * bce
        values["class"] = float(bce.sum())
        counts["class"] = rc.size
    return values, counts


def form_values(inputs: LossInputs, form: YoloForm = DARKNET) -> FormValues:
    """The batch's component values of the loss written as ``form`` (Darknet's by default)."""
    cfgs = layer_configs(inputs)
    comps: dict[str, float] = {}
    per_image = [0.0] * len(inputs.targets)
    matching: list[list[tuple[int, int, float]]] = [[] for _ in inputs.targets]
    predictions = sum(len(c.mask) * int(np.prod(inputs.outputs[c.name].shape[2:])) for c in cfgs)
    offset = 0
    for cfg in cfgs:
        tensor = inputs.outputs[cfg.name]
        totals = {"box": 0.0, "objectness": 0.0, "no_object": 0.0, "class": 0.0}
        counts = dict.fromkeys(totals, 0)
        h, w = tensor.shape[2:]
        for n, target in enumerate(inputs.targets):
            assignment = assign(tensor[n], target, cfg, form.scale_x_y)
            values, count = layer_values(tensor[n], target, cfg, form, assignment)
            for key in totals:
                totals[key] += values[key]
                counts[key] += count[key]
            per_image[n] += sum(values.values())
            matching[n] += [(offset + a * h * w + j * w + i, t, c) for (a, j, i), t, c in assignment.pairs]
        offset += len(cfg.mask) * h * w
        for key, value in totals.items():
            if form.reduction == "mean":
                value = value / counts[key] if counts[key] else 0.0
            comps[f"{cfg.name}/{key}"] = value
    divisor = {
        "none": 1.0,
        "image": float(len(inputs.targets)),
        "box": float(max(1, sum(len(t.boxes) for t in inputs.targets))),
        "anchor": float(len(inputs.targets) * predictions),
    }[form.normaliser]
    comps = {k: v / divisor for k, v in comps.items()}
    return FormValues(comps, per_image, matching)


def describe_form(form: YoloForm) -> str:
    """The differences of ``form`` from Darknet's, in words."""
    base = DARKNET
    parts = [
        f"{name}: {getattr(base, name)!r} -> {getattr(form, name)!r}"
        for name in YoloForm.__dataclass_fields__
        if getattr(form, name) != getattr(base, name)
    ]
    return "; ".join(parts) or "Darknet's own form"


def truths_array(target: ImageTargets) -> Sequence[tuple[float, float, float, float, int]]:
    """``target`` as Darknet's truth rows (x, y, w, h, class)."""
    boxes = np.asarray(target.boxes, np.float32).reshape(-1, 4)
    classes = np.asarray(target.classes).reshape(-1)
    return [(float(b[0]), float(b[1]), float(b[2]), float(b[3]), int(c)) for b, c in zip(boxes, classes, strict=True)]
