"""``maskformer``: the MaskFormer loss and Hungarian matcher as ``transformers``' PyTorch port of the original
defines them (``MaskFormerLoss``, ``MaskFormerHungarianMatcher`` in ``models/maskformer/modeling_maskformer.py``),
run unmodified in a provisioned stack (:data:`STACK`), with gradients by autograd.

What goes in and out (the adapter):

- ``class_logits`` (N, Q, C+1) and ``mask_logits`` (N, Q, h, w) are the ``class_queries_logits`` and
  ``masks_queries_logits`` of ``MaskFormerForInstanceSegmentation``; each image's targets are its ``masks``
  (K, H, W) as float ``mask_labels`` and its ``classes`` (K,) as ``class_labels`` (0..C-1; C is the no-object
  class);
- the matcher and the loss are built as ``MaskFormerForInstanceSegmentation.__init__`` builds them:
  ``MaskFormerHungarianMatcher(cost_class=1.0, cost_dice=weights["loss_dice"], cost_mask=weights["loss_mask"])``,
  ``MaskFormerLoss(num_labels=num_classes, matcher, weight_dict, eos_coef)``; the total is ``get_loss``'s: each
  component times its weight, summed;
- components are the loss's own, unweighted: ``loss_ce`` (transformers' ``loss_cross_entropy``: softmax CE over
  every query, the no-object class weighted by ``eos_coef``), ``loss_mask`` (sigmoid focal, alpha 0.25, gamma 2,
  mean over pixels, summed over matched pairs, divided by the number of target masks in the batch) and
  ``loss_dice`` (1 - (2 x.y + 1) / (x + y + 1): smoothing 1);
- matching: per image the matcher's (prediction, target) pairs with the cost the matcher minimised, read from the
  cost matrix the matcher hands to ``scipy.optimize.linear_sum_assignment`` (recorded at that call, not
  recomputed);
- per image: the loss of that image alone (a batch of one: its own mask count normalises it).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from repliscope.diff.loss.contract import LOSSES, LossInputs, LossResult, LossSpec

STACK = "torch==2.13.0 transformers==5.24.0"
"""The stack the loss runs in: transformers 5.24.0 (the newest 5.x pip resolves) on the CPU torch 2.13.0 wheel."""

ORIGIN = (
    "transformers 5.24.0 models/maskformer/modeling_maskformer.py MaskFormerLoss + MaskFormerHungarianMatcher "
    "(PyTorch, torch 2.13.0 CPU; scipy's linear_sum_assignment on the rectangular cost matrix)"
)

COMPONENTS = {"loss_cross_entropy": "loss_ce", "loss_mask": "loss_mask", "loss_dice": "loss_dice"}
"""transformers' loss keys -> the names this loss reports."""

NOTES = (
    "gradient: d total / d logits by torch autograd, total = sum of weight x component as "
    "MaskFormerForInstanceSegmentation.get_loss adds them",
    "components unweighted, as MaskFormerLoss returns them; loss_ce is transformers' 'loss_cross_entropy'",
    "matching cost: the matcher's own cost matrix entry (cost_mask x focal + cost_class x (-softmax prob) + "
    "cost_dice x dice), recorded at its linear_sum_assignment call",
)


def _weights(config: Mapping[str, Any]) -> dict[str, float]:
    for key in ("num_classes", "eos_coef", "weights"):
        if key not in config:
            raise ValueError(f"maskformer: config has no '{key}'")
    weights = config["weights"]
    missing = [k for k in COMPONENTS.values() if k not in weights]
    if missing:
        raise ValueError(f"maskformer: config['weights'] has no {missing} (needs loss_ce, loss_mask, loss_dice)")
    return {k: float(weights[k]) for k in COMPONENTS.values()}


@contextlib.contextmanager
def _recording_costs(module: Any, into: list[np.ndarray]) -> Iterator[None]:
    """Record every cost matrix the matcher gives ``linear_sum_assignment`` (the module's own name for it)."""
    original = module.linear_sum_assignment

    def recording(cost: Any, *args: Any, **kwargs: Any) -> Any:
        into.append(np.asarray(cost, dtype=np.float64))
        return original(cost, *args, **kwargs)

    module.linear_sum_assignment = recording
    try:
        yield
    finally:
        module.linear_sum_assignment = original


