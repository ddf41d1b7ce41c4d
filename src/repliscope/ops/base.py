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
class Item:
    """One sample between pre-processing ops.

    ``data``: before ``decode`` a 1-D uint8 array of the encoded file bytes (``layout="encoded"``);
    after it an image array, HxWxC (``layout="HWC"``) or CxHxW (``layout="CHW"``), C = 3.
    ``channels``: the colour order of the channel axis (None before decode).
    """

    data: np.ndarray
    layout: Layout
    channels: Channels | None = None

    def with_data(self, data: np.ndarray, **changes: Any) -> Item:
        return replace(self, data=data, **changes)


@dataclass
class Predictions:
    """A batch of model outputs on its way through post-processing.

    ``scores``: float32 (N, C), logits or probabilities; ``is_probability`` says which.
    ``topk_indices`` / ``topk_scores``: (N, k) after ``topk``, best first.
    ``topk_labels``: class names (N lists of k strings) after ``labels``.
    """

    scores: np.ndarray
    is_probability: bool = False
    topk_indices: np.ndarray | None = None
    topk_scores: np.ndarray | None = None
    topk_labels: list[list[str]] | None = None
    notes: dict[str, Any] = field(default_factory=dict)


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
        return {"op": self.name, **self.params.model_dump(mode="json"),
                "library": lib, "library_version": version}

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
