"""A TensorFlow MaskFormer loss written the way a TPU port (paper 003, §4.3) writes it, as a loss-diff candidate.

Every image's cost matrix (Q predictions x K targets: ``cost_mask`` x focal + ``cost_class`` x (-softmax prob) +
``cost_dice`` x dice, as the original's matcher) is padded to SQUARE (Q x Q) and solved with a greedy matcher that
takes the cheapest remaining pair first (a fixed-shape loop an accelerator runs, instead of scipy's
``linear_sum_assignment`` on the host). Predictions left on a padded column are no-object. Then softmax CE over every
query (no-object weighted by ``eos_coef``; weighted mean, as torch's ``CrossEntropyLoss(weight=...)``), sigmoid focal
(alpha 0.25, gamma 2, mean over pixels) and dice (smoothing 1) over the matched pairs, each divided by the number of
target masks in the batch; gradients by ``tf.GradientTape``.

The pad value matters for THIS matcher, not for an exact one: with an exact assignment every padded column costs
the same whatever row takes it, so any constant gives the same pairs (scipy's, and the Model Garden's
``hungarian_matching``). Padding with 0 makes the padded entries cheaper than every real pair whose cost is
positive (MaskFormer's costs are positive until a class probability outweighs the mask terms, as early in
training): the greedy matcher hands them out first, in index order, and the real targets get whatever predictions
are left. Padding with the matrix's highest cost (what 003 did) keeps the real pairs first.

Each option makes ONE mistake of the MaskFormer family (the pitfall it stands for, in the loss-pitfall registry):
``pad="zero"`` (square matcher padded with 0), ``eos_coef=1.0`` (no-object class weight not 0.1),
``dice_smooth=0.0`` (dice without its +1 smoothing), ``canvas_pad=N`` with ``mask_padding=False`` (the loss taken
over a fixed canvas N pixels larger, its padded pixels not masked; the network's logit there is 0).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from repliscope.diff.loss.contract import LossInputs, LossResult


def greedy_square_match(cost: np.ndarray) -> list[tuple[int, int]]:
    """Pairs (row, column) of a square ``cost``: the cheapest remaining entry first (row-major order on ties)."""
    left = cost.astype(np.float64).copy()
    pairs = []
    for _ in range(cost.shape[0]):
        r, c = np.unravel_index(int(np.argmin(left)), left.shape)
        pairs.append((int(r), int(c)))
        left[r, :] = np.inf
        left[:, c] = np.inf
    return pairs


@dataclass(frozen=True)
class TFMaskFormerLoss:
    """The candidate (module docstring); the defaults reproduce the original."""

    pad: Literal["max", "zero"] = "max"
    eos_coef: float | None = None
    dice_smooth: float = 1.0
    canvas_pad: int = 0
    mask_padding: bool = True
    alpha: float = 0.25
    gamma: float = 2.0

    def __call__(self, inputs: LossInputs) -> LossResult:
        import tensorflow as tf

        config = inputs.config
        num_classes = int(config["num_classes"])
        weights = {k: float(v) for k, v in config["weights"].items()}
        eos = float(config["eos_coef"]) if self.eos_coef is None else self.eos_coef
        class_logits = tf.constant(inputs.outputs["class_logits"])
        mask_logits = tf.constant(inputs.outputs["mask_logits"])
        queries = int(class_logits.shape[1])
        num_masks = max(sum(len(t.classes) for t in inputs.targets), 1)
        matching = []
        with tf.GradientTape() as tape:
            tape.watch(class_logits)
            tape.watch(mask_logits)
            ce_num, ce_den = tf.constant(0.0), tf.constant(0.0)
            focal, dice = tf.constant(0.0), tf.constant(0.0)
            for b, target in enumerate(inputs.targets):
                assert target.masks is not None
                labels = np.asarray(target.classes, dtype=np.int64)
                masks = tf.constant(np.asarray(target.masks, dtype=np.float32))
                logits = mask_logits[b]
                valid = tf.ones_like(logits[0])
                if self.canvas_pad:
                    pad = [[0, 0], [0, self.canvas_pad], [0, self.canvas_pad]]
                    logits = tf.pad(logits, pad, constant_values=0.0)
                    masks = tf.pad(masks, pad)
                    valid = tf.pad(valid, pad[1:])
                if not self.mask_padding:
                    valid = tf.ones_like(valid)
                flat_logits = tf.reshape(logits, [queries, -1])
                flat_masks = tf.reshape(masks, [len(labels), -1])
                flat_valid = tf.reshape(valid, [1, -1])
                pixels = tf.reduce_sum(flat_valid)
                probs = tf.sigmoid(flat_logits) * flat_valid
                ce_pos = tf.nn.sigmoid_cross_entropy_with_logits(tf.ones_like(flat_logits), flat_logits)
                ce_neg = tf.nn.sigmoid_cross_entropy_with_logits(tf.zeros_like(flat_logits), flat_logits)
                focal_pos = self.alpha * (1 - tf.sigmoid(flat_logits)) ** self.gamma * ce_pos * flat_valid
                focal_neg = (1 - self.alpha) * tf.sigmoid(flat_logits) ** self.gamma * ce_neg * flat_valid
                # the matcher's cost (no gradient), Q x K
                pair_focal = (
                    tf.matmul(focal_pos, flat_masks, transpose_b=True)
                    + tf.matmul(focal_neg, 1 - flat_masks, transpose_b=True)
                ) / pixels
                pair_dice = 1 - (2 * tf.matmul(probs, flat_masks, transpose_b=True) + self.dice_smooth) / (
                    tf.reduce_sum(probs, -1, keepdims=True) + tf.reduce_sum(flat_masks, -1)[None, :] + self.dice_smooth
                )
                softmax = tf.nn.softmax(class_logits[b], -1)
                pair_class = -tf.gather(softmax, labels, axis=1)
                cost = (weights["loss_mask"] * pair_focal + 1.0 * pair_class + weights["loss_dice"] * pair_dice).numpy()
                square = np.full((queries, queries), 0.0 if self.pad == "zero" else float(cost.max()), np.float64)
                square[:, : len(labels)] = cost
                pairs = sorted((r, c) for r, c in greedy_square_match(square) if c < len(labels))
                matching.append(tuple((r, c, float(cost[r, c])) for r, c in pairs))
                target_classes = np.full(queries, num_classes, np.int64)
                for r, c in pairs:
                    target_classes[r] = labels[c]
                class_weight = np.where(target_classes == num_classes, eos, 1.0).astype(np.float32)
                ce = tf.nn.sparse_softmax_cross_entropy_with_logits(target_classes, class_logits[b])
                ce_num += tf.reduce_sum(ce * class_weight)
                ce_den += float(class_weight.sum())
                if pairs:
                    rows = [r for r, _ in pairs]
                    cols = [c for _, c in pairs]
                    matched_focal = tf.gather(focal_pos, rows) * tf.gather(flat_masks, cols) + tf.gather(
                        focal_neg, rows
                    ) * (1 - tf.gather(flat_masks, cols))
                    focal += tf.reduce_sum(tf.reduce_sum(matched_focal, -1) / pixels)
                    p, m = tf.gather(probs, rows), tf.gather(flat_masks, cols)
                    dice += tf.reduce_sum(
                        1
                        - (2 * tf.reduce_sum(p * m, -1) + self.dice_smooth)
                        / (tf.reduce_sum(p, -1) + tf.reduce_sum(m, -1) + self.dice_smooth)
                    )
            loss_ce = ce_num / ce_den
            loss_mask = focal / num_masks
            loss_dice = dice / num_masks
            total = weights["loss_ce"] * loss_ce + weights["loss_mask"] * loss_mask + weights["loss_dice"] * loss_dice
        grad_class, grad_mask = tape.gradient(total, [class_logits, mask_logits])
        return LossResult(
            total=float(total.numpy()),
            components={
                "loss_ce": float(loss_ce.numpy()),
                "loss_mask": float(loss_mask.numpy()),
                "loss_dice": float(loss_dice.numpy()),
            },
            gradients={"class_logits": grad_class.numpy(), "mask_logits": grad_mask.numpy()},
            matching=tuple(matching),
            per_image=None,
            notes=(f"TensorFlow candidate: square cost padded with {self.pad}, greedy matcher",),
        )


def correct(inputs: LossInputs) -> LossResult:
    """The candidate that reproduces the original (square matrix padded with the highest cost)."""
    return TFMaskFormerLoss()(inputs)


def square_zero_padded(inputs: LossInputs) -> LossResult:
    """003's mistake: the square cost matrix padded with 0."""
    return TFMaskFormerLoss(pad="zero")(inputs)


def no_object_weight_one(inputs: LossInputs) -> LossResult:
    """The no-object class weighted 1.0 instead of eos_coef (0.1)."""
    return TFMaskFormerLoss(eos_coef=1.0)(inputs)


def dice_unsmoothed(inputs: LossInputs) -> LossResult:
    """Dice without its +1 smoothing."""
    return TFMaskFormerLoss(dice_smooth=0.0)(inputs)


def padded_pixels_counted(inputs: LossInputs) -> LossResult:
    """The loss over a canvas 8 pixels larger, its padded pixels not masked."""
    return TFMaskFormerLoss(canvas_pad=8, mask_padding=False)(inputs)
