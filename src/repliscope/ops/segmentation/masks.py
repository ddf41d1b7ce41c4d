"""Segmentation post ops: ``mask_from_outputs``, ``mask_activation``, ``mask_minmax``, ``mask_resize``,
``mask_argmax``, ``mask_threshold``, ``mask_label_offset``, ``mask_void``. Each returns a new :class:`Predictions` whose
``segmentation`` holds one :class:`MaskMap` per row; none modifies its input arrays."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Literal

import numpy as np
from pydantic import Field

from repliscope.errors import OpSpecError, RepliscopeError, SampleError
from repliscope.ops.base import OPS, BuildContext, MaskMap, OpParams, PostOp, Predictions
from repliscope.ops.segmentation.resample import resample, stretch_positions, to_source_positions

PositiveInt = Annotated[int, Field(gt=0)]
NonNegativeInt = Annotated[int, Field(ge=0)]


def _maps(op: str, preds: Predictions) -> list[MaskMap]:
    if preds.segmentation is None:
        raise RepliscopeError(f"'{op}' needs segmentation maps: start the postprocess with 'mask_from_outputs'")
    return preds.segmentation


def _replace(preds: Predictions, maps: list[MaskMap]) -> Predictions:
    return dataclasses.replace(preds, segmentation=maps)


class MaskFromOutputsParams(OpParams):
    output: str
    """The manifest output holding the maps (batch first)."""
    layout: Literal["NHWC", "NCHW", "NHW"]
    """Where the class axis is; NHW: one map per image (read as C = 1)."""
    activated: bool
    """The values are probabilities already (output kind ``mask_probabilities``) or logits (``mask_logits``);
    false for a label map."""
    labels: bool = False
    """The output is a label map (kind ``mask_labels``): integer class indices, layout NHW (or NHWC with one
    channel); the maps start as labels, so no mask_argmax / mask_threshold follows. Optional: false = scores."""


@OPS.register("mask_from_outputs")
class MaskFromOutputs(PostOp):
    """Out: per row a :class:`MaskMap` of float32 (H, W, C) values in the output's grid (``space: output``)."""

    name = "mask_from_outputs"
    Params = MaskFromOutputsParams
    params: MaskFromOutputsParams

    def __init__(self, params: MaskFromOutputsParams, class_names: tuple[str, ...] | None = None) -> None:
        super().__init__(params)
        self.class_names = class_names

    @classmethod
    def from_context(cls, params: MaskFromOutputsParams, context: BuildContext) -> MaskFromOutputs:
        return cls(params, context.class_names)

    def __call__(self, preds: Predictions) -> Predictions:
        p = self.params
        if p.output not in preds.outputs:
            raise RepliscopeError(
                f"'{self.name}': the model has no output '{p.output}' (outputs: "
                f"{', '.join(sorted(preds.outputs)) or 'none'})"
            )
        if p.labels:
            return _replace(preds, self._labels(np.asarray(preds.outputs[p.output])))
        x = np.asarray(preds.outputs[p.output], dtype=np.float32)
        want = 3 if p.layout == "NHW" else 4
        if x.ndim == 4 and p.layout == "NHW" and x.shape[-1] == 1:
            x = x[..., 0]
        if x.ndim != want:
            raise RepliscopeError(f"'{self.name}': output '{p.output}' has shape {list(x.shape)}, not {p.layout}")
        if p.layout == "NHW":
            x = x[..., None]
        elif p.layout == "NCHW":
            x = x.transpose(0, 2, 3, 1)
        maps = [
            MaskMap(
                values=np.ascontiguousarray(row), activated=p.activated, space="output", class_names=self.class_names
            )
            for row in x
        ]
        return _replace(preds, maps)

    def _labels(self, x: np.ndarray) -> list[MaskMap]:
        """Label maps: int32 (H, W) per row from an integer (or integral float) NHW / NHWC-with-one-channel
        output; indices outside the labels stay (scored as "no class")."""
        p = self.params
        if x.ndim == 4 and p.layout in ("NHWC", "NHW") and x.shape[-1] == 1:
            x = x[..., 0]
        elif x.ndim == 4 and p.layout == "NCHW" and x.shape[1] == 1:
            x = x[:, 0]
        if x.ndim != 3:
            raise RepliscopeError(f"'{self.name}': label output '{p.output}' has shape {list(x.shape)}, not (N, H, W)")
        integral = np.issubdtype(x.dtype, np.integer) or (
            np.issubdtype(x.dtype, np.floating) and bool(np.array_equal(x, np.rint(x)))
        )
        if not integral:
            raise RepliscopeError(
                f"'{self.name}': label output '{p.output}' holds {x.dtype} values that are not class indices"
            )
        if x.size and (x.min() < np.iinfo(np.int32).min or x.max() > np.iinfo(np.int32).max):
            raise RepliscopeError(f"'{self.name}': label output '{p.output}' holds values outside int32")
        return [
            MaskMap(
                values=None,
                activated=False,
                space="output",
                labels=np.ascontiguousarray(row, np.int32),
                class_names=self.class_names,
            )
            for row in x
        ]


