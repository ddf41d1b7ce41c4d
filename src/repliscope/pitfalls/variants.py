"""The built-in pitfall variants (MLModelScope Table 1 and friends), one registered name each."""

from __future__ import annotations

from repliscope.ops.base import Op, PreOp
from repliscope.ops.decode import LIBJPEG_ONLY
from repliscope.ops.pipeline import Pipeline
from repliscope.pitfalls.base import (
    Derived,
    NotApplicable,
    Parameter,
    PitfallContext,
    find,
    make_op,
    rebuild,
    rebuild_or_explain,
    simple_pitfall,
)

# ImageNet mean / std of the torchvision convention, RGB order, in [0, 1] units
TORCHVISION_MEAN = (0.485, 0.456, 0.406)
TORCHVISION_STD = (0.229, 0.224, 0.225)
_NORMALIZE = ("subtract_mean", "divide_std", "scale")


@simple_pitfall("color_layout_swapped", "RGB and BGR swapped: the model sees the colour channels reversed")
def color_layout_swapped(base: Pipeline, ctx: PitfallContext) -> Derived:
    i = find(base, "color_layout", "decode", last=True)
    op = base.pre_ops[i]
    key = "order" if op.name == "color_layout" else "channels"
    old = getattr(op.params, key)
    new = "BGR" if old == "RGB" else "RGB"
    return Derived(base.replace_pre(i, rebuild(op, **{key: new})), f"{op.name}.{key}: {old} -> {new}")


@simple_pitfall("data_layout_reshape", "NHWC buffer reshaped to NCHW instead of transposed")
def data_layout_reshape(base: Pipeline, ctx: PitfallContext) -> Derived:
    i = find(base, "data_layout")
    layout = base.pre_ops[i].params.layout  # type: ignore[attr-defined]
    if layout != "NCHW":
        raise NotApplicable(
            f"data_layout is {layout}: the decoded HWC image needs no transpose, so there is no transpose to get wrong"
        )
    return Derived(
        base.replace_pre(i, make_op("reshape_layout", layout=layout)),
        "data_layout (transpose HWC->CHW) -> reshape of the HWC buffer to CHW",
    )


@simple_pitfall("no_center_crop", "no center crop: the whole image squashed to the input size")
def no_center_crop(base: Pipeline, ctx: PitfallContext) -> Derived:
    c = find(base, "center_crop")
    r = find(base, "resize")
    if r > c:
        raise NotApplicable("the resize comes after the center crop")
    h, w = ctx.input_hw
    resize = base.pre_ops[r]
    old = resize.params.size  # type: ignore[attr-defined]
    pipe = base.replace_pre(r, rebuild(resize, size=[h, w], keep_aspect_ratio=False)).remove_pre(c)
    return Derived(pipe, f"resize.size {old} (keep aspect) + center_crop -> resize to [{h}, {w}], no crop")


@simple_pitfall("crop_fraction_1.0", "crop percentage 1.0 instead of the manifest's (resize straight to the crop)")
def crop_fraction_full(base: Pipeline, ctx: PitfallContext) -> Derived:
    c = find(base, "center_crop")
    r = find(base, "resize")
    resize, crop = base.pre_ops[r], base.pre_ops[c]
    if not resize.params.keep_aspect_ratio or not isinstance(resize.params.size, int):  # type: ignore[attr-defined]
        raise NotApplicable("the resize does not scale the shorter side")
    h, w = ctx.input_hw
    if h != w:
        raise NotApplicable(f"the input is not square ({h}x{w})")
    old = resize.params.size  # type: ignore[attr-defined]
    if old == h:
        raise NotApplicable(f"the crop fraction is already 1.0 (resize {old}, crop {h})")
    del crop
    return Derived(
        base.replace_pre(r, rebuild(resize, size=h)), f"resize.size {old} -> {h} (crop fraction {h / old:.3f} -> 1.0)"
    )


RESIZE_FAMILY = ("resize", "letterbox", "darknet_letterbox", "warp_resize")
"""Every pre op that resamples the image: the resize variants change the first one of them (a letterbox and
Darknet's letterbox resample with the resize op's parameters)."""
LIBRARIES = ("pillow", "opencv", "torch", "go_imaging")
"""The resize libraries the diagnosis tries in place of the manifest's (``resize_library_swapped``'s degrees;
``tensorflow`` is left out of the search: importing TensorFlow costs seconds. Darknet's ``resize_image`` is tried
for ``darknet_letterbox``)."""
SWITCHABLE = ("torch", "tensorflow")
"""Resize libraries with an antialias switch for bilinear and bicubic (``resize_antialias_toggled`` keeps them)."""
DARKNET_RESIZE = "darknet"
"""``resize_library_swapped``'s library word for Darknet's own ``resize_image`` (``darknet_letterbox`` only)."""


