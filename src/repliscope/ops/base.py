"""The processing-op interface: one class per op, registered under the manifest's op name.

Pre-processing ops transform one :class:`Item` (a single sample) at a time; batching happens after the
last pre-processing op by stacking ``Item.data`` along a new axis 0. Post-processing ops transform a
:class:`Predictions` batch. Every op declares its parameters as a pydantic model with ``extra="forbid"``
so an unknown or mistyped parameter is an error naming the field and the allowed values.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from repliscope.errors import OpSpecError
from repliscope.registry import Registry

Layout = Literal["encoded", "HWC", "CHW"]
Channels = Literal["RGB", "BGR"]
Stage = Literal["pre", "post"]


class OpParams(BaseModel):
    """Base of every op's parameter model: unknown keys are errors, values are not coerced silently."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


@dataclass(frozen=True)
class Geometry:
    """Where the current image's pixels came from in the decoded source image (for boxes: detection).

    Continuous pixel coordinates, pixel EDGES (the image spans [0, W] x [0, H]; COCO's convention):
    ``current = source * scale + offset``, per axis ``(y, x)``. ``decode`` starts it as the identity with
    ``source_hw`` = the decoded (height, width); every op that moves pixels (resize, crop, letterbox) composes
    its own mapping with :meth:`then`; value-only ops (colour, dtype, normalisation, layout) keep it.
    """

    source_hw: tuple[int, int]
    scale: tuple[float, float] = (1.0, 1.0)
    offset: tuple[float, float] = (0.0, 0.0)

    def then(self, scale: tuple[float, float], offset: tuple[float, float] = (0.0, 0.0)) -> Geometry:
        """This mapping followed by ``next = current * scale + offset`` (per axis y, x)."""
        return Geometry(
            self.source_hw,
            (self.scale[0] * scale[0], self.scale[1] * scale[1]),
            (self.offset[0] * scale[0] + offset[0], self.offset[1] * scale[1] + offset[1]),
        )

    def to_source_xyxy(self, boxes: np.ndarray) -> np.ndarray:
        """(K, 4) xyxy boxes in current-image pixels -> (K, 4) xyxy in source-image pixels (float32)."""
        b = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
        sy, sx = self.scale
        oy, ox = self.offset
        out = np.stack([(b[:, 0] - ox) / sx, (b[:, 1] - oy) / sy, (b[:, 2] - ox) / sx, (b[:, 3] - oy) / sy], axis=1)
        return out.astype(np.float32)


@dataclass(frozen=True)
class Item:
    """One sample between pre-processing ops.

    ``data``: before ``decode`` a 1-D uint8 array of the encoded file bytes (``layout="encoded"``);
    after it an image array, HxWxC (``layout="HWC"``) or CxHxW (``layout="CHW"``), C = 3.
    ``channels``: the colour order of the channel axis (None before decode).
    """

    data: np.ndarray
    layout: Layout
    channels: Channels | None = None
    geometry: Geometry | None = None
    """Set by ``decode``; updated by every op that moves pixels (see :class:`Geometry`)."""

    def with_data(self, data: np.ndarray, **changes: Any) -> Item:
        return replace(self, data=data, **changes)


BoxKind = Literal["xyxy", "xywh", "cxcywh", "yxyx"]
BoxSpace = Literal["input", "source"]


@dataclass(frozen=True)
class BoxFormat:
    """How a box array is to be read: ``kind`` (xyxy, xywh, cxcywh, yxyx), ``normalized`` (fractions of the
    image side) or pixels, ``one_based`` pixel indices (MATLAB/VOC style) or 0-based, and ``space``: the model
    input image (``input``) or the decoded source image (``source``)."""

    kind: BoxKind
    normalized: bool
    one_based: bool = False
    space: BoxSpace = "input"

    def describe(self) -> str:
        unit = "normalised" if self.normalized else ("1-based pixels" if self.one_based else "pixels")
        return f"{self.kind} {unit} ({self.space} image)"


FINAL_BOX_FORMAT = BoxFormat("xyxy", normalized=False, one_based=False, space="source")
"""What a detection postprocess must end with: xyxy, 0-based pixel edges of the decoded source image."""


@dataclass
class Boxes:
    """One sample's detections between post-processing ops.

    ``boxes``: float32 (K, 4) read as ``format``; ``scores``: float32 (K,); ``classes``: int64 (K,) in the
    model's class space until ``class_map`` (then the dataset's category ids); best-first order is not implied.
    """

    boxes: np.ndarray
    scores: np.ndarray
    classes: np.ndarray
    format: BoxFormat


MaskSpace = Literal["output", "source"]


