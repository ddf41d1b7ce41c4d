"""YOLO / Darknet pitfall variants: one registered name each, one stated change to a Darknet-style pipeline
(``darknet_letterbox`` -> ``yolo_decode`` -> ``darknet_correct_boxes`` -> ``darknet_nms`` -> ``darknet_boxes``).

Registered for ``object_detection`` when imported (the sweep imports it with the detection variants); each is
"not applicable" with the reason on a pipeline without the op it changes. RGB <-> BGR is the built-in
``color_layout_swapped`` (it flips ``decode``'s channels), which applies to these pipelines as they are.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from repliscope.ops.decode import LIBJPEG_ONLY
from repliscope.ops.pipeline import Pipeline
from repliscope.pitfalls.base import (
    Derived,
    NotApplicable,
    Parameter,
    Pitfall,
    PitfallContext,
    find,
    find_post,
    rebuild,
    rebuild_or_explain,
    rebuild_post,
    simple_pitfall,
)
from repliscope.tasks.detection import ObjectDetection

_TASKS = (ObjectDetection.name,)
DEMO_THRESHOLD = 0.25
"""``detector test``'s default ``-thresh`` (a display threshold), against ``detector valid``'s .005 for mAP."""


def yolo_pitfall(
    name: str, description: str
) -> Callable[[Callable[[Pipeline, PitfallContext], Derived]], type[Pitfall]]:
    return simple_pitfall(name, description, tasks=_TASKS)


def yolo_pitfall_with(
    name: str, description: str, parameters: tuple[Parameter, ...]
) -> Callable[[Callable[..., Derived]], type[Pitfall]]:
    """:func:`yolo_pitfall` of a mistake with degrees (:class:`Parameter`)."""
    return simple_pitfall(name, description, tasks=_TASKS, parameters=parameters)


@yolo_pitfall(
    "darknet_letterbox_stretch",
    "Darknet letterbox <-> stretch: resize_image straight to the input size (no border), boxes undone as a stretch",
)
def darknet_letterbox_stretch(base: Pipeline, ctx: PitfallContext) -> Derived:
    i = find(base, "darknet_letterbox")
    c = find_post(base, "darknet_correct_boxes")
    keep = bool(base.pre_ops[i].params.model_dump()["keep_aspect_ratio"])
    # a stretch has no border to pad first: the letterbox the variant goes back to is Darknet's own
    pipeline = base.replace_pre(i, rebuild(base.pre_ops[i], keep_aspect_ratio=not keep, order="resize_then_pad"))
    pipeline = pipeline.replace_post(c, rebuild_post(base.post_ops[c], letterbox=not keep))
    what = "letterbox -> stretch" if keep else "stretch -> letterbox"
    return Derived(
        pipeline,
        f"{what} (darknet_letterbox keep_aspect_ratio {keep} -> {not keep}, "
        f"darknet_correct_boxes letterbox {keep} -> {not keep})",
    )


@yolo_pitfall(
    "darknet_nms_sort_obj_swapped", "do_nms_sort (detector test/valid) <-> do_nms_obj (the Python example darknet.py)"
)
def darknet_nms_sort_obj_swapped(base: Pipeline, ctx: PitfallContext) -> Derived:
    n = find_post(base, "darknet_nms")
    method = base.post_ops[n].params.model_dump()["method"]
    if method not in ("sort", "obj"):
        raise NotApplicable(f"darknet_nms method is {method!r}, neither sort nor obj")
    other = "obj" if method == "sort" else "sort"
    return Derived(
        base.replace_post(n, rebuild_post(base.post_ops[n], method=other)), f"darknet_nms method {method} -> {other}"
    )


@yolo_pitfall(
    "darknet_nms_class_agnostic", "per-class NMS -> one class-agnostic NMS on each box's best class probability"
)
def darknet_nms_class_agnostic(base: Pipeline, ctx: PitfallContext) -> Derived:
    n = find_post(base, "darknet_nms")
    method = base.post_ops[n].params.model_dump()["method"]
    if method == "agnostic":
        raise NotApplicable("darknet_nms is already class-agnostic")
    return Derived(
        base.replace_post(n, rebuild_post(base.post_ops[n], method="agnostic")),
        f"darknet_nms method {method} -> agnostic",
    )


@yolo_pitfall("yolo_objectness_not_multiplied", "class probabilities scored alone: objectness x class -> class")
def yolo_objectness_not_multiplied(base: Pipeline, ctx: PitfallContext) -> Derived:
    d = find_post(base, "yolo_decode")
    if not base.post_ops[d].params.model_dump()["multiply_objectness"]:
        raise NotApplicable("yolo_decode already scores classes alone")
    return Derived(
        base.replace_post(d, rebuild_post(base.post_ops[d], multiply_objectness=False)),
        "yolo_decode multiply_objectness true -> false",
    )


@yolo_pitfall(
    "yolo_demo_threshold",
    f"the demo threshold: yolo_decode threshold -> {DEMO_THRESHOLD} (detector test) instead of the mAP "
    "protocol's .005 (detector valid)",
)
def yolo_demo_threshold(base: Pipeline, ctx: PitfallContext) -> Derived:
    d = find_post(base, "yolo_decode")
    old = base.post_ops[d].params.model_dump()["threshold"]
    if old == DEMO_THRESHOLD:
        raise NotApplicable(f"yolo_decode threshold is already {DEMO_THRESHOLD}")
    return Derived(
        base.replace_post(d, rebuild_post(base.post_ops[d], threshold=DEMO_THRESHOLD)),
        f"yolo_decode threshold {old} -> {DEMO_THRESHOLD}",
    )


@yolo_pitfall("yolo_anchors_other_head", "each yolo output decoded with the other head's anchor mask (masks reversed)")
def yolo_anchors_other_head(base: Pipeline, ctx: PitfallContext) -> Derived:
    d = find_post(base, "yolo_decode")
    masks = base.post_ops[d].params.model_dump()["masks"]
    if len(masks) < 2:
        raise NotApplicable("yolo_decode has a single head")
    swapped = list(reversed(masks))
    return Derived(
        base.replace_post(d, rebuild_post(base.post_ops[d], masks=swapped)), f"yolo_decode masks {masks} -> {swapped}"
    )


GREY_FILL = 114 / 255
"""The letterbox grey of the TF Model Garden's YOLO and of Ultralytics (114 in 0-255), in Darknet's [0, 1] units."""
DARKNET_FILL = 0.5
"""``letterbox_image``'s border: ``fill_image(boxed, .5)``."""


