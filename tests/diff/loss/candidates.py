"""Loss candidates of the tests, written independently of repliscope's own code:

- :func:`yolov3_numpy`: YOLOv3's loss in numpy with its gradient derived by hand, the way pjreddie's
  ``forward_yolo_layer`` writes ``delta`` (it must reproduce libdarknet);
- :class:`YoloV3Torch`: the same loss in torch, gradient by autograd, with ONE optional mistake (each a loss
  pitfall the diagnosis must name), e.g. ``YoloV3Torch(reduction="mean")``;
- :func:`raises`, :func:`returns_nan`, :func:`non_scalar_total`, :func:`wrong_gradient_shape`: broken
  candidates the CLI must refuse in one line.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from repliscope.diff.loss.contract import LossInputs, LossResult


def _sig(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _box_iou(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    """box_iou of two (cx, cy, w, h) boxes, one at a time as box.c does."""
    w = min(a[0] + a[2] / 2, b[0] + b[2] / 2) - max(a[0] - a[2] / 2, b[0] - b[2] / 2)
    h = min(a[1] + a[3] / 2, b[1] + b[3] / 2) - max(a[1] - a[3] / 2, b[1] - b[3] / 2)
    inter = w * h if w > 0 and h > 0 else 0.0
    union = a[2] * a[3] + b[2] * b[3] - inter
    return inter / union if union > 0 else 0.0


@dataclass
class _Cell:
    truth: int
    classes: set[int]


def _assignment(
    raw: np.ndarray, boxes: np.ndarray, classes: np.ndarray, mask: list[int], config: Any, k: float = 1.0
) -> tuple[dict[tuple[int, int, int], _Cell], np.ndarray, list[tuple[tuple[int, int, int], int, float]]]:
    """Per image and layer: positives (a, j, i) -> truth and classes; the (A, H, W) best IoU; the pairs."""
    anchors = [tuple(a) for a in config["anchors"]]
    net_w, net_h = config["net_w"], config["net_h"]
    a_n = len(mask)
    c = raw.shape[0] // a_n
    _, h, w = raw.shape
    r = raw.reshape(a_n, c, h, w).astype(np.float64)
    best = np.zeros((a_n, h, w))
    best_t = np.zeros((a_n, h, w), int)
    for a in range(a_n):
        aw, ah = anchors[mask[a]]
        for j in range(h):
            for i in range(w):
                px, py = (k * _sig(r[a, e, j, i]) - (k - 1) / 2 for e in (0, 1))
                pred = ((i + px) / w, (j + py) / h,
                        math.exp(r[a, 2, j, i]) * aw / net_w, math.exp(r[a, 3, j, i]) * ah / net_h)  # fmt: skip
                for t, box in enumerate(boxes):
                    iou = _box_iou(pred, tuple(box))
                    if iou > best[a, j, i]:
                        best[a, j, i], best_t[a, j, i] = iou, t
    cells: dict[tuple[int, int, int], _Cell] = {}
    for a, j, i in zip(*np.nonzero(best > config["truth_thresh"]), strict=True):
        cells[(a, j, i)] = _Cell(int(best_t[a, j, i]), {int(classes[best_t[a, j, i]])})
    pairs = []
    for t, (x, y, bw, bh) in enumerate(boxes):
        ious = [_box_iou((0, 0, aw / net_w, ah / net_h), (0, 0, bw, bh)) for aw, ah in anchors]
        best_n = max(range(len(anchors)), key=lambda n: (ious[n], -n))
        if best_n in mask:
            key = (mask.index(best_n), int(np.float32(y) * np.float32(h)), int(np.float32(x) * np.float32(w)))
            cell = cells.setdefault(key, _Cell(t, set()))
            cell.truth = t
            cell.classes.add(int(classes[t]))
            pairs.append((key, t, 1.0 - ious[best_n]))
    return cells, best, pairs


def _layers(inputs: LossInputs) -> list[tuple[str, list[int], int]]:
    cfg = inputs.config
    return [(name, list(cfg["mask"][name]), int(cfg["classes"])) for name in inputs.outputs]


def yolov3_numpy(inputs: LossInputs) -> LossResult:
    """YOLOv3 (pjreddie Darknet) in numpy: values summed, gradient = -delta derived by hand."""
    cfg = inputs.config
    comps: dict[str, float] = {}
    grads: dict[str, np.ndarray] = {}
    per_image = [0.0] * len(inputs.targets)
    matching: list[list[tuple[int, int, float]]] = [[] for _ in inputs.targets]
    offset = 0
    for name, mask, classes in _layers(inputs):
        raw = inputs.outputs[name].astype(np.float64)
        n_img, ch, h, w = raw.shape
        a_n = len(mask)
        grad = np.zeros((n_img, a_n, 5 + classes, h, w))
        parts = dict.fromkeys(("box", "objectness", "no_object", "class"), 0.0)
        for n, tg in enumerate(inputs.targets):
            r = raw[n].reshape(a_n, 5 + classes, h, w)
            p = _sig(r)
            cells, best, pairs = _assignment(raw[n], tg.boxes.astype(np.float64), tg.classes, mask, cfg)
            matching[n] += [(offset + a * h * w + j * w + i, t, cost) for (a, j, i), t, cost in pairs]
            neg = (best <= cfg["ignore_thresh"]).copy()
            for key in cells:
                neg[key] = False
            image = float(np.logaddexp(0, r[:, 4][neg]).sum())
            parts["no_object"] += image
            grad[n, :, 4][neg] = p[:, 4][neg]
            for (a, j, i), cell in cells.items():
                x, y, bw, bh = (float(v) for v in tg.boxes[cell.truth])
                s = 2 - bw * bh
                aw, ah = cfg["anchors"][mask[a]]
                t = (x * w - i, y * h - j, math.log(bw * cfg["net_w"] / aw), math.log(bh * cfg["net_h"] / ah))
                rr = r[a, :, j, i]
                box = s * (np.logaddexp(0, rr[0]) - t[0] * rr[0] + np.logaddexp(0, rr[1]) - t[1] * rr[1])
                box += s * 0.5 * ((t[2] - rr[2]) ** 2 + (t[3] - rr[3]) ** 2)
                grad[n, a, 0:4, j, i] = [s * (_sig(rr[0]) - t[0]), s * (_sig(rr[1]) - t[1]),
                                         s * (rr[2] - t[2]), s * (rr[3] - t[3])]  # fmt: skip
                obj = float(np.logaddexp(0, -rr[4]))
                grad[n, a, 4, j, i] = _sig(rr[4]) - 1
                target = np.zeros(classes)
                target[sorted(cell.classes)] = 1
                cls = float((np.logaddexp(0, rr[5:]) - target * rr[5:]).sum())
                grad[n, a, 5:, j, i] = _sig(rr[5:]) - target
                parts["box"] += box
                parts["objectness"] += obj
                parts["class"] += cls
                image += box + obj + cls
            per_image[n] += image
        grads[name] = grad.reshape(n_img, ch, h, w).astype(np.float32)
        offset += a_n * h * w
        comps.update({f"{name}/{k}": v for k, v in parts.items()})
    pairs_out = tuple(tuple(m) for m in matching)
    return LossResult(sum(comps.values()), comps, grads, pairs_out, tuple(per_image), ("numpy, gradient by hand",))


@dataclass(frozen=True)
class YoloV3Torch:
    """YOLOv3's loss in torch (autograd) with at most one mistake (each field's default is Darknet's)."""

    reduction: str = "sum"
    normaliser: str = "none"
    scale_x_y: float = 1.0
    box: str = "mse"
    ignore: bool = True
    objectness_target: str = "one"
    class_loss: str = "bce"
    focal: tuple[float, float] | None = None
    noobj_weight: float = 1.0
    dtype: str = "float64"
    """Not a mistake: the precision the loss is computed in (``float32`` as most training code)."""

    def __call__(self, inputs: LossInputs) -> LossResult:
        import torch

        ftype = getattr(torch, self.dtype)

        cfg = inputs.config
        comps: dict[str, Any] = {}
        tensors = {k: torch.tensor(v, dtype=ftype, requires_grad=True) for k, v in inputs.outputs.items()}
        predictions = 0
        sp = torch.nn.functional.softplus
        for name, mask, classes in _layers(inputs):
            raw = tensors[name]
            n_img, _, h, w = raw.shape
            a_n = len(mask)
            predictions += a_n * h * w
            r = raw.reshape(n_img, a_n, 5 + classes, h, w)
            sums = {k: raw.new_zeros(()) for k in ("box", "objectness", "no_object", "class")}
            counts = dict.fromkeys(sums, 0)
            k = self.scale_x_y
            for n, tg in enumerate(inputs.targets):
                cells, best, _ = _assignment(
                    inputs.outputs[name][n], tg.boxes.astype(np.float64), tg.classes, mask, cfg, k
                )
                neg = np.ones((a_n, h, w), bool) if not self.ignore else best <= cfg["ignore_thresh"]
                for key in cells:
                    neg[key] = False
                sums["no_object"] = sums["no_object"] + self.noobj_weight * sp(r[n, :, 4][torch.from_numpy(neg)]).sum()
                counts["no_object"] += int(neg.sum())
                for (a, j, i), cell in cells.items():
                    x, y, bw, bh = (float(v) for v in tg.boxes[cell.truth])
                    aw, ah = cfg["anchors"][mask[a]]
                    rr = r[n, a, :, j, i]
                    px = (i + k * torch.sigmoid(rr[0]) - (k - 1) / 2) / w
                    py = (j + k * torch.sigmoid(rr[1]) - (k - 1) / 2) / h
                    pw = torch.exp(rr[2]) * aw / cfg["net_w"]
                    ph = torch.exp(rr[3]) * ah / cfg["net_h"]
                    iou = _torch_iou(px, py, pw, ph, (x, y, bw, bh), self.box if self.box != "mse" else "iou")
                    if self.box == "mse":
                        s = 2 - bw * bh
                        tx, ty = x * w - i, y * h - j
                        tw, th = math.log(bw * cfg["net_w"] / aw), math.log(bh * cfg["net_h"] / ah)
                        xy = k * sp(rr[0]) - (tx + (k - 1) / 2) * rr[0] + k * sp(rr[1]) - (ty + (k - 1) / 2) * rr[1]
                        sums["box"] = sums["box"] + s * (xy + 0.5 * (tw - rr[2]) ** 2 + 0.5 * (th - rr[3]) ** 2)
                        counts["box"] += 4
                    else:
                        sums["box"] = sums["box"] + (1 - iou)
                        counts["box"] += 1
                    obj_t = 1.0 if self.objectness_target == "one" else iou.detach()
                    sums["objectness"] = sums["objectness"] + sp(rr[4]) - obj_t * rr[4]
                    counts["objectness"] += 1
                    t = torch.zeros(classes, dtype=ftype)
                    t[sorted(cell.classes)] = 1
                    logits = rr[5:]
                    if self.class_loss == "softmax_ce":
                        sums["class"] = sums["class"] - (t * torch.log_softmax(logits, 0)).sum()
                        counts["class"] += 1
                    else:
                        bce = sp(logits) - t * logits
                        if self.focal is not None:
                            alpha, gamma = self.focal
                            prob = torch.sigmoid(logits)
                            p_t = torch.where(t > 0, prob, 1 - prob)
                            a_t = torch.where(t > 0, alpha, 1 - alpha)
                            bce = a_t * (1 - p_t) ** gamma * bce
                        sums["class"] = sums["class"] + bce.sum()
                        counts["class"] += classes
            for part, value in sums.items():
                if self.reduction == "mean":
                    value = value / counts[part] if counts[part] else value * 0
                comps[f"{name}/{part}"] = value
        divisor = {
            "none": 1.0,
            "image": len(inputs.targets),
            "box": max(1, sum(len(t.boxes) for t in inputs.targets)),
            "anchor": len(inputs.targets) * predictions,
        }[self.normaliser]
        comps = {key: v / divisor for key, v in comps.items()}
        total = sum(comps.values())
        total.backward()
        total = total.detach()
        grads = {k: v.grad.numpy().astype(np.float32) for k, v in tensors.items()}  # type: ignore[union-attr]
        return LossResult(float(total), {k: float(v.detach()) for k, v in comps.items()}, grads, None, None, ("torch",))