def maskformer_loss(inputs: LossInputs) -> LossResult:
    """transformers' MaskFormerLoss on ``inputs`` (family ``mask_classification``; module docstring)."""
    if inputs.family != "mask_classification":
        raise ValueError(f"maskformer: family '{inputs.family}' is not 'mask_classification'")
    import torch
    from transformers.models.maskformer import modeling_maskformer as mf

    config = inputs.config
    weights = _weights(config)
    num_classes = int(config["num_classes"])
    for key in ("class_logits", "mask_logits"):
        if key not in inputs.outputs:
            raise ValueError(f"maskformer: outputs have no '{key}' ({', '.join(inputs.outputs)})")
    class_np, mask_np = inputs.outputs["class_logits"], inputs.outputs["mask_logits"]
    if class_np.shape[-1] != num_classes + 1:
        raise ValueError(
            f"maskformer: class_logits has {class_np.shape[-1]} classes; num_classes {num_classes} + no-object "
            f"makes {num_classes + 1}"
        )
    labels_masks, labels_classes = [], []
    for target in inputs.targets:
        if target.masks is None:
            raise ValueError(f"maskformer: image '{target.image_id}' has no masks")
        labels_masks.append(torch.from_numpy(np.asarray(target.masks, dtype=np.float32)))
        labels_classes.append(torch.from_numpy(np.asarray(target.classes, dtype=np.int64)))

    def build() -> Any:
        matcher = mf.MaskFormerHungarianMatcher(
            cost_class=1.0, cost_dice=weights["loss_dice"], cost_mask=weights["loss_mask"]
        )
        weight_dict = {name: weights[ours] for name, ours in COMPONENTS.items()}
        return mf.MaskFormerLoss(
            num_labels=num_classes, matcher=matcher, weight_dict=weight_dict, eos_coef=float(config["eos_coef"])
        )

    def run(
        class_logits: Any, mask_logits: Any, masks: list[Any], classes: list[Any], costs: list[np.ndarray]
    ) -> tuple[Any, dict[str, float], list[Any]]:
        criterion = build()
        matched: list[Any] = []
        original_forward = criterion.matcher.forward

        def keep(*args: Any, **kwargs: Any) -> Any:
            out = original_forward(*args, **kwargs)
            matched.extend(out)
            return out

        criterion.matcher.forward = keep
        with _recording_costs(mf, costs):
            losses = criterion(mask_logits, class_logits, masks, classes)
        total = sum(losses[name] * criterion.weight_dict[name] for name in COMPONENTS)
        return total, {COMPONENTS[k]: float(losses[k].detach()) for k in COMPONENTS}, matched

    class_logits = torch.from_numpy(np.array(class_np, dtype=np.float32)).requires_grad_(True)
    mask_logits = torch.from_numpy(np.array(mask_np, dtype=np.float32)).requires_grad_(True)
    costs: list[np.ndarray] = []
    total, components, matched = run(class_logits, mask_logits, labels_masks, labels_classes, costs)
    total.backward()
    assert class_logits.grad is not None and mask_logits.grad is not None
    matching = tuple(
        tuple(
            (int(p), int(t), float(cost[int(p), int(t)]))
            for p, t in sorted(zip(rows.tolist(), cols.tolist(), strict=True))
        )
        for (rows, cols), cost in zip(matched, costs, strict=True)
    )
    per_image = []
    with torch.no_grad():
        for b in range(len(inputs.targets)):
            value, _, _ = run(
                class_logits[b : b + 1], mask_logits[b : b + 1], labels_masks[b : b + 1], labels_classes[b : b + 1], []
            )
            per_image.append(float(value))
    return LossResult(
        total=float(total.detach()),
        components=components,
        gradients={
            "class_logits": class_logits.grad.numpy().astype(np.float32),
            "mask_logits": mask_logits.grad.numpy().astype(np.float32),
        },
        matching=matching,
        per_image=tuple(per_image),
        notes=NOTES,
    )


DIFFERENCES = (
    "auxiliary losses: MaskFormer adds the same three losses for every intermediate decoder layer; the contract "
    "carries one set of outputs, so the total is the last layer's",
)

LOSSES.add(
    "maskformer",
    LossSpec(
        name="maskformer",
        family="mask_classification",
        origin=ORIGIN,
        target="repliscope.diff.loss.originals.maskformer:maskformer_loss",
        stack=STACK,
        differences=DIFFERENCES,
    ),
)