@yolo_pitfall(
    "darknet_letterbox_fill_114",
    "letterbox border 0.5 (Darknet's fill_image .5) <-> 114/255 (the Model Garden's and Ultralytics' grey)",
)
def darknet_letterbox_fill_114(base: Pipeline, ctx: PitfallContext) -> Derived:
    i = find(base, "darknet_letterbox")
    params = base.pre_ops[i].params.model_dump()
    if not params["keep_aspect_ratio"]:
        raise NotApplicable("darknet_letterbox stretches (keep_aspect_ratio false): there is no border")
    old = params["fill"]
    if old not in (DARKNET_FILL, GREY_FILL):
        raise NotApplicable(f"darknet_letterbox fill is {old}, neither Darknet's {DARKNET_FILL} nor 114/255")
    new = GREY_FILL if old == DARKNET_FILL else DARKNET_FILL
    return Derived(
        base.replace_pre(i, rebuild(base.pre_ops[i], fill=new)),
        f"darknet_letterbox fill {old:g} -> {new:.6g}" + (" (114/255)" if new == GREY_FILL else ""),
    )


GREY_LEVELS = (0, 114, 127, 128, 255)
"""The border greys the diagnosis tries (0-255 units): black, the Model Garden's / Ultralytics' 114, the two
mid-greys, white; Darknet's 0.5 too in [0, 1] units."""


def _levels(base: Pipeline, i: int) -> float:
    """255 when the op at ``i`` sees [0, 1] pixels (a divide_std 255 or a scale 1/255 before it), else 1: what
    a 0-255 grey is divided by."""
    for op in base.pre_ops[:i]:
        p = op.params.model_dump()
        if op.name == "divide_std" and set(np.atleast_1d(p["value"]).tolist()) == {255.0}:
            return 255.0
        if op.name == "scale" and abs(p["factor"] - 1 / 255) < 1e-9:
            return 255.0
    return 1.0


def _fill_of(base: Pipeline) -> tuple[int, float | list[float], float]:
    """(index of the letterbox, its fill (darknet) or colour (letterbox), what a 0-255 grey is divided by)."""
    i = find(base, "darknet_letterbox", "letterbox")
    op = base.pre_ops[i]
    p = op.params.model_dump()
    if op.name == "darknet_letterbox":
        if not p["keep_aspect_ratio"]:
            raise NotApplicable("darknet_letterbox stretches (keep_aspect_ratio false): there is no border")
        return i, float(p["fill"]), 255.0
    return i, [float(c) for c in p["color"]], _levels(base, i)


def _fill_search(base: Pipeline, ctx: PitfallContext) -> list[float]:
    try:
        _, old, levels = _fill_of(base)
    except NotApplicable:
        return []
    values = [g / levels for g in GREY_LEVELS] + ([DARKNET_FILL] if levels != 1.0 else [])
    current = old if isinstance(old, float) else (old[0] if len(set(old)) == 1 else None)
    return sorted({v for v in values if current is None or abs(v - current) > 1e-9})


