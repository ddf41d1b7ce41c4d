"""Detection pitfall variants (issue 11): one registered name each, one stated change to a detection pipeline.

Importing this module registers them in :data:`PITFALLS` with ``tasks = ("object_detection",)``: a sweep
imports it for detection manifests (a classification sweep's variant list stays as it was). Each raises
:class:`NotApplicable` with the reason when the pipeline lacks what it changes (a classification pipeline has
no detection post-processing, so every one of them is "not applicable" there). RGB <-> BGR is the built-in
``color_layout_swapped``, which applies to detection pipelines as they are.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from repliscope.ops.base import Op, PostOp
from repliscope.ops.pipeline import Pipeline
from repliscope.pitfalls.base import (
    Derived,
    NotApplicable,
    Pitfall,
    PitfallContext,
    find,
    find_post,
    make_op,
    rebuild_post,
    simple_pitfall,
)
from repliscope.tasks.detection import ObjectDetection

DETECTION_POST_OPS = ("detections_from_outputs", "anchor_decode")
"""The ops that create detections: a pipeline without one is not a detection pipeline."""
_NORMALIZE = ("scale", "subtract_mean", "divide_std")

_TASKS = (ObjectDetection.name,)


def detection_pitfall(
    name: str, description: str
) -> Callable[[Callable[[Pipeline, PitfallContext], Derived]], type[Pitfall]]:
    """:func:`simple_pitfall` for the object_detection task."""
    return simple_pitfall(name, description, tasks=_TASKS)


STRETCH_PAD_COLOR = [0, 0, 0]
"""Pad colour of the letterbox the ``letterbox_stretch_swapped`` variant puts in place of a stretch."""


def _require_detection(base: Pipeline) -> None:
    if not any(op.name in DETECTION_POST_OPS for op in base.post_ops):
        raise NotApplicable("not a detection pipeline (no detections_from_outputs or anchor_decode)")


def _param(op: Op, key: str) -> Any:
    return op.params.model_dump()[key]


@detection_pitfall(
    "letterbox_stretch_swapped",
    "letterbox <-> stretch: a letterbox replaced by a plain resize to its size, or a stretch by a letterbox",
)
def letterbox_stretch_swapped(base: Pipeline, ctx: PitfallContext) -> Derived:
    _require_detection(base)
    common = ("method", "library", "antialias")
    for i, op in enumerate(base.pre_ops):
        if op.name == "letterbox":
            size = _param(op, "size")
            new = make_op("resize", size=size, keep_aspect_ratio=False, **{k: _param(op, k) for k in common})
            return Derived(base.replace_pre(i, new), f"letterbox {size} -> resize (stretch) to {size}")
    for i, op in enumerate(base.pre_ops):
        if op.name == "resize" and not _param(op, "keep_aspect_ratio"):
            size = _param(op, "size")
            size = size if isinstance(size, list) else [size, size]
            new = make_op(
                "letterbox",
                size=size,
                color=STRETCH_PAD_COLOR,
                position="center",
                order="resize_then_pad",
                **{k: _param(op, k) for k in common},
            )
            return Derived(
                base.replace_pre(i, new),
                f"resize (stretch) to {size} -> letterbox {size} (resize then pad), pad {STRETCH_PAD_COLOR}, centred",
            )
    raise NotApplicable("the pipeline has neither a letterbox nor a stretching resize (keep_aspect_ratio: false)")


def _input_range(ops: list[Op]) -> tuple[float, float]:
    """The image of [0, 255] through scalar scale / subtract_mean / divide_std ops."""
    lo, hi = 0.0, 255.0
    for op in ops:
        value = _param(op, "factor" if op.name == "scale" else "value")
        values = value if isinstance(value, list) else [value]
        if len(set(values)) != 1:
            raise NotApplicable(f"{op.name} has per-channel values {values}: not a [0, 1] or [-1, 1] input range")
        v = float(values[0])
        if op.name == "scale":
            lo, hi = lo * v, hi * v
        elif op.name == "subtract_mean":
            lo, hi = lo - v, hi - v
        else:
            lo, hi = lo / v, hi / v
    return lo, hi


def swap_input_range(base: Pipeline) -> tuple[Pipeline, str, str, list[Any]]:
    """``base`` with its consecutive scale / subtract_mean / divide_std ops replaced by the other input range
    ([0, 1] <-> [-1, 1]): (pipeline, "[a] -> [b]", the old op names, the new ops). NotApplicable otherwise."""
    idx = [i for i, op in enumerate(base.pre_ops) if op.name in _NORMALIZE]
    if not idx:
        raise NotApplicable("no scale / subtract_mean / divide_std op: the model takes the values as they are")
    if idx != list(range(idx[0], idx[-1] + 1)):
        raise NotApplicable("the normalisation ops are not consecutive")
    lo, hi = _input_range([base.pre_ops[i] for i in idx])
    if abs(lo) < 1e-4 and abs(hi - 1) < 1e-4:
        new, text = [make_op("scale", factor=1 / 127.5), make_op("subtract_mean", value=1.0)], "[0, 1] -> [-1, 1]"
    elif abs(lo + 1) < 1e-4 and abs(hi - 1) < 1e-4:
        new, text = [make_op("scale", factor=1 / 255)], "[-1, 1] -> [0, 1]"
    else:
        raise NotApplicable(f"the input range is [{lo:g}, {hi:g}], neither [0, 1] nor [-1, 1]")
    ops = [*base.pre_ops[: idx[0]], *new, *base.pre_ops[idx[-1] + 1 :]]
    old = ", ".join(base.pre_ops[i].name for i in idx)
    return Pipeline(ops, base.post_ops), text, old, new


@detection_pitfall("input_range_swapped", "input range [0, 1] <-> [-1, 1]: the scale / normalisation ops swapped")
def input_range_swapped(base: Pipeline, ctx: PitfallContext) -> Derived:
    _require_detection(base)
    pipeline, text, old, new = swap_input_range(base)
    return Derived(
        pipeline, f"input range {text}: {old} -> {', '.join(f'{op.name} {op.params.model_dump()}' for op in new)}"
    )


def _to_source_undo(base: Pipeline, undo: str, what: str) -> Derived:
    t = find_post(base, "to_source")
    old = _param(base.post_ops[t], "undo")
    if old != "geometry":
        raise NotApplicable(f"to_source already uses undo: {old}")
    return Derived(
        base.replace_post(t, rebuild_post(base.post_ops[t], undo=undo)), f"to_source.undo geometry -> {undo} ({what})"
    )


@detection_pitfall("letterbox_not_undone", "letterbox not undone: boxes rescaled but the padding offset left in")
def letterbox_not_undone(base: Pipeline, ctx: PitfallContext) -> Derived:
    find(base, "letterbox")
    return _to_source_undo(base, "scale_only", "the letterbox padding is not subtracted")


@detection_pitfall("input_pixels_as_source", "boxes in model-input pixels reported as source-image pixels")
def input_pixels_as_source(base: Pipeline, ctx: PitfallContext) -> Derived:
    return _to_source_undo(base, "nothing", "no resize / letterbox / crop inverse")


def _misread(
    base: Pipeline,
    change: Callable[[dict[str, Any]], dict[str, Any] | None],
    what: str,
    anchor_change: Callable[[Op], tuple[PostOp, str]] | None = None,
) -> Derived:
    """Change the format the model's boxes are READ in (the op creating detections), and the 'from' of the
    box_format right after it that was written for the old reading, so the pipeline still runs."""
    _require_detection(base)
    s = find_post(base, *DETECTION_POST_OPS)
    source = base.post_ops[s]
    if source.name == "anchor_decode":
        if anchor_change is None:
            raise NotApplicable(f"the boxes come from anchor_decode (xyxy by construction): no {what} to confuse")
        new_op, text = anchor_change(source)
        return Derived(base.replace_post(s, new_op), text)
    old = _param(source, "format")
    new = change(old)
    if new is None:
        raise NotApplicable(
            f"the model's boxes are {old['kind']} {'normalised' if old['normalized'] else 'pixels'}:"
            f" no {what} to confuse"
        )
    pipe = base.replace_post(s, rebuild_post(source, format=new))
    changed = [f"detections_from_outputs.format {_short(old)} -> {_short(new)}"]
    for j in range(s + 1, len(base.post_ops)):
        op = base.post_ops[j]
        if op.name == "box_format":
            if _param(op, "from") == old:
                pipe = pipe.replace_post(j, rebuild_post(op, **{"from": new}))
                changed.append(f"box_format.from {_short(new)}")
            break
    return Derived(pipe, ", ".join(changed))


def _short(fmt: dict[str, Any]) -> str:
    unit = "normalised" if fmt["normalized"] else ("1-based px" if fmt["one_based"] else "px")
    return f"{fmt['kind']} {unit}"


def _swap_kind(a: str, b: str) -> Callable[[dict[str, Any]], dict[str, Any] | None]:
    def change(fmt: dict[str, Any]) -> dict[str, Any] | None:
        if fmt["kind"] not in (a, b):
            return None
        return {**fmt, "kind": b if fmt["kind"] == a else a}

    return change


@detection_pitfall("box_xyxy_xywh_swapped", "box format misread: x1 y1 x2 y2 read as x y w h, or the reverse")
def box_xyxy_xywh_swapped(base: Pipeline, ctx: PitfallContext) -> Derived:
    return _misread(base, _swap_kind("xyxy", "xywh"), "xyxy / xywh")


def _swap_box_order(op: Op) -> tuple[PostOp, str]:
    old = _param(op, "box_order")
    new = "yxhw" if old == "xywh" else "xywh"
    return rebuild_post(op, box_order=new), f"anchor_decode.box_order {old} -> {new}"


@detection_pitfall(
    "box_yxyx_xyxy_swapped", "box format misread: y and x swapped (yxyx <-> xyxy; the anchor coder's xywh <-> yxhw)"
)
def box_yxyx_xyxy_swapped(base: Pipeline, ctx: PitfallContext) -> Derived:
    return _misread(base, _swap_kind("yxyx", "xyxy"), "yxyx / xyxy", _swap_box_order)


@detection_pitfall("normalized_sides_swapped", "normalised coordinates converted with width and height swapped")
def normalized_sides_swapped(base: Pipeline, ctx: PitfallContext) -> Derived:
    _require_detection(base)
    for j, op in enumerate(base.post_ops):
        if op.name != "box_format":
            continue
        src, dst = _param(op, "from"), _param(op, "to")
        if src["normalized"] == dst["normalized"]:
            continue
        if src["space"] == "source":
            raise NotApplicable(
                "the boxes are normalised to the source image, whose sides come from each decoded "
                "image (no stated size to swap)"
            )
        h, w = _param(op, "image_size")
        if h == w:
            raise NotApplicable(f"the model input is square ({h}x{w}): swapping the sides changes nothing")
        return Derived(
            base.replace_post(j, rebuild_post(op, image_size=[w, h])), f"box_format.image_size [{h}, {w}] -> [{w}, {h}]"
        )
    raise NotApplicable("no box_format between normalised coordinates and pixels")


def _toggle_one_based(fmt: dict[str, Any]) -> dict[str, Any] | None:
    if fmt["normalized"]:
        return None
    return {**fmt, "one_based": not fmt["one_based"]}


@detection_pitfall("box_off_by_one", "off-by-one pixel: the model's pixel boxes read as 1-based (or 0-based) wrongly")
def box_off_by_one(base: Pipeline, ctx: PitfallContext) -> Derived:
    return _misread(base, _toggle_one_based, "pixel index base")


def _class_offset(base: Pipeline, delta: int) -> Derived:
    c = find_post(base, "class_map")
    op = base.post_ops[c]
    table = _param(op, "table")
    if table != "none":
        raise NotApplicable(
            f"class_map reads its index through table {table}: a shifted index falls outside the "
            "table for the first or last class (an error, not a shifted class)"
        )
    old = _param(op, "offset")
    return Derived(
        base.replace_post(c, rebuild_post(op, offset=old + delta)), f"class_map.offset {old} -> {old + delta}"
    )


@detection_pitfall("class_id_plus_1", "class ids shifted by +1 (0-based read as 1-based)")
def class_id_plus_1(base: Pipeline, ctx: PitfallContext) -> Derived:
    return _class_offset(base, 1)


@detection_pitfall("class_id_minus_1", "class ids shifted by -1 (1-based read as 0-based)")
def class_id_minus_1(base: Pipeline, ctx: PitfallContext) -> Derived:
    return _class_offset(base, -1)


def _nms_threshold(base: Pipeline, value: float) -> Derived:
    n = find_post(base, "nms")
    op = base.post_ops[n]
    old = _param(op, "iou_threshold")
    if old == value:
        raise NotApplicable(f"the manifest's NMS IoU threshold is already {value}")
    return Derived(base.replace_post(n, rebuild_post(op, iou_threshold=value)), f"nms.iou_threshold {old} -> {value}")


@detection_pitfall("nms_iou_0.3", "NMS IoU threshold 0.3 instead of the manifest's")
def nms_iou_03(base: Pipeline, ctx: PitfallContext) -> Derived:
    return _nms_threshold(base, 0.3)


@detection_pitfall("nms_iou_0.7", "NMS IoU threshold 0.7 instead of the manifest's")
def nms_iou_07(base: Pipeline, ctx: PitfallContext) -> Derived:
    return _nms_threshold(base, 0.7)


DETECTION_PITFALLS = (
    "letterbox_stretch_swapped",
    "input_range_swapped",
    "letterbox_not_undone",
    "input_pixels_as_source",
    "box_xyxy_xywh_swapped",
    "box_yxyx_xyxy_swapped",
    "normalized_sides_swapped",
    "box_off_by_one",
    "class_id_plus_1",
    "class_id_minus_1",
    "nms_iou_0.3",
    "nms_iou_0.7",
)
"""The names registered here (the sweep of a detection manifest adds them to the built-ins)."""