class MaskActivationParams(OpParams):
    function: Literal["sigmoid", "softmax"]
    """sigmoid per value (one map or independent classes), softmax over the class axis."""


@OPS.register("mask_activation")
class MaskActivation(PostOp):
    """float32 sigmoid ``1 / (1 + exp(-x))`` or numerically stable softmax over C; applied as the manifest says
    (even to values already activated)."""

    name = "mask_activation"
    Params = MaskActivationParams
    params: MaskActivationParams

    def __call__(self, preds: Predictions) -> Predictions:
        out = []
        for m in _maps(self.name, preds):
            if m.values is None or m.labels is not None:
                raise RepliscopeError(f"'{self.name}' needs scores: put it before mask_argmax / mask_threshold")
            x = m.values.astype(np.float32)
            if self.params.function == "sigmoid":
                y = (1.0 / (1.0 + np.exp(-x))).astype(np.float32)
            else:
                e = np.exp(x - x.max(axis=-1, keepdims=True))
                y = (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)
            out.append(dataclasses.replace(m, values=y, activated=True))
        return _replace(preds, out)


class MaskMinmaxParams(OpParams):
    quantize: Literal["none", "uint8"]
    """uint8: then ``(y * 255).astype(uint8)`` (truncation, float32 product) stored as ``k / 255`` in float32, as
    rembg turns the normalised map into an 8-bit PIL image."""


@OPS.register("mask_minmax")
class MaskMinmax(PostOp):
    """Per image ``(x - min) / (max - min)`` over the whole map (every class channel), float32, as rembg's
    ``SimpleSession.predict`` rescales U²-Net's saliency map; a constant map (max = min) is a failed sample
    (rembg divides by zero). The result counts as probabilities (``activated``)."""

    name = "mask_minmax"
    Params = MaskMinmaxParams
    params: MaskMinmaxParams

    def __call__(self, preds: Predictions) -> Predictions:
        out = []
        for m in _maps(self.name, preds):
            if m.values is None or m.labels is not None:
                raise RepliscopeError(f"'{self.name}' needs scores: put it before mask_argmax / mask_threshold")
            x = m.values.astype(np.float32)
            lo, hi = x.min(), x.max()
            if not hi > lo:
                raise SampleError(f"'{self.name}': the map is constant ({lo}), min-max normalisation divides by 0")
            y = (x - lo) / (hi - lo)
            if self.params.quantize == "uint8":
                y = (y * np.float32(255)).astype(np.uint8).astype(np.float32) / np.float32(255)
            out.append(dataclasses.replace(m, values=y.astype(np.float32), activated=True))
        return _replace(preds, out)


class MaskResizeParams(OpParams):
    method: Literal["bilinear", "nearest", "lanczos"]
    """lanczos: library pillow only."""
    mapping: Literal["geometry", "stretch"]
    """geometry: the exact inverse of the pre-processing (resize, crop, letterbox, warp) via each sample's
    geometry; stretch: the whole map onto the whole image, ignoring crops and letterbox padding (MediaPipe's
    ``TensorsToSegmentationCalculator``)."""
    sampling: Literal["half_pixel", "corner_aligned"]
    """How the map's pixel grid sits on the image it covers (see :mod:`repliscope.ops.segmentation.resample`)."""
    input_size: Annotated[list[PositiveInt], Field(min_length=2, max_length=2)] | None = None
    """mapping geometry: the model input's [height, width] (the image the map covers); required there."""
    library: Literal["numpy", "opencv", "pillow"]
    """numpy: float64 separable sampling (any mapping); opencv: ``cv2.resize`` (stretch + half_pixel only;
    INTER_LINEAR with OpenCV's float arithmetic, INTER_NEAREST = floor sampling); pillow: ``Image.resize`` of
    each channel as an 8-bit ``L`` image (stretch + half_pixel only; the scores must be 8-bit levels ``k / 255``,
    e.g. after ``mask_minmax`` with ``quantize: uint8``; the result is again ``k / 255``), as rembg resizes its
    mask back to the image."""