@yolo_pitfall_with(
    "letterbox_fill",
    "the letterbox border in another grey (darknet_letterbox fill, letterbox color): default black (0), or "
    "114 grey where the manifest's border is black",
    (
        Parameter(
            "fill",
            "the border value, in the units of the letterbox's input (0-255, or 0-1)",
            _fill_search,
            values=f"the greys {', '.join(map(str, GREY_LEVELS))} in the letterbox input's units (divided by 255 "
            f"where it sees [0, 1] pixels; then Darknet's {DARKNET_FILL} too), not the manifest's own",
            default="0 (black); 114 grey where the manifest's border is black",
        ),
    ),
)
def letterbox_fill(base: Pipeline, ctx: PitfallContext, fill: float | None = None) -> Derived:
    i, old, levels = _fill_of(base)
    op = base.pre_ops[i]
    black = old == 0.0 if isinstance(old, float) else all(c == 0.0 for c in old)
    new = (114 / levels if black else 0.0) if fill is None else float(fill)
    if op.name == "darknet_letterbox":
        if new == old:
            raise NotApplicable(f"darknet_letterbox fill is already {old:g}")
        return Derived(
            base.replace_pre(i, rebuild_or_explain(op, f"fill {new:g}", fill=new)),
            f"darknet_letterbox fill {old:g} -> {new:.6g}",
        )
    color = [new] * 3
    if color == old:
        raise NotApplicable(f"letterbox color is already {old}")
    return Derived(
        base.replace_pre(i, rebuild_or_explain(op, f"color {color}", color=color)),
        f"letterbox color {old} -> [{', '.join(f'{c:.6g}' for c in color)}]",
    )


@yolo_pitfall(
    "darknet_letterbox_pad_then_resize",
    "letterbox_image (resize, then embed in the border) <-> pad the source to the network's aspect ratio, then "
    "resize the padded canvas (boxes still undone as Darknet's letterbox)",
)
def darknet_letterbox_pad_then_resize(base: Pipeline, ctx: PitfallContext) -> Derived:
    i = find(base, "darknet_letterbox")
    params = base.pre_ops[i].params.model_dump()
    if not params["keep_aspect_ratio"]:
        raise NotApplicable("darknet_letterbox stretches (keep_aspect_ratio false): nothing is padded")
    old = params["order"]
    new = "pad_then_resize" if old == "resize_then_pad" else "resize_then_pad"
    return Derived(base.replace_pre(i, rebuild(base.pre_ops[i], order=new)), f"darknet_letterbox order {old} -> {new}")


@yolo_pitfall(
    "decoder_tensorflow",
    "JPEG decoded by TensorFlow (tf.io.decode_image: libjpeg-turbo JDCT_IFAST, the Model Garden's) instead of the "
    "manifest's decoder (a TensorFlow decode becomes OpenCV's)",
)
def decoder_tensorflow(base: Pipeline, ctx: PitfallContext) -> Derived:
    d = find(base, "decode")
    params = base.pre_ops[d].params.model_dump()
    old = params["library"]
    new = "opencv" if old == "tensorflow" else "tensorflow"
    unset = {key: None for key in LIBJPEG_ONLY if key in params}  # the libjpeg_turbo-only settings
    new_op = rebuild(base.pre_ops[d], library=new, **unset)
    return Derived(base.replace_pre(d, new_op), f"decode.library {old} -> {new}")


OTHER_INPUT_SIZE = 608
"""YOLOv3's other published input size (the Darknet site's 608 row): the same cfg and weights at 608 x 608."""


@yolo_pitfall(
    "yolo_input_608",
    f"the network run at {OTHER_INPUT_SIZE} x {OTHER_INPUT_SIZE} instead of the manifest's size (a "
    "size-agnostic Darknet cfg: darknet_letterbox, yolo_decode, darknet_correct_boxes and the model input "
    "all at the other size)",
)
def yolo_input_608(base: Pipeline, ctx: PitfallContext) -> Derived:
    if ctx.input_layout != "NCHW" or len(ctx.input_shape) != 4:
        raise NotApplicable(f"the model input is {ctx.input_layout} {list(ctx.input_shape)}, not a Darknet NCHW image")
    i = find(base, "darknet_letterbox")
    d = find_post(base, "yolo_decode")
    c = find_post(base, "darknet_correct_boxes")
    old = ctx.input_hw
    new = [OTHER_INPUT_SIZE, OTHER_INPUT_SIZE]
    if list(old) == new:
        raise NotApplicable(f"the model input is already {OTHER_INPUT_SIZE} x {OTHER_INPUT_SIZE}")
    pipeline = base.replace_pre(i, rebuild(base.pre_ops[i], size=new))
    pipeline = pipeline.replace_post(d, rebuild_post(base.post_ops[d], input_size=new))
    pipeline = pipeline.replace_post(c, rebuild_post(pipeline.post_ops[c], input_size=new))
    shape = [ctx.input_shape[1], *new]
    return Derived(
        pipeline,
        f"input {old[0]}x{old[1]} -> {new[0]}x{new[1]} (darknet_letterbox size, yolo_decode "
        f"and darknet_correct_boxes input_size, model input {shape})",
        settings={"input_shape": shape},
    )