def default_antialias(library: str, method: str) -> bool:
    """What a library does when nobody sets antialiasing: pillow and imaging always filter, OpenCV only with
    INTER_AREA, ``torch.nn.functional.interpolate`` and ``tf.image.resize`` not (area averages by definition)."""
    if library in ("pillow", "go_imaging"):
        return True
    return method == "area"


def _resampling(op: Op) -> tuple[str, str, bool]:
    """(library, method, antialias) of a resize-family op; Darknet's own resize_image is (darknet, bilinear,
    False)."""
    p = op.params.model_dump()
    if op.name == "darknet_letterbox":
        return p["resize_library"], p["resize_method"], p["resize_antialias"]
    if op.name == "warp_resize":
        return p["library"], p["method"], False
    return p["library"], p["method"], p["antialias"]


def _resampled(op: Op, what: str, library: str, method: str, antialias: bool) -> PreOp:
    """``op`` resampling with (library, method, antialias); NotApplicable when the op refuses the combination."""
    if op.name == "darknet_letterbox":
        if library == DARKNET_RESIZE:
            method, antialias = "bilinear", False
        return rebuild_or_explain(op, what, resize_library=library, resize_method=method, resize_antialias=antialias)
    return rebuild_or_explain(op, what, method=method, library=library, antialias=antialias)


def _describe(library: str, method: str) -> str:
    return "Darknet's resize_image (bilinear, corners aligned)" if library == DARKNET_RESIZE else f"{library} {method}"


def _resize_method(base: Pipeline, method: str) -> Derived:
    r = find(base, *RESIZE_FAMILY)
    op = base.pre_ops[r]
    library, old, antialias = _resampling(op)
    if op.name == "warp_resize":
        if old == method:
            raise NotApplicable(f"the manifest already resizes with {method}")
        if method not in ("bilinear", "nearest"):
            raise NotApplicable(f"warp_resize samples with bilinear or nearest (cv2.warpPerspective), not {method}")
        new_op = rebuild_or_explain(op, f"warp_resize method {method}", method=method)
        return Derived(base.replace_pre(r, new_op), f"{op.name}.method {old} -> {method}")
    if library == DARKNET_RESIZE:
        if method == "bilinear":
            raise NotApplicable(
                "darknet_letterbox resamples with Darknet's resize_image, already bilinear (corners aligned); "
                "another library's bilinear is resize_library_swapped"
            )
        new_op = _resampled(op, f"opencv {method}", "opencv", method, default_antialias("opencv", method))
        return Derived(
            base.replace_pre(r, new_op), f"{op.name} resampling {_describe(library, old)} -> opencv {method}"
        )
    if old == method:
        raise NotApplicable(f"the manifest already resizes with {method}")
    if library in ("pillow", "go_imaging", "opencv") or method in ("nearest", "area"):
        antialias = default_antialias(library, method)
    new_op = _resampled(op, f"{library} {method}", library, method, antialias)
    return Derived(base.replace_pre(r, new_op), f"{op.name}.method {old} -> {method}")


@simple_pitfall(
    "resize_bilinear", "bilinear instead of the manifest's interpolation (resize, letterbox, darknet_letterbox, warp)"
)
def resize_bilinear(base: Pipeline, ctx: PitfallContext) -> Derived:
    return _resize_method(base, "bilinear")


@simple_pitfall(
    "resize_nearest",
    "nearest-neighbour instead of the manifest's interpolation (resize, letterbox, darknet_letterbox, warp)",
)
def resize_nearest(base: Pipeline, ctx: PitfallContext) -> Derived:
    return _resize_method(base, "nearest")


def _library_search(base: Pipeline, ctx: PitfallContext) -> list[str]:
    try:
        op = base.pre_ops[find(base, *RESIZE_FAMILY)]
    except NotApplicable:
        return []
    current = _resampling(op)[0]
    extra = (DARKNET_RESIZE,) if op.name == "darknet_letterbox" else ()
    return [lib for lib in (*LIBRARIES, *extra) if lib != current]