@OPS.register("mask_resize")
class MaskResize(PostOp):
    """Map the scores (bilinear or nearest) or the labels (nearest only) onto the decoded image's pixels
    (``space: source``). Needs each row's geometry for ``mapping: geometry`` and the source size for both."""

    name = "mask_resize"
    Params = MaskResizeParams
    params: MaskResizeParams

    def __init__(self, params: MaskResizeParams) -> None:
        super().__init__(params)
        p = params
        if p.mapping == "geometry" and p.input_size is None:
            raise OpSpecError("input_size", "mapping: geometry needs the model input's [height, width]")
        if p.mapping == "stretch" and p.input_size is not None:
            raise OpSpecError("input_size", "only used with mapping: geometry; remove it")
        if p.library in ("opencv", "pillow") and (p.mapping, p.sampling) != ("stretch", "half_pixel"):
            raise OpSpecError(
                "library",
                f"{p.library} does mapping: stretch with sampling: half_pixel only; use library: numpy",
                ["numpy"],
            )
        if p.method == "lanczos" and p.library != "pillow":
            raise OpSpecError("method", "lanczos is resampled by library: pillow only", ["bilinear", "nearest"])

    def library(self) -> tuple[str, str]:
        if self.params.library == "opencv":
            import cv2

            return "opencv", cv2.__version__
        if self.params.library == "pillow":
            import PIL

            return "pillow", PIL.__version__
        return super().library()

    def _pillow(self, data: np.ndarray, source_hw: tuple[int, int], method: str) -> np.ndarray:
        from PIL import Image

        flag = {
            "bilinear": Image.Resampling.BILINEAR,
            "nearest": Image.Resampling.NEAREST,
            "lanczos": Image.Resampling.LANCZOS,
        }[method]
        sh, sw = source_hw
        if data.dtype.kind in "iu":  # labels: nearest, in mode I
            return np.asarray(Image.fromarray(data.astype(np.int32)).resize((sw, sh), flag))
        levels = np.rint(data * 255.0)
        if np.any(np.abs(levels - data * 255.0) > 1e-3) or levels.min() < 0 or levels.max() > 255:
            raise RepliscopeError(
                f"'{self.name}' with library pillow resizes 8-bit maps: the scores are not "
                "levels k / 255 in [0, 1] (put mask_minmax with quantize: uint8 first)"
            )
        planes = data[..., None] if data.ndim == 2 else data
        out = [
            np.asarray(Image.fromarray(levels_c.astype(np.uint8)).resize((sw, sh), flag))
            for levels_c in np.moveaxis(np.rint(planes * 255.0), -1, 0)
        ]
        return np.stack(out, axis=-1).astype(np.float32) / np.float32(255)

    def _one(self, data: np.ndarray, source_hw: tuple[int, int], geometry: object, method: str) -> np.ndarray:
        p = self.params
        sh, sw = source_hw
        if p.library == "pillow":
            return self._pillow(data, source_hw, method)
        if p.library == "opencv":
            import cv2

            flag = cv2.INTER_LINEAR if method == "bilinear" else cv2.INTER_NEAREST
            out = cv2.resize(np.ascontiguousarray(data), (sw, sh), interpolation=flag)
            return out[:, :, None] if data.ndim == 3 and out.ndim == 2 else out
        if p.mapping == "stretch":
            rows = stretch_positions(data.shape[0], sh, p.sampling)
            cols = stretch_positions(data.shape[1], sw, p.sampling)
        else:
            assert p.input_size is not None
            rows, cols = to_source_positions(data.shape[:2], (p.input_size[0], p.input_size[1]), geometry, p.sampling)  # type: ignore[arg-type]
        return resample(data, rows, cols, method)  # type: ignore[arg-type]

    def __call__(self, preds: Predictions) -> Predictions:
        maps = _maps(self.name, preds)
        if len(preds.geometry) != len(maps) or any(g is None for g in preds.geometry):
            raise RepliscopeError(
                f"'{self.name}' needs each sample's geometry (the decoded image size): the "
                "pipeline must start with 'decode'"
            )
        out = []
        for m, g in zip(maps, preds.geometry, strict=True):
            assert g is not None
            if m.space == "source":
                raise RepliscopeError(f"'{self.name}': the maps are already in source pixels (a second mask_resize)")
            if m.labels is not None:
                if self.params.method != "nearest":
                    raise RepliscopeError(
                        f"'{self.name}' with method {self.params.method} on labels: class "
                        "indices are not interpolated; use method nearest, or resize the "
                        "scores before mask_argmax / mask_threshold"
                    )
                labels = self._one(m.labels, g.source_hw, g, "nearest").astype(np.int32)
                out.append(dataclasses.replace(m, labels=labels, values=None, space="source"))
            else:
                assert m.values is not None
                values = self._one(m.values, g.source_hw, g, self.params.method).astype(np.float32)
                if values.ndim == 2:
                    values = values[:, :, None]
                out.append(dataclasses.replace(m, values=values, space="source"))
        return _replace(preds, out)