def _torch_iou(px: Any, py: Any, pw: Any, ph: Any, truth: tuple[float, ...], kind: str) -> Any:
    import torch

    x, y, w, h = truth
    iw = torch.minimum(px + pw / 2, torch.tensor(x + w / 2)) - torch.maximum(px - pw / 2, torch.tensor(x - w / 2))
    ih = torch.minimum(py + ph / 2, torch.tensor(y + h / 2)) - torch.maximum(py - ph / 2, torch.tensor(y - h / 2))
    inter = torch.clamp(iw, min=0) * torch.clamp(ih, min=0)
    union = pw * ph + w * h - inter
    iou = inter / union
    if kind == "iou":
        return iou
    cw = torch.maximum(px + pw / 2, torch.tensor(x + w / 2)) - torch.minimum(px - pw / 2, torch.tensor(x - w / 2))
    ch = torch.maximum(py + ph / 2, torch.tensor(y + h / 2)) - torch.minimum(py - ph / 2, torch.tensor(y - h / 2))
    if kind == "giou":
        return iou - (cw * ch - union) / (cw * ch)
    dist = (px - x) ** 2 + (py - y) ** 2
    v = (4 / math.pi**2) * (math.atan(w / h) - torch.atan(pw / ph)) ** 2
    alpha = (v / (1 - iou + v)).detach()
    return iou - dist / (cw**2 + ch**2) - alpha * v


