"""The loss pitfalls of the MaskFormer family (original ``maskformer``), and the numpy form of MaskFormer's loss
they are variants of.

:class:`MaskFormerForm` is transformers' ``MaskFormerLoss`` written in numpy (scipy's ``linear_sum_assignment`` on
the rectangular cost, as the original's matcher): with its defaults it gives the original's components, matching and
total (pinned against transformers itself in tests/diff/loss/originals/test_maskformer.py). Each pitfall changes one
field:

- ``square_matcher_zero_padding``: the cost matrix padded to square with 0 instead of the highest cost and solved
  by a greedy matcher (the cheapest remaining pair first: an accelerator's fixed-shape loop). With an exact solver
  the pad value cannot change the matching (a padded column costs the same whatever row takes it); with the greedy
  one the zeros are handed out first whenever the real costs are positive, and the targets get the leftovers;
- ``no_object_weight``: the no-object class weighted 1 (or another value) instead of ``eos_coef`` (0.1);
- ``dice_smoothing``: dice's +1 smoothing (numerator and denominator) changed or dropped;
- ``padded_pixels_not_masked``: the mask losses taken over a canvas padded by N pixels (bottom and right; the
  network's logit there 0), the padded pixels counted instead of masked out.

The form needs the target masks at the mask logits' size (transformers resizes them otherwise); other inputs make
``form_values`` raise ValueError, and the diagnosis skips the variant.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

import numpy as np
from scipy.optimize import linear_sum_assignment

from repliscope.diff.loss.contract import LossInputs
from repliscope.diff.loss.pitfalls import LOSS_PITFALLS, LossPitfall


@dataclass(frozen=True)
class MaskFormerForm:
    """How a MaskFormer loss is computed; the defaults are the original's (transformers' MaskFormerLoss)."""

    eos_coef: float | None = None
    """The no-object class weight; None: the config's ``eos_coef``."""
    dice_smooth: float = 1.0
    pad: Literal["max", "zero"] = "max"
    """What the square cost matrix is padded with (only matters to the greedy matcher)."""
    matcher: Literal["exact", "greedy"] = "exact"
    canvas_pad: int = 0
    """Pixels added at the bottom and the right of every mask (logit 0, target 0)."""
    mask_padding: bool = True
    """Whether the padded pixels are masked out of the mask losses."""
    alpha: float = 0.25
    gamma: float = 2.0


MASKFORMER = MaskFormerForm()


def greedy_match(cost: np.ndarray) -> list[tuple[int, int]]:
    """(row, column) pairs of a square ``cost``: the cheapest remaining entry first (row-major order on ties)."""
    left = cost.astype(np.float64).copy()
    pairs = []
    for _ in range(min(cost.shape)):
        r, c = np.unravel_index(int(np.argmin(left)), left.shape)
        pairs.append((int(r), int(c)))
        left[r, :] = np.inf
        left[:, c] = np.inf
    return pairs


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return np.asarray(1.0 / (1.0 + np.exp(-x)))


