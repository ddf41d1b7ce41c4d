"""``box_format`` (explicit from -> to) and ``to_source`` (undo the pre-processing's geometry)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import numpy as np
from pydantic import Field, create_model

from repliscope.errors import OpSpecError, RepliscopeError
from repliscope.ops.base import FINAL_BOX_FORMAT, OPS, Boxes, BoxFormat, OpParams, PostOp, Predictions
from repliscope.ops.detection._common import (
    from_xyxy,
    parse_format,
    position_columns,
    require_detections,
    to_xyxy,
    with_detections,
)

PositiveInt = Annotated[int, Field(gt=0)]

_FIELDS: dict[str, Any] = {
    "from": (dict[str, Any], ...),
    "to": (dict[str, Any], ...),
    "image_size": (Annotated[list[PositiveInt], Field(min_length=2, max_length=2)] | None, ...),
}
BoxFormatParams = create_model("BoxFormatParams", __base__=OpParams, **_FIELDS)  # 'from' is a keyword
"""``from`` / ``to``: {kind, normalized, one_based, space}; ``image_size``: [height, width] of the model input
when a normalised <-> pixels conversion is in space ``input`` (else null)."""


def convert(boxes: np.ndarray, src: BoxFormat, dst: BoxFormat, size_hw: tuple[float, float] | None) -> np.ndarray:
    """(K, 4) boxes from ``src`` to ``dst`` (same space) in float64; ``size_hw`` for normalised <-> pixels.

    Through xyxy 0-based pixel edges: 1-based -> 0-based subtracts 1 from every POSITION (corners, centres;
    widths and heights unchanged); normalised -> pixels multiplies x by the width and y by the height.
    """
    xyxy = to_xyxy(boxes, src.kind)
    if src.one_based:
        xyxy = xyxy - 1.0
    if src.normalized != dst.normalized:
        assert size_hw is not None
        h, w = size_hw
        factor = np.array([w, h, w, h], np.float64)
        xyxy = xyxy * factor if src.normalized else xyxy / factor
    out = from_xyxy(xyxy, dst.kind)
    if dst.one_based:
        out[:, position_columns(dst.kind)] += 1.0
    return out


@OPS.register("box_format")
class BoxFormatOp(PostOp):
    """Convert every sample's boxes from one stated format to another, within one image space.

    In: ``detections`` whose format equals ``from`` (else an error: a pipeline states each format once).
    Out: boxes float32 in ``to``; scores and classes unchanged. Kinds: xyxy (x1 y1 x2 y2), xywh (x1 y1 w h),
    cxcywh (centre, size), yxyx (y1 x1 y2 x2). Normalised <-> pixels multiplies / divides x by the width and
    y by the height of the image of ``space``: ``image_size`` [h, w] for ``input`` (the model input), each
    sample's decoded size (``Geometry.source_hw``) for ``source``. ``one_based`` shifts positions by 1.
    Changing the space is ``to_source``'s job and refused here.
    """

    name = "box_format"
    Params = BoxFormatParams
    params: Any

    def __init__(self, params: OpParams) -> None:
        super().__init__(params)
        self.src = parse_format("from", getattr(params, "from"))
        self.dst = parse_format("to", params.to)  # type: ignore[attr-defined]
        if self.src.space != self.dst.space:
            raise OpSpecError(
                "to.space",
                f"box_format keeps the image space ({self.src.space}); use 'to_source' to "
                "map input-image boxes to the source image",
                allowed=[self.src.space],
            )
        sized = self.src.normalized != self.dst.normalized and self.src.space == "input"
        size = self.params.image_size
        if sized and size is None:
            raise OpSpecError(
                "image_size", "normalised <-> pixels in the input space needs the model input's [height, width]"
            )
        if not sized and size is not None:
            raise OpSpecError("image_size", "only used for normalised <-> pixels in space input; set it to null")

    def __call__(self, preds: Predictions) -> Predictions:
        dets = require_detections(self, preds)
        out = []
        for i, b in enumerate(dets):
            if b.format != self.src:
                raise RepliscopeError(
                    f"'box_format' expects boxes in {self.src.describe()} but they are "
                    f"{b.format.describe()}: fix its 'from' or the op before it"
                )
            size: tuple[float, float] | None = None
            if self.src.normalized != self.dst.normalized:
                size = tuple(self.params.image_size) if self.src.space == "input" else _source_hw(preds, i)
            boxes = convert(b.boxes, self.src, self.dst, size).astype(np.float32)
            out.append(Boxes(boxes, b.scores, b.classes, self.dst))
        return with_detections(preds, out)


def _source_hw(preds: Predictions, row: int) -> tuple[float, float]:
    g = preds.geometry[row] if row < len(preds.geometry) else None
    if g is None:
        raise RepliscopeError(
            "boxes in the source space need each sample's decoded size, but the predictions "
            "carry no geometry (no 'decode' in the pre-processing?)"
        )
    return float(g.source_hw[0]), float(g.source_hw[1])


class ToSourceParams(OpParams):
    undo: Literal["geometry", "scale_only", "nothing"]
    """``geometry``: the exact inverse of the pre-processing geometry (the right choice); ``scale_only``: the
    scale inverted but the padding / crop offset left in (a letterbox not undone); ``nothing``: input pixels
    taken as source pixels. The last two reproduce classic bugs (pitfall variants)."""
    clip: bool
    """Clip the boxes to the source image [0, W] x [0, H]."""


@OPS.register("to_source")
class ToSource(PostOp):
    """Map input-image pixel boxes to the decoded source image with each sample's ``Predictions.geometry``.

    In: boxes in input-space PIXELS (any kind, 0- or 1-based; normalised boxes are refused: convert them with
    ``box_format`` first). Out: :data:`FINAL_BOX_FORMAT` (xyxy, 0-based pixel edges, space source):
    ``x_source = (x_input - offset_x) / scale_x`` (same for y), see :class:`Geometry`.
    """

    name = "to_source"
    Params = ToSourceParams
    params: ToSourceParams

    def __call__(self, preds: Predictions) -> Predictions:
        dets = require_detections(self, preds)
        out = []
        for i, b in enumerate(dets):
            if b.format.space != "input" or b.format.normalized:
                raise RepliscopeError(
                    f"'to_source' maps boxes in input-image pixels, got {b.format.describe()}: "
                    "put 'box_format' (to pixels, space input) before it"
                )
            xyxy = convert(b.boxes, b.format, BoxFormat("xyxy", normalized=False), None)
            g = preds.geometry[i] if i < len(preds.geometry) else None
            if g is None:
                raise RepliscopeError(
                    "'to_source' needs each sample's geometry, but the predictions carry none "
                    "(no 'decode' in the pre-processing?)"
                )
            if self.params.undo == "geometry":
                src = g.to_source_xyxy(xyxy).astype(np.float64)
            elif self.params.undo == "scale_only":
                sy, sx = g.scale
                src = xyxy / np.array([sx, sy, sx, sy])
            else:
                src = xyxy
            if self.params.clip:
                h, w = g.source_hw
                src = np.clip(src, 0.0, np.array([w, h, w, h], np.float64))
            out.append(Boxes(src.astype(np.float32), b.scores, b.classes, FINAL_BOX_FORMAT))
        return with_detections(preds, out)
