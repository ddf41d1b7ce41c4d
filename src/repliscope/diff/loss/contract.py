"""The loss-diff contract: what every loss function (an original or a user's candidate) takes and returns.

A loss diff feeds the SAME network outputs and the SAME targets to an original loss (libdarknet's
``forward_yolo_layer``, the TF Model Garden's YOLO loss, transformers' MaskFormer loss) and to a candidate, then
compares the total, each component, the gradient with respect to each output and the matching. Everything crossing
this contract is numpy (float32 tensors, int64 classes), whatever framework computes the loss inside, so a loss can
run in this process or in a provisioned stack (:mod:`repliscope.stacks.call`) and come back unchanged.

Conventions:

- ``family "yolo"``: ``outputs`` has one entry per yolo layer, named after the Darknet layer (``"yolo_16"``,
  ``"yolo_23"``), NCHW ``(N, len(mask) * (5 + classes), H, W)``: the RAW tensor entering Darknet's yolo layer,
  before its logistic. ``config``: ``anchors`` (all ``(w, h)`` pairs, pixels of the network input), ``mask`` (per
  layer name, the anchor indices of that layer), ``classes``, ``ignore_thresh``, ``truth_thresh``, ``net_w``,
  ``net_h`` (from the Darknet cfg).
- ``family "mask_classification"``: ``outputs`` has ``"class_logits"`` ``(N, Q, C + 1)`` and ``"mask_logits"``
  ``(N, Q, h, w)``; ``config``: ``num_classes``, ``eos_coef`` (0.1), ``weights``.
- targets: one :class:`ImageTargets` per image; boxes are ``cx, cy, w, h`` normalised to [0, 1] of the network
  input (Darknet's truth convention).
- gradients are ``d total / d outputs[name]`` of the loss being MINIMISED, same shape, float32. Darknet's
  ``l.delta`` is the NEGATIVE gradient: its adapter converts it and says so in ``notes``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from repliscope.registry import Registry

FAMILIES = ("yolo", "mask_classification")
"""The loss families the contract knows (``LossInputs.family``, ``LossSpec.family``)."""


@dataclass(frozen=True)
class ImageTargets:
    """The targets of one image: ``boxes`` ``(K, 4)`` float32 ``cx, cy, w, h`` normalised to [0, 1] of the
    network input; ``classes`` ``(K,)`` int64; ``masks`` ``(K, h, w)`` bool (mask classification) or None."""

    image_id: str
    boxes: np.ndarray
    classes: np.ndarray
    masks: np.ndarray | None = None


@dataclass(frozen=True)
class LossInputs:
    """The network outputs and targets one loss call sees (see the module text for each family's layout)."""

    family: str
    outputs: dict[str, np.ndarray]
    targets: tuple[ImageTargets, ...]
    config: Mapping[str, Any]

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"LossInputs.family: unknown family '{self.family}' (allowed: {', '.join(FAMILIES)})")


@dataclass
class LossResult:
    """What a loss function returns.

    ``total``: the scalar loss; ``components``: its named parts (``"yolo_16/box"``, ``"yolo_16/objectness"``,
    ``"yolo_16/no_object"``, ``"yolo_16/class"``; MaskFormer ``"loss_ce"``, ``"loss_mask"`` (focal),
    ``"loss_dice"``); ``gradients``: ``d total / d outputs[name]`` (the loss being minimised), same shape as the
    output, float32; ``matching``: per image, the ``(prediction, target, cost)`` pairs of the loss's assignment
    (None when the loss has none to report); ``per_image``: the loss of each image (None when not separable);
    ``notes``: conventions the adapter applied (sign, scale, what is not a loss value).
    """

    total: float
    components: dict[str, float]
    gradients: dict[str, np.ndarray]
    matching: tuple[tuple[tuple[int, int, float], ...], ...] | None = None
    per_image: tuple[float, ...] | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)


LossFunction = Callable[[LossInputs], LossResult]
"""A loss: numpy in, numpy out (any framework inside)."""


@dataclass(frozen=True)
class LossSpec:
    """A registered original loss.

    ``origin``: what it pins (e.g. "libdarknet forward_yolo_layer, Debian darknet 0.0.0+git20180914");
    ``target``: the ``"module:attr"`` of its :data:`LossFunction`; ``stack``: the stack spec text when it must run
    in a provisioned stack, None when it runs here; ``differences``: named, explained differences from the
    original it wraps (what its adapter cannot or does not reproduce).
    """

    name: str
    family: str
    origin: str
    target: str
    stack: str | None = None
    differences: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"LossSpec '{self.name}': unknown family '{self.family}' (allowed: {', '.join(FAMILIES)})")
        if ":" not in self.target:
            raise ValueError(f"LossSpec '{self.name}': target '{self.target}' is not 'module:attr'")


LOSS_PROVIDERS = (
    "repliscope.backends.darknet.loss",
    "repliscope.diff.loss.originals.tfmg_yolo",
    "repliscope.diff.loss.originals.maskformer",
)
"""The modules whose import registers an original in :data:`LOSSES` (each calls ``LOSSES.add``)."""

LOSSES: Registry[LossSpec] = Registry("loss", providers=LOSS_PROVIDERS)
"""The original losses a candidate is compared with, by name (``--original NAME``)."""