def xy_gradient_through_the_logistic(inputs: LossInputs) -> LossResult:
    """Darknet's values, but the x, y gradient multiplied by the logistic's derivative p(1 - p): the chain rule of an
    MSE on sigmoid(x) applied to Darknet's BCE form (a hand-written gradient mistake the values cannot show)."""
    result = yolov3_numpy(inputs)
    for name in result.gradients:
        g = result.gradients[name].astype(np.float64)
        n, ch, h, w = g.shape
        per = g.reshape(n, -1, ch // len(inputs.config["mask"][name]), h, w)
        raw = inputs.outputs[name].astype(np.float64).reshape(per.shape)
        p = _sig(raw[:, :, 0:2])
        per[:, :, 0:2] *= p * (1 - p)
        result.gradients[name] = per.reshape(g.shape).astype(np.float32)
    return result


def raises(inputs: LossInputs) -> LossResult:
    raise RuntimeError("CUDA out of memory (this candidate always fails)")


def returns_nan(inputs: LossInputs) -> LossResult:
    result = yolov3_numpy(inputs)
    result.total = float("nan")
    return result


def non_scalar_total(inputs: LossInputs) -> LossResult:
    result = yolov3_numpy(inputs)
    result.total = np.array([result.total, result.total])  # type: ignore[assignment]
    return result


def wrong_gradient_shape(inputs: LossInputs) -> LossResult:
    result = yolov3_numpy(inputs)
    name = next(iter(result.gradients))
    result.gradients[name] = result.gradients[name][:, :-1]
    return result


mean_reduction = YoloV3Torch(reduction="mean")
"""``module:NAME`` of a one-mistake candidate for the CLI tests."""
not_callable = 42