@dataclass
class MaskMap:
    """One sample's segmentation between post-processing ops.

    ``values``: float32 (H, W, C) scores, one channel per class or a single map (C = 1); ``activated``: they are
    probabilities (after ``mask_activation`` or an output of kind ``mask_probabilities``). ``labels``: int32 (H, W)
    class indices of the manifest's labels once ``mask_argmax`` / ``mask_threshold`` made them (None before).
    ``space``: ``output`` (the model output's grid, covering the model input image) or ``source`` (the decoded
    image's pixels, after ``mask_resize``). ``class_names``: the manifest's labels (the model's class indices).
    ``void_as_background``: score the ground truth's void pixels as background (``mask_void``) instead of
    leaving them out.
    """

    values: np.ndarray | None
    activated: bool
    space: MaskSpace
    labels: np.ndarray | None = None
    class_names: tuple[str, ...] | None = None
    void_as_background: bool = False


@dataclass
class Predictions:
    """A batch of model outputs on its way through post-processing.

    ``scores``: float32 (N, C), logits or probabilities; ``is_probability`` says which (classification: the
    model's single output; detection: the first output, kept for compatibility).
    ``outputs``: every model output by its manifest name, batch axis first (N, ...).
    ``geometry``: per row, the sample's :class:`Geometry` (None when unknown).
    ``detections``: per row, the sample's :class:`Boxes` once a detection op made them (None before).
    ``topk_indices`` / ``topk_scores``: (N, k) after ``topk``, best first.
    ``topk_labels``: class names (N lists of k strings) after ``labels``.
    """

    scores: np.ndarray
    is_probability: bool = False
    topk_indices: np.ndarray | None = None
    topk_scores: np.ndarray | None = None
    topk_labels: list[list[str]] | None = None
    notes: dict[str, Any] = field(default_factory=dict)
    outputs: dict[str, np.ndarray] = field(default_factory=dict)
    geometry: list[Geometry | None] = field(default_factory=list)
    detections: list[Boxes] | None = None
    segmentation: list[MaskMap] | None = None
    """Semantic segmentation: per row, the sample's :class:`MaskMap` once ``mask_from_outputs`` made it."""


@dataclass(frozen=True)
class StaticShape:
    """A sample's shape as far as it is known from the manifest alone, before any image is seen.

    ``layout``: "encoded" (file bytes), "HWC" or "CHW". ``height``/``width``: fixed sizes, None when they
    depend on the image. ``min_side``: the shorter side when only that is fixed (after an aspect-keeping
    resize). ``channels``: the channel count once decoded.
    """

    layout: Layout
    height: int | None = None
    width: int | None = None
    min_side: int | None = None
    channels: int | None = None

    def dims(self) -> tuple[int | None, ...]:
        """The per-sample array shape in its layout, None for an image-dependent axis; () when encoded."""
        if self.layout == "HWC":
            return self.height, self.width, self.channels
        if self.layout == "CHW":
            return self.channels, self.height, self.width
        return ()


class Op(ABC):
    """Base class of all ops. Subclasses set ``name``, ``stage``, ``Params`` and implement ``__call__``.

    ``library()`` names the library (and its version) whose semantics the op follows; it is part of every
    evaluation record, because libraries really differ on an op's semantics (rounding, antialiasing, ...).
    """

    name: ClassVar[str]
    stage: ClassVar[Stage]
    Params: ClassVar[type[OpParams]]

    def __init__(self, params: OpParams) -> None:
        self.params = params

    def library(self) -> tuple[str, str]:
        """(library name, installed version) whose implementation this op uses; default numpy."""
        return "numpy", np.__version__

    def describe(self) -> dict[str, Any]:
        """The resolved form of this op, as stored in records: op name, every parameter, library + version."""
        lib, version = self.library()
        return {"op": self.name, **self.params.model_dump(mode="json"), "library": lib, "library_version": version}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params.model_dump().items())
        return f"{type(self).__name__}({args})"


class PreOp(Op):
    stage: ClassVar[Stage] = "pre"

    @abstractmethod
    def __call__(self, item: Item) -> Item:
        """Transform one sample. Must not modify ``item.data`` in place."""

    def static_shape(self, shape: StaticShape) -> StaticShape:
        """The output shape for an input of ``shape``, without data (static checks of a manifest); raises
        OpSpecError for an input this op refuses. Default: an op that changes values only, on an image."""
        if shape.layout == "encoded":
            raise OpSpecError("op", f"'{self.name}' needs a decoded image: put 'decode' first")
        return shape


class PostOp(Op):
    stage: ClassVar[Stage] = "post"

    @abstractmethod
    def __call__(self, preds: Predictions) -> Predictions:
        """Transform a batch of predictions."""


OPS: Registry[type[Op]] = Registry("processing op")


@dataclass(frozen=True)
class BuildContext:
    """What ops may need from the manifest beyond their own parameters (e.g. class names for ``labels``)."""

    class_names: tuple[str, ...] | None = None