@simple_pitfall(
    "resize_library_swapped",
    "the resampling (resize, letterbox, darknet_letterbox) done by another library, with that library's default "
    "antialiasing (default: pillow <-> opencv; Darknet's resize_image -> cv2.resize)",
    parameters=(
        Parameter(
            "library",
            "the library resampling instead (pillow, opencv, torch, go_imaging; darknet for darknet_letterbox)",
            _library_search,
            values="pillow, opencv, torch, go_imaging (not the manifest's own); darknet for darknet_letterbox",
            default="opencv where the manifest resamples with pillow, torch or Darknet's resize_image, else pillow",
        ),
    ),
)
def resize_library_swapped(base: Pipeline, ctx: PitfallContext, library: str | None = None) -> Derived:
    r = find(base, *RESIZE_FAMILY)
    op = base.pre_ops[r]
    if op.name == "warp_resize":
        raise NotApplicable(
            "warp_resize's libraries are one OpenCV warp (installed, or OpenCV 4's reproduced); a cv2.resize "
            "stretch instead of the warp is segmentation_half_pixel_corner_aligned_swapped"
        )
    old, method, antialias = _resampling(op)
    new = library
    if new is None:
        new = "opencv" if old in ("pillow", "torch", DARKNET_RESIZE) else "pillow"
    if new == old:
        raise NotApplicable(f"the manifest already resamples with {old}")
    if new == DARKNET_RESIZE and op.name != "darknet_letterbox":
        raise NotApplicable(f"Darknet's resize_image is darknet_letterbox's, not {op.name}'s")
    if old == DARKNET_RESIZE:
        aa = default_antialias(new, method)
        new_op = _resampled(op, f"{new} {method}", new, method, aa)
        change = f"{op.name} resampling {_describe(old, method)} -> {new} {method} (antialias {aa})"
        return Derived(base.replace_pre(r, new_op), change)
    if new == DARKNET_RESIZE:
        new_op = _resampled(op, "Darknet's resize_image", new, "bilinear", False)
        return Derived(base.replace_pre(r, new_op), f"{op.name} resampling {old} {method} -> {_describe(new, method)}")
    aa = default_antialias(new, method)
    new_op = _resampled(op, f"{new} {method}", new, method, aa)
    where = f"{op.name}.resize" if op.name == "darknet_letterbox" else op.name
    return Derived(base.replace_pre(r, new_op), f"{where}.library {old} -> {new} (antialias {antialias} -> {aa})")


@simple_pitfall(
    "resize_antialias_toggled",
    "resize (or letterbox) antialiasing switched (on <-> off), same interpolation; Darknet's resize_image (none) "
    "-> an antialiased bilinear",
)
def resize_antialias_toggled(base: Pipeline, ctx: PitfallContext) -> Derived:
    r = find(base, *RESIZE_FAMILY)
    op = base.pre_ops[r]
    library, method, antialias = _resampling(op)
    if op.name == "warp_resize":
        raise NotApplicable("warp_resize samples points (cv2.warpPerspective): antialiasing is no switch of it")
    if method in ("nearest", "area", "lanczos"):
        raise NotApplicable(f"antialiasing is not a separate switch for {method} in every library")
    # pillow cannot turn antialiasing off; torch's interpolate has the same kernels with the switch, and
    # tf.image.resize has its own (a TensorFlow resize keeps its library)
    target = library if library in SWITCHABLE else "torch"
    new_op = _resampled(op, f"{target} {method} antialias {not antialias}", target, method, not antialias)
    if library == DARKNET_RESIZE:
        change = f"{op.name} resampling {_describe(library, method)} -> torch bilinear with antialias"
        return Derived(base.replace_pre(r, new_op), change)
    where = f"library {library}" if target == library else f"library {library} -> torch"
    return Derived(
        base.replace_pre(r, new_op),
        f"{op.name}.antialias {antialias} -> {not antialias} ({where}, which has the switch)",
    )


@simple_pitfall("decoder_swapped", "JPEG decoded by the other library (pillow <-> opencv; libjpeg_turbo -> pillow)")
def decoder_swapped(base: Pipeline, ctx: PitfallContext) -> Derived:
    d = find(base, "decode")
    op = base.pre_ops[d]
    old = op.params.library  # type: ignore[attr-defined]
    new = "opencv" if old == "pillow" else "pillow"
    # libjpeg_turbo -> pillow: Pillow's default decode (full size, fancy upsampling, ISLOW)
    unset = dict.fromkeys(LIBJPEG_ONLY) if old == "libjpeg_turbo" else {}
    return Derived(base.replace_pre(d, rebuild(op, library=new, **unset)), f"decode.library {old} -> {new}")


