"""The built-in pitfall variants (MLModelScope Table 1 and friends), one registered name each."""

from __future__ import annotations

from repliscope.ops.decode import LIBJPEG_ONLY
from repliscope.ops.pipeline import Pipeline
from repliscope.pitfalls.base import (
    Derived,
    NotApplicable,
    PitfallContext,
    find,
    make_op,
    rebuild,
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


def _resize_method(base: Pipeline, method: str) -> Derived:
    r = find(base, "resize", "letterbox")  # a letterbox resamples with resize's parameters
    op = base.pre_ops[r]
    old = op.params.method  # type: ignore[attr-defined]
    if old == method:
        raise NotApplicable(f"the manifest already resizes with {method}")
    changes: dict[str, object] = {"method": method}
    if op.params.library == "torch" and method == "nearest":  # type: ignore[attr-defined]
        changes["antialias"] = False
    if op.params.library == "opencv":  # type: ignore[attr-defined]
        changes["antialias"] = method == "area"
    return Derived(base.replace_pre(r, rebuild(op, **changes)), f"{op.name}.method {old} -> {method}")


@simple_pitfall("resize_bilinear", "bilinear instead of the manifest's resize (or letterbox) interpolation")
def resize_bilinear(base: Pipeline, ctx: PitfallContext) -> Derived:
    return _resize_method(base, "bilinear")


@simple_pitfall("resize_nearest", "nearest-neighbour instead of the manifest's resize (or letterbox) interpolation")
def resize_nearest(base: Pipeline, ctx: PitfallContext) -> Derived:
    return _resize_method(base, "nearest")


@simple_pitfall(
    "resize_library_swapped", "the resize (or letterbox resampling) done by the other library (pillow <-> opencv)"
)
def resize_library_swapped(base: Pipeline, ctx: PitfallContext) -> Derived:
    r = find(base, "resize", "letterbox")
    op = base.pre_ops[r]
    p = op.params
    old = p.library  # type: ignore[attr-defined]
    new = "opencv" if old in ("pillow", "torch") else "pillow"
    # each library's own antialias rule: pillow always filters; opencv only with INTER_AREA
    antialias = True if new == "pillow" else p.method == "area"  # type: ignore[attr-defined]
    return Derived(
        base.replace_pre(r, rebuild(op, library=new, antialias=antialias)),
        f"{op.name}.library {old} -> {new} (antialias {p.antialias} -> {antialias})",  # type: ignore[attr-defined]
    )


@simple_pitfall(
    "resize_antialias_toggled", "resize (or letterbox) antialiasing switched (on <-> off), same interpolation"
)
def resize_antialias_toggled(base: Pipeline, ctx: PitfallContext) -> Derived:
    r = find(base, "resize", "letterbox")
    op = base.pre_ops[r]
    p = op.params
    if p.method in ("nearest", "area", "lanczos"):  # type: ignore[attr-defined]
        raise NotApplicable(f"antialiasing is not a separate switch for {p.method} in every library")  # type: ignore[attr-defined]
    if p.antialias:  # type: ignore[attr-defined]
        # pillow cannot turn antialiasing off; torch's interpolate has the same kernels with the switch
        new_op = rebuild(op, library="torch", antialias=False)
    else:
        new_op = rebuild(op, library="torch", antialias=True)
    return Derived(
        base.replace_pre(r, new_op),
        f"{op.name}.antialias {p.antialias} -> {not p.antialias} "  # type: ignore[attr-defined]
        f"(library {p.library} -> torch, which has the switch)",  # type: ignore[attr-defined]
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


@simple_pitfall(
    "normalize_before_cast", "mean/std applied to the bytes with integer semantics before the cast to float"
)
def normalize_before_cast(base: Pipeline, ctx: PitfallContext) -> Derived:
    t = find(base, "to_float", "cast")
    norm = [i for i in range(t + 1, len(base.pre_ops)) if base.pre_ops[i].name in _NORMALIZE]
    if not norm:
        raise NotApplicable("no subtract_mean / divide_std / scale after the cast to float")
    if norm != list(range(t + 1, t + 1 + len(norm))):
        raise NotApplicable("the normalization ops do not directly follow the cast")
    ops = list(base.pre_ops)
    cast = ops.pop(t)
    ops.insert(t + len(norm) - 1 + 1, cast)
    names = ", ".join(base.pre_ops[i].name for i in norm)
    return Derived(Pipeline(ops, base.post_ops), f"{cast.name} moved after {names} (uint8 arithmetic, wrapping)")


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