class MaskArgmaxParams(OpParams):
    pass


@OPS.register("mask_argmax")
class MaskArgmax(PostOp):
    """labels = argmax over the C > 1 class scores (ties: the lowest index), int32 (H, W)."""

    name = "mask_argmax"
    Params = MaskArgmaxParams
    params: MaskArgmaxParams

    def __call__(self, preds: Predictions) -> Predictions:
        out = []
        for m in _maps(self.name, preds):
            if m.values is None or m.labels is not None:
                raise RepliscopeError(f"'{self.name}': the maps are labels already")
            if m.values.shape[-1] < 2:
                raise RepliscopeError(
                    f"'{self.name}' needs one score per class; a single map is thresholded (mask_threshold)"
                )
            out.append(dataclasses.replace(m, labels=np.argmax(m.values, axis=-1).astype(np.int32)))
        return _replace(preds, out)


class MaskThresholdParams(OpParams):
    threshold: float
    keep: Literal["gt", "ge"]
    """Foreground where value > threshold (gt) or >= threshold (ge)."""
    foreground: NonNegativeInt
    """The class index (in the manifest's labels) of pixels above the threshold."""
    background: NonNegativeInt
    """The class index of the others."""


@OPS.register("mask_threshold")
class MaskThreshold(PostOp):
    """labels of a single map (C = 1): ``foreground`` where the value passes ``threshold``, else
    ``background``; int32 (H, W). Compared in float32 as given (a probability map needs a probability)."""

    name = "mask_threshold"
    Params = MaskThresholdParams
    params: MaskThresholdParams

    def __call__(self, preds: Predictions) -> Predictions:
        p = self.params
        t = np.float32(p.threshold)
        out = []
        for m in _maps(self.name, preds):
            if m.values is None or m.labels is not None:
                raise RepliscopeError(f"'{self.name}': the maps are labels already")
            if m.values.shape[-1] != 1:
                raise RepliscopeError(
                    f"'{self.name}' needs one map, got {m.values.shape[-1]} channels: use mask_argmax"
                )
            v = m.values[..., 0]
            fg = v > t if p.keep == "gt" else v >= t
            out.append(dataclasses.replace(m, labels=np.where(fg, p.foreground, p.background).astype(np.int32)))
        return _replace(preds, out)


class MaskLabelOffsetParams(OpParams):
    offset: int
    """Added to every label (e.g. -1 for a model without a background channel whose labels start at 1)."""


@OPS.register("mask_label_offset")
class MaskLabelOffset(PostOp):
    """labels + ``offset``; a label that leaves the manifest's class indices is recorded as "no class" and
    counts as wrong (:mod:`repliscope.tasks.segmentation`)."""

    name = "mask_label_offset"
    Params = MaskLabelOffsetParams
    params: MaskLabelOffsetParams

    def __call__(self, preds: Predictions) -> Predictions:
        out = []
        for m in _maps(self.name, preds):
            if m.labels is None:
                raise RepliscopeError(f"'{self.name}' needs labels: put it after mask_argmax / mask_threshold")
            out.append(dataclasses.replace(m, labels=(m.labels + np.int32(self.params.offset)).astype(np.int32)))
        return _replace(preds, out)


class MaskVoidParams(OpParams):
    policy: Literal["ignore", "as_background"]
    """ignore: void pixels are not scored (the VOC devkit's rule, and the default without this op);
    as_background: they count as background (a common mistake: it rewards predicting background on object
    boundaries)."""


@OPS.register("mask_void")
class MaskVoid(PostOp):
    """How the task scores the ground truth's void pixels (255) against these masks; the masks are unchanged."""

    name = "mask_void"
    Params = MaskVoidParams
    params: MaskVoidParams

    def __call__(self, preds: Predictions) -> Predictions:
        flag = self.params.policy == "as_background"
        return _replace(preds, [dataclasses.replace(m, void_as_background=flag) for m in _maps(self.name, preds)])