def _norm_after_cast(base: Pipeline) -> tuple[int, list[int]]:
    """(index of the cast to float, indices of the normalisation ops directly after it)."""
    t = find(base, "to_float", "cast")
    norm = [i for i in range(t + 1, len(base.pre_ops)) if base.pre_ops[i].name in _NORMALIZE]
    if not norm:
        raise NotApplicable("no subtract_mean / divide_std / scale after the cast to float")
    if norm != list(range(t + 1, t + 1 + len(norm))):
        raise NotApplicable("the normalization ops do not directly follow the cast")
    return t, norm


def _steps_search(base: Pipeline, ctx: PitfallContext) -> list[int]:
    try:
        return list(range(1, len(_norm_after_cast(base)[1]) + 1))
    except NotApplicable:
        return []


@simple_pitfall(
    "normalize_before_cast",
    "mean/std applied to the bytes with integer semantics before the cast to float (all of them, or the first "
    "`steps` normalisation ops; the rest stay in float)",
    parameters=(
        Parameter(
            "steps",
            "how many of the normalisation ops after the cast run before it, on the integers (default: all)",
            _steps_search,
            values="1 to the number of subtract_mean / divide_std / scale ops directly after the cast",
            default="all of them",
        ),
    ),
)
def normalize_before_cast(base: Pipeline, ctx: PitfallContext, steps: int | None = None) -> Derived:
    t, norm = _norm_after_cast(base)
    n = len(norm) if steps is None else steps
    if not 1 <= n <= len(norm):
        raise NotApplicable(f"steps {steps}: the pipeline has {len(norm)} normalisation op(s) after the cast")
    ops = list(base.pre_ops)
    cast = ops.pop(t)
    ops.insert(t + n, cast)
    before = ", ".join(base.pre_ops[i].name for i in norm[:n])
    after = ", ".join(base.pre_ops[i].name for i in norm[n:])
    rest = f"; {after} stay{'s' if n == len(norm) - 1 else ''} in float" if after else ""
    return Derived(Pipeline(ops, base.post_ops), f"{cast.name} moved after {before} (uint8 arithmetic, wrapping){rest}")


CROP_OFFSET_RANGE = 2
"""The crop offsets the diagnosis tries: every [rows, columns] with |offset| <= 2 but [0, 0] (24)."""
DEFAULT_CROP_OFFSET = (1, 1)
"""The sweep's crop offset: the window one pixel down and right of the centre."""


def _offset_search(base: Pipeline, ctx: PitfallContext) -> list[list[int]]:
    k = CROP_OFFSET_RANGE
    return [[dy, dx] for dy in range(-k, k + 1) for dx in range(-k, k + 1) if (dy, dx) != (0, 0)]


@simple_pitfall(
    "center_crop_offset",
    "the centre crop's window moved by [rows, columns] (a port's floor where torchvision rounds, an off-by-one; "
    f"default {list(DEFAULT_CROP_OFFSET)})",
    parameters=(
        Parameter(
            "offset",
            f"[rows, columns], each within +-{CROP_OFFSET_RANGE}",
            _offset_search,
            values=f"[rows, columns], each from -{CROP_OFFSET_RANGE} to {CROP_OFFSET_RANGE}, not [0, 0]",
            default=str(list(DEFAULT_CROP_OFFSET)),
        ),
    ),
)
def center_crop_offset(base: Pipeline, ctx: PitfallContext, offset: list[int] | None = None) -> Derived:
    c = find(base, "center_crop")
    op = base.pre_ops[c]
    old = op.params.model_dump()["offset"] or [0, 0]
    new = list(DEFAULT_CROP_OFFSET) if offset is None else [int(v) for v in offset]
    if len(new) != 2:
        raise NotApplicable(f"offset {offset}: give [rows, columns]")
    moved = [old[0] + new[0], old[1] + new[1]]
    if new == [0, 0]:
        raise NotApplicable("offset [0, 0] is the manifest's own window")
    return Derived(
        base.replace_pre(c, rebuild_or_explain(op, f"offset {moved}", offset=moved)),
        f"center_crop window moved {new[0]:+d} rows, {new[1]:+d} columns",
    )


