"""Segmentation pitfall variants: one registered name each, one stated change to a segmentation pipeline.

Importing this module registers them in :data:`PITFALLS` with ``tasks = ("semantic_segmentation",)``: a sweep
imports it for segmentation manifests. Each raises :class:`NotApplicable` with the reason when the pipeline lacks
what it changes. RGB <-> BGR is the built-in ``color_layout_swapped``. The sweep scores each variant's ΔmIoU
against the reference with a paired bootstrap interval (:meth:`SemanticSegmentation.paired`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from repliscope.ops.base import BuildContext, Op, PostOp
from repliscope.ops.pipeline import Pipeline, build_op
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
from repliscope.tasks.segmentation import SemanticSegmentation

_TASKS = (SemanticSegmentation.name,)
_LABELERS = ("mask_argmax", "mask_threshold")
_NORMALIZE = ("scale", "subtract_mean", "divide_std")


def segmentation_pitfall(
    name: str, description: str
) -> Callable[[Callable[[Pipeline, PitfallContext], Derived]], type[Pitfall]]:
    """:func:`simple_pitfall` for the semantic_segmentation task."""
    return simple_pitfall(name, description, tasks=_TASKS)


def _require_segmentation(base: Pipeline) -> None:
    if not base.post_ops or base.post_ops[0].name != "mask_from_outputs":
        raise NotApplicable("not a segmentation pipeline (no mask_from_outputs)")


def _param(op: Op, key: str) -> Any:
    return op.params.model_dump()[key]


def _post(name: str, **params: Any) -> PostOp:
    op = build_op({"op": name, **params}, "post", BuildContext())
    assert isinstance(op, PostOp)
    return op


def _resize_and_labeler(base: Pipeline) -> tuple[int, int]:
    _require_segmentation(base)
    return find_post(base, "mask_resize"), find_post(base, *_LABELERS)


@segmentation_pitfall("mask_upsample_nearest", "the scores upsampled to the image by nearest instead of bilinear")
def mask_upsample_nearest(base: Pipeline, ctx: PitfallContext) -> Derived:
    r, lab = _resize_and_labeler(base)
    if r > lab:
        raise NotApplicable("the labels are resized (nearest already); the scores are not upsampled")
    if _param(base.post_ops[r], "method") != "bilinear":
        raise NotApplicable("mask_resize is not bilinear")
    return Derived(
        base.replace_post(r, rebuild_post(base.post_ops[r], method="nearest")),
        "mask_resize.method bilinear -> nearest (on the scores, before the labels)",
    )


@segmentation_pitfall(
    "mask_labels_before_upsampling", "argmax / threshold at the model's resolution, the labels then upsampled (nearest)"
)
def mask_labels_before_upsampling(base: Pipeline, ctx: PitfallContext) -> Derived:
    r, lab = _resize_and_labeler(base)
    if r > lab:
        raise NotApplicable("the labels are already made before mask_resize")
    ops = list(base.post_ops)
    labeler = ops.pop(lab)
    resize = rebuild_post(ops[r], method="nearest")
    ops[r] = labeler
    ops.insert(r + 1, resize)
    return Derived(Pipeline(base.pre_ops, ops), f"{labeler.name} moved before mask_resize (method -> nearest)")


def _threshold(value: float) -> Callable[[Pipeline, PitfallContext], Derived]:
    def derive(base: Pipeline, ctx: PitfallContext) -> Derived:
        _require_segmentation(base)
        t = find_post(base, "mask_threshold")
        old = _param(base.post_ops[t], "threshold")
        if abs(old - value) < 1e-12:
            raise NotApplicable(f"the threshold is {old} already")
        return Derived(
            base.replace_post(t, rebuild_post(base.post_ops[t], threshold=value)),
            f"mask_threshold.threshold {old} -> {value}",
        )

    return derive


for _value in (0.3, 0.7):
    simple_pitfall(f"mask_threshold_{_value}", f"the mask threshold set to {_value}", tasks=_TASKS)(_threshold(_value))


def _offset(delta: int) -> Callable[[Pipeline, PitfallContext], Derived]:
    def derive(base: Pipeline, ctx: PitfallContext) -> Derived:
        _, lab = _resize_and_labeler(base)
        ops = list(base.post_ops)
        ops.insert(lab + 1, _post("mask_label_offset", offset=delta))
        return Derived(
            Pipeline(base.pre_ops, ops),
            f"mask_label_offset {delta:+d} after {ops[lab].name} (class ids "
            "shifted: a background index / class-id offset mistake)",
        )

    return derive


simple_pitfall("mask_class_id_plus_1", "predicted class ids shifted by +1", tasks=_TASKS)(_offset(1))
simple_pitfall("mask_class_id_minus_1", "predicted class ids shifted by -1", tasks=_TASKS)(_offset(-1))


@segmentation_pitfall("mask_void_as_background", "the ground truth's void pixels scored as background")
def mask_void_as_background(base: Pipeline, ctx: PitfallContext) -> Derived:
    _require_segmentation(base)
    if any(op.name == "mask_void" for op in base.post_ops):
        raise NotApplicable("the pipeline already says how void pixels are scored (mask_void)")
    return Derived(
        Pipeline(base.pre_ops, [*base.post_ops, _post("mask_void", policy="as_background")]),
        "mask_void policy: as_background (void pixels counted as background instead of left out)",
    )


@segmentation_pitfall(
    "segmentation_letterbox_stretch_swapped",
    "letterbox <-> stretch: a stretch to the input size replaced by a letterbox, or back",
)
def segmentation_letterbox_stretch_swapped(base: Pipeline, ctx: PitfallContext) -> Derived:
    _require_segmentation(base)
    i = find(base, "warp_resize", "resize", "letterbox")
    op = base.pre_ops[i]
    size = ctx.input_hw
    if op.name == "letterbox":
        new = make_op(
            "resize",
            size=list(size),
            keep_aspect_ratio=False,
            method=_param(op, "method"),
            library=_param(op, "library"),
            antialias=_param(op, "antialias"),
        )
    else:
        if op.name == "resize" and _param(op, "keep_aspect_ratio"):
            raise NotApplicable("the resize keeps the aspect ratio: not a stretch")
        lib = "opencv" if op.name == "warp_resize" else _param(op, "library")
        antialias = False if op.name == "warp_resize" else _param(op, "antialias")
        new = make_op(
            "letterbox",
            size=list(size),
            color=[0, 0, 0],
            position="center",
            order="resize_then_pad",
            method=_param(op, "method"),
            library=lib,
            antialias=antialias,
        )
    r = find_post(base, "mask_resize")
    how = (
        "undone exactly by mask_resize (mapping: geometry)"
        if _param(base.post_ops[r], "mapping") == "geometry"
        else "NOT undone: mask_resize stretches the whole map back (mapping: stretch)"
    )
    return Derived(base.replace_pre(i, new), f"{op.name} -> {new.name} {list(size)}; the padding is {how}")


@segmentation_pitfall(
    "segmentation_half_pixel_corner_aligned_swapped",
    "corner-aligned <-> half-pixel sampling: MediaPipe's warp replaced by cv2.resize, or back",
)
def segmentation_half_pixel_corner_aligned_swapped(base: Pipeline, ctx: PitfallContext) -> Derived:
    _require_segmentation(base)
    i = find(base, "warp_resize", "resize")
    op = base.pre_ops[i]
    h, w = ctx.input_hw
    if op.name == "warp_resize":
        new = make_op(
            "resize",
            size=[h, w],
            keep_aspect_ratio=False,
            method=_param(op, "method"),
            library="opencv",
            antialias=False,
        )
        text = "warp_resize (corner-aligned) -> resize opencv (half-pixel, cv2.resize)"
    else:
        if _param(op, "keep_aspect_ratio") or _param(op, "method") != "bilinear":
            raise NotApplicable("only a bilinear stretch has a corner-aligned twin (warp_resize)")
        new = make_op(
            "warp_resize", size=[h, w], method="bilinear", border="constant", border_value=0, library="opencv"
        )
        text = "resize (half-pixel) -> warp_resize (corner-aligned, MediaPipe's)"
    return Derived(base.replace_pre(i, new), text)


@segmentation_pitfall(
    "segmentation_input_range_swapped", "input range [0, 1] <-> [-1, 1]: the scale / normalisation ops swapped"
)
def segmentation_input_range_swapped(base: Pipeline, ctx: PitfallContext) -> Derived:
    from repliscope.pitfalls.detection_variants import swap_input_range

    _require_segmentation(base)
    pipeline, text, _, _ = swap_input_range(base)
    return Derived(pipeline, f"input range {text}")