def _bce_logits(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.asarray(np.maximum(x, 0) - x * y + np.log1p(np.exp(-np.abs(x))))


def form_values(inputs: LossInputs, form: MaskFormerForm) -> dict[str, float]:
    """``total``, ``loss_ce``, ``loss_mask`` and ``loss_dice`` of ``inputs`` computed the ``form`` way (float64)."""
    config = inputs.config
    weights = {k: float(v) for k, v in config["weights"].items()}
    num_classes = int(config["num_classes"])
    eos = float(config["eos_coef"]) if form.eos_coef is None else form.eos_coef
    class_all = np.asarray(inputs.outputs["class_logits"], dtype=np.float64)
    mask_all = np.asarray(inputs.outputs["mask_logits"], dtype=np.float64)
    queries = class_all.shape[1]
    num_masks = max(sum(len(t.classes) for t in inputs.targets), 1)
    ce_num = ce_den = focal = dice = 0.0
    for b, target in enumerate(inputs.targets):
        if target.masks is None:
            raise ValueError(f"image '{target.image_id}' has no masks")
        if target.masks.shape[1:] != mask_all.shape[2:]:
            raise ValueError(
                f"image '{target.image_id}': masks {target.masks.shape[1:]} != logits {mask_all.shape[2:]}"
            )
        labels = np.asarray(target.classes, dtype=np.int64)
        logits, masks = mask_all[b], np.asarray(target.masks, dtype=np.float64)
        valid = np.ones(logits.shape[1:])
        if form.canvas_pad:
            pad = ((0, 0), (0, form.canvas_pad), (0, form.canvas_pad))
            logits, masks, valid = np.pad(logits, pad), np.pad(masks, pad), np.pad(valid, pad[1:])
        if not form.mask_padding:
            valid = np.ones_like(valid)
        x = logits.reshape(queries, -1)
        y = masks.reshape(len(labels), -1)
        v = valid.reshape(1, -1)
        pixels = float(v.sum())
        p = _sigmoid(x) * v
        pos = form.alpha * (1 - _sigmoid(x)) ** form.gamma * _bce_logits(x, np.ones_like(x)) * v
        neg = (1 - form.alpha) * _sigmoid(x) ** form.gamma * _bce_logits(x, np.zeros_like(x)) * v
        pair_focal = (pos @ y.T + neg @ (1 - y).T) / pixels
        pair_dice = 1 - (2 * p @ y.T + form.dice_smooth) / (p.sum(-1)[:, None] + y.sum(-1)[None, :] + form.dice_smooth)
        shifted = class_all[b] - class_all[b].max(-1, keepdims=True)
        log_softmax = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
        cost = weights["loss_mask"] * pair_focal - np.exp(log_softmax)[:, labels] + weights["loss_dice"] * pair_dice
        if form.matcher == "exact":
            rows, cols = linear_sum_assignment(cost)
            pairs = list(zip(rows.tolist(), cols.tolist(), strict=True))
        else:
            side = max(queries, len(labels))
            square = np.full((side, side), 0.0 if form.pad == "zero" else float(cost.max(initial=0.0)))
            square[:queries, : len(labels)] = cost
            pairs = [(r, c) for r, c in greedy_match(square) if r < queries and c < len(labels)]
        target_classes = np.full(queries, num_classes)
        for r, c in pairs:
            target_classes[r] = labels[c]
        weight = np.where(target_classes == num_classes, eos, 1.0)
        ce_num += float((-log_softmax[np.arange(queries), target_classes] * weight).sum())
        ce_den += float(weight.sum())
        for r, c in pairs:
            focal += float((pos[r] * y[c] + neg[r] * (1 - y[c])).sum() / pixels)
            dice += float(
                1 - (2 * (p[r] * y[c]).sum() + form.dice_smooth) / (p[r].sum() + y[c].sum() + form.dice_smooth)
            )
    components = {"loss_ce": ce_num / ce_den, "loss_mask": focal / num_masks, "loss_dice": dice / num_masks}
    return {"total": sum(weights[k] * v for k, v in components.items()), **components}


def _add(name: str, description: str, *variants: tuple[str, MaskFormerForm]) -> None:
    LOSS_PITFALLS.add(name, LossPitfall(name, "maskformer", description, tuple(variants), form_values))


_add(
    "square_matcher_zero_padding",
    "the cost matrix padded to square with 0 instead of the highest cost and solved greedily (paper 003): the "
    "zeros are matched first and the targets get the predictions left over",
    ("square cost padded with 0, greedy matcher", replace(MASKFORMER, pad="zero", matcher="greedy")),
)
_add(
    "no_object_weight",
    "the no-object class weighted otherwise than eos_coef (MaskFormer: 0.1) in the classification loss",
    *((f"no-object weight {w:g}", replace(MASKFORMER, eos_coef=w)) for w in (1.0, 0.5, 0.0)),
)
_add(
    "dice_smoothing",
    "dice without MaskFormer's +1 smoothing, or with another constant: 1 - (2 x.y + s) / (x + y + s)",
    *((f"dice smoothing {s:g}", replace(MASKFORMER, dice_smooth=s)) for s in (0.0, 0.5, 2.0)),
)
_add(
    "padded_pixels_not_masked",
    "focal and dice taken over a canvas padded to a fixed size (a TPU pipeline's), its padded pixels counted as "
    "background instead of masked out",
    *(
        (f"{n} padded pixels at the bottom and right counted", replace(MASKFORMER, canvas_pad=n, mask_padding=False))
        for n in (4, 8, 16, 32)
    ),
)