@simple_pitfall("torchvision_mean_std", "the torchvision ImageNet mean/std instead of the manifest's constants")
def torchvision_mean_std(base: Pipeline, ctx: PitfallContext) -> Derived:
    m = find(base, "subtract_mean")
    s = find(base, "divide_std")
    scaled = any(op.name == "scale" for op in base.pre_ops[:m])
    unit = 1.0 if scaled else 255.0
    order = "RGB"
    for op in base.pre_ops[:m]:
        if op.name == "decode":
            order = op.params.channels  # type: ignore[attr-defined]
        elif op.name == "color_layout":
            order = op.params.order  # type: ignore[attr-defined]
    mean = [round(v * unit, 6) for v in TORCHVISION_MEAN]
    std = [round(v * unit, 6) for v in TORCHVISION_STD]
    if order == "BGR":
        mean, std = mean[::-1], std[::-1]
    old_m, old_s = base.pre_ops[m].params.value, base.pre_ops[s].params.value  # type: ignore[attr-defined]
    if old_m == mean and old_s == std:
        raise NotApplicable("the manifest already uses the torchvision constants")
    pipe = base.replace_pre(m, rebuild(base.pre_ops[m], value=mean)).replace_pre(s, rebuild(base.pre_ops[s], value=std))
    return Derived(pipe, f"mean {old_m} -> {mean}, std {old_s} -> {std} ({order}, x{unit:g})")


@simple_pitfall("no_normalization", "mean/std normalization (and scaling) left out")
def no_normalization(base: Pipeline, ctx: PitfallContext) -> Derived:
    idx = [i for i, op in enumerate(base.pre_ops) if op.name in _NORMALIZE]
    if not idx:
        raise NotApplicable("the pipeline has no normalization op")
    ops = [op for i, op in enumerate(base.pre_ops) if i not in idx]
    return Derived(Pipeline(ops, base.post_ops), "removed " + ", ".join(base.pre_ops[i].name for i in idx))


def _precision_pitfall(
    name: str, description: str, precision: str, runtimes: tuple[str, ...], what: str, change: str
) -> None:
    """Register a pitfall that runs the model at ``precision`` (one of
    :data:`repliscope.pitfalls.runners.PRECISIONS`) on the runtimes that implement it."""

    def derive(base: Pipeline, ctx: PitfallContext) -> Derived:
        if ctx.runtime not in runtimes:
            raise NotApplicable(f"{what} implemented for {' and '.join(runtimes)}, not {ctx.runtime}")
        return Derived(base, change, {"precision": precision})

    derive.__name__ = name
    simple_pitfall(name, description)(derive)


_WHOLE = "weights and activations in {} (inputs/outputs stay float32)"
_NORMS = "normalisation layers in {}, the rest float32"
_NORMS_ONLY = "only the normalisation layers (batch/layer/group norm) in {}"
for _name, _dtype, _scope, _runtimes in (
    ("float16_inference", "float16", "", ("torch", "onnxruntime")),
    ("bfloat16_inference", "bfloat16", "", ("torch",)),
    ("float16_normalization", "float16", ":normalization", ("torch", "onnxruntime")),
    ("bfloat16_normalization", "bfloat16", ":normalization", ("torch",)),
):
    _precision_pitfall(
        _name,
        _NORMS_ONLY.format(_dtype) if _scope else f"the model run in {_dtype} instead of float32",
        _dtype + _scope,
        _runtimes,
        f"{_dtype} layers are" if _scope else f"{_dtype} inference is",
        (_NORMS if _scope else _WHOLE).format(_dtype),
    )


@simple_pitfall("batch_size_1", "batch size 1 instead of the run's batch size (do predictions change?)")
def batch_size_1(base: Pipeline, ctx: PitfallContext) -> Derived:
    if ctx.batch_size == 1:
        raise NotApplicable("the reference already runs with batch size 1")
    return Derived(base, f"batch size {ctx.batch_size} -> 1", {"batch_size": 1})


@simple_pitfall("threads_changed", "another thread count for the runtime (do predictions change?)")
def threads_changed(base: Pipeline, ctx: PitfallContext) -> Derived:
    new = 1 if ctx.threads != 1 else 2
    return Derived(base, f"threads {ctx.threads} -> {new}", {"threads": new})
