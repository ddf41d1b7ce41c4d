"""The timm importer: a timm ``config.json`` (as published beside the weights of every timm model on the Hub)
-> a repliscope manifest whose pre-processing is timm's EVALUATION transform, op by op.

What timm does (read in huggingface/pytorch-image-models; no timm code is run or copied here):

- ``timm/data/config.py`` ``resolve_data_config``: ``input_size`` (default ``(3, 224, 224)``),
  ``interpolation`` (default ``bicubic``), ``mean``/``std`` (default ImageNet ``(0.485, 0.456, 0.406)`` /
  ``(0.229, 0.224, 0.225)``), ``crop_pct`` (default ``DEFAULT_CROP_PCT`` = 0.875), ``crop_mode`` (default
  ``center``). ``test_input_size``/``test_crop_pct`` are used only with ``use_test_size=True`` (timm's
  ``validate.py`` default); ``resolve_model_data_config`` (the model-card recipe) uses the train size, and so
  does this importer (warning ``timm.test_size_ignored``) unless ``--test-size`` is given.
- ``timm/models/_hub.py`` ``load_model_config_from_hf``: a config without ``pretrained_cfg`` (the "old form") is
  itself the pretrained config, minus ``architecture`` and ``num_features``; ``labels`` is the old name of
  ``label_names``. Read the same way here.
- ``timm/models/_builder.py`` ``_update_default_model_kwargs``: with ``fixed_input_size`` the model is built
  with ``img_size = input_size[-2:]`` unless ``model_args`` set it (so ``--test-size`` with another size is
  refused for such a model).
- ``timm/data/transforms_factory.py`` ``transforms_imagenet_eval``: ``scale_size = math.floor(img_size /
  crop_pct)`` (per side for a (h, w) size), then by ``crop_mode``:

  * ``squash``: ``transforms.Resize((sh, sw))`` (both sides, aspect not kept) + ``CenterCrop(img_size)``:
    translated exactly (resize ``[sh, sw]`` + center_crop).
  * ``border``: ``ResizeKeepRatio(scale_size, longest=1.0)`` (fit INSIDE: ``ratio = max(H / sh, W / sw)``,
    sides ``round(side / ratio)``) + ``CenterCropOrPad(img_size, fill=[round(255 * m) for m in mean])``:
    translated exactly (resize ``[sh, sw]`` ``keep_aspect_ratio: true, fit: inside`` + center_crop with
    ``fill``; a mean outside 0..1 is refused there, its fill would not be a colour).
  * anything else (``center``, and any unknown value: timm's ``else`` branch): square scale ->
    ``transforms.Resize(int)`` (shorter side = scale, longer side TRUNCATED: ``int(scale * long / short)``,
    translated exactly with the resize's ``long_side: truncate``) + ``CenterCrop``. Non-square scale ->
    ``ResizeKeepRatio(scale_size)`` with ``longest=0`` (COVER: ``ratio = min(...)``) and, from timm 1.0.31, the
    config's interpolation (1.0.29 and 1.0.30 leave ResizeKeepRatio's default ``bilinear``): translated exactly
    for the ``--timm-version`` chosen (resize ``fit: cover``) + ``CenterCrop``.
- ``MaybeToTensor`` (``to_tensor``: float32, divided by 255, CHW) then ``Normalize`` (``(x - mean) / std``):
  ``to_float`` + ``divide_std 255`` (true division, like torch's ``div``) + ``subtract_mean`` + ``divide_std``
  + ``data_layout NCHW``.
- Images are read by timm's datasets with PIL ``Image.open(f).convert('RGB')``; torchvision's PIL path resizes
  with ``Image.resize(size, filter)`` (always antialiased): decode and resize use ``library: pillow``.
  ``timm/data/transforms.py`` ``str_to_interp_mode``: nearest, bilinear, bicubic, box (-> ``area``), lanczos;
  ``hamming`` has no repliscope method and ``random`` is not a valid eval mode: both become ``bilinear``
  (timm's own fallback for ``random`` without augmentation) with warning ``timm.interpolation_substituted``.

The framework constraint is ``torch >=0`` (timm's ``pyproject.toml`` says ``dependencies = ['torch', ...]``);
the package is ``timm==<--timm-version>`` (default the newest of :data:`TIMM_VERSIONS`), also recorded as
``provenance.imported_from.reproduces``. timm imports torchvision, whose compiled operators load only beside the
torch build they were made for (else ``operator torchvision::nms does not exist`` at import): such a manifest is
evaluated in a provisioned stack of timm with :data:`STACK_PINS` (:func:`stack_spec`), and an architecture that
cannot be loaded here says so in one line (:meth:`TimmImporter.run_advice`).
The model: ``architecture`` -> ``timm:create_model`` with ``model_name``, ``pretrained: false``,
``num_classes`` and the config's ``model_args`` (timm's ``load_model_config_from_hf`` passes the same).
Weights: ``model.safetensors`` or else ``pytorch_model.bin`` beside the config (sha256 computed; the
``source.uri`` is relative, so keep the manifest beside the config), otherwise ``model.safetensors`` with the
all-zero sha256 placeholder (warning ``timm.weights_missing``; ``validate`` without ``--offline`` then
refuses it until the file is there and the sha256 filled in).

Warning codes (stable): ``timm.default_applied``, ``timm.test_size_ignored``, ``timm.interpolation_substituted``,
``timm.crop_mode_unknown``,
``timm.mean_std_units``, ``timm.weights_missing``, ``timm.labels_not_embedded``, ``timm.labels_missing``,
``timm.license_missing``, ``timm.unknown_key``.
Hard errors (:class:`ConfigImportError`): unreadable JSON, no ``architecture``, no/zero ``num_classes``, not
3 input channels, malformed sizes/mean/std, ``crop_pct`` outside (0, 1] (a crop larger than the resized image
would be zero-padded), ``crop_mode`` border with a mean outside 0..1.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from repliscope.importers.base import ConfigImportError, Importer, ImportResult, ImportWarning, imported_from
from repliscope.importers.reading import check_image_size, load_json, read_text
from repliscope.manifest.code_refs import parse_ref
from repliscope.manifest.sources import sha256_file

IMAGENET_DEFAULT_MEAN = (0.485, 0.456, 0.406)
IMAGENET_DEFAULT_STD = (0.229, 0.224, 0.225)
DEFAULT_CROP_PCT = 0.875
CROP_MODES = ("center", "squash", "border")

TIMM_VERSIONS = ("1.0.29", "1.0.30", "1.0.31")
"""The timm releases whose eval transform the importer reproduces (``--timm-version``; default the last). They
differ in one place: a non-square ``center`` scale goes through ``ResizeKeepRatio`` with the config's
interpolation in 1.0.31 (``transforms_factory.py`` ``transforms_imagenet_eval``), with bilinear (its default)
in 1.0.29 and 1.0.30."""
KEEP_RATIO_FOLLOWS_CONFIG = "1.0.31"
"""The first release where the non-square ``center`` resize uses the config's interpolation."""

STACK_PINS = ("torch==2.14.1", "torchvision==0.29.1")
"""torch and torchvision builds of the package index that load together (torchvision's operators registered):
the stack an imported timm manifest is evaluated in, with its ``timm==V``. The index's torchvision 0.28.0 is a
CUDA build whose operators do not load beside the CPU torch 2.13.0 (``operator torchvision::nms does not
exist``); torch 2.14.1 + torchvision 0.29.1 do (checked 2026-11-29: ``evaluate`` of the imported
resnet50.a1_in1k with ``--stack 'timm==1.0.31 torch==2.14.1 torchvision==0.29.1'``; docs/guides/importers.md)."""


def stack_spec(reproduces: str) -> str:
    """The stack spec an imported timm manifest runs in: its ``timm==V`` (``provenance.imported_from.reproduces``)
    and :data:`STACK_PINS`."""
    return " ".join((reproduces, *STACK_PINS))


WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
"""Looked up beside the config, in this order (the names timm's ``push_to_hf_hub`` writes)."""
PLACEHOLDER_SHA256 = "0" * 64
"""The sha256 of a translation whose weights were not beside the config: never the hash of a real file."""

_INTERPOLATIONS = {
    "nearest": "nearest",
    "bilinear": "bilinear",
    "bicubic": "bicubic",
    "box": "area",
    "lanczos": "lanczos",
}
_SUBSTITUTED = ("hamming", "random")
_TOP_KEYS = {
    "architecture",
    "num_classes",
    "num_features",
    "global_pool",
    "pretrained_cfg",
    "model_args",
    "label_names",
    "label_descriptions",
}
_CFG_KEYS = {
    "tag",
    "custom_load",
    "input_size",
    "test_input_size",
    "min_input_size",
    "fixed_input_size",
    "interpolation",
    "crop_pct",
    "test_crop_pct",
    "crop_mode",
    "mean",
    "std",
    "num_classes",
    "pool_size",
    "first_conv",
    "classifier",
    "license",
    "description",
    "origin_url",
    "paper_name",
    "paper_ids",
    "notes",
    "hf_hub_id",
    "hf_hub_filename",
    "source",
    "url",
    "file",
    "state_dict",
    "architecture",
    "label_names",
    "label_descriptions",
    "num_features",
    "global_pool",
}


TIMM_FACTORY = "timm:create_model"
"""The code reference every timm manifest names (checked by :func:`repliscope.manifest.code_refs.parse_ref`)."""
_LOADING_KWARGS = ("checkpoint_path", "pretrained_cfg", "pretrained_cfg_overlay", "cache_dir")
"""create_model arguments that make timm read a file or fetch from the network (``checkpoint_path`` is loaded with
``torch.load``): refused in ``model_args``, the model is built from its config only and the weights are the
manifest's ``source``."""
_FIXED_KWARGS = ("model_name", "pretrained", "num_classes")
"""create_model arguments the translation sets itself; timm's create_model also lets its explicit arguments win
over ``model_args`` (``kwargs.setdefault``)."""


def scale_size(img_size: tuple[int, int], crop_pct: float) -> tuple[int, int]:
    """timm's resize target before the crop: ``math.floor(side / crop_pct)`` per side (height, width)."""
    return math.floor(img_size[0] / crop_pct), math.floor(img_size[1] / crop_pct)


def resize_and_crop(
    img_size: tuple[int, int],
    crop_pct: float,
    crop_mode: str,
    method: str,
    mean: list[float],
    timm_version: str = TIMM_VERSIONS[-1],
) -> list[dict[str, Any]]:
    """The resize + center_crop ops of timm's eval transform (every crop mode is translated exactly).

    ``mean`` (0..1 units, RGB) gives the 'border' pad colour ``round(255 * m)``; it must lie in [0, 1] then.
    ``timm_version`` decides the interpolation of a non-square ``center`` resize (see :data:`TIMM_VERSIONS`).
    """
    sh, sw = scale_size(img_size, crop_pct)
    crop: int | list[int] = img_size[0] if img_size[0] == img_size[1] else [img_size[0], img_size[1]]
    center_crop: dict[str, Any] = {"op": "center_crop", "size": crop}
    if crop_mode == "squash":
        resize = {
            "op": "resize",
            "size": [sh, sw],
            "keep_aspect_ratio": False,
            "method": method,
            "library": "pillow",
            "antialias": True,
        }
    elif crop_mode == "border":
        # ResizeKeepRatio(scale_size, interpolation, longest=1.0) + CenterCropOrPad(img_size, fill)
        if any(not 0 <= m <= 1 for m in mean):
            raise ValueError(
                f"crop_mode 'border' pads with round(255 * mean) = {[round(255 * m) for m in mean]}, "
                f"not a colour: mean {mean} must be in 0..1 units"
            )
        resize = {
            "op": "resize",
            "size": [sh, sw],
            "keep_aspect_ratio": True,
            "fit": "inside",
            "method": method,
            "library": "pillow",
            "antialias": True,
        }
        center_crop["fill"] = [round(255 * m) for m in mean]
    elif sh == sw:
        # torchvision's Resize(int) truncates the longer side: int(size * long / short)
        resize = {
            "op": "resize",
            "size": sh,
            "keep_aspect_ratio": True,
            "method": method,
            "library": "pillow",
            "antialias": True,
            "long_side": "truncate",
        }
    else:
        # ResizeKeepRatio(scale_size[, interpolation]): longest=0 (cover the box); the config's interpolation
        # from timm 1.0.31, ResizeKeepRatio's default bilinear before
        follows = _version_key(timm_version) >= _version_key(KEEP_RATIO_FOLLOWS_CONFIG)
        resize = {
            "op": "resize",
            "size": [sh, sw],
            "keep_aspect_ratio": True,
            "fit": "cover",
            "method": method if follows else "bilinear",
            "library": "pillow",
            "antialias": True,
        }
    return [resize, center_crop]


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


class TimmImporter(Importer):
    """``repliscope manifest import timm config.json [--timm-version V] [--test-size]``; see the module
    docstring for the semantics."""

    name = "timm"
    patterns = ("config.json",)
    options = ("timm_version", "test_size")

    def __init__(self, timm_version: str | None = None, test_size: bool = False) -> None:
        version = timm_version or TIMM_VERSIONS[-1]
        if version not in TIMM_VERSIONS:
            raise ConfigImportError(
                f"--timm-version {version!r}: the importer reproduces timm "
                f"{', '.join(TIMM_VERSIONS)} (allowed: {', '.join(TIMM_VERSIONS)})"
            )
        self.timm_version = version
        self.test_size = test_size

    @classmethod
    def run_advice(cls, reproduces: str | None, manifest_path: str) -> str | None:
        """timm and a matching torch / torchvision in a provisioned stack (:func:`stack_spec`), as a command."""
        timm = reproduces or f"timm=={TIMM_VERSIONS[-1]}"
        return (
            f"the manifest was imported from timm, which needs torch and torchvision builds made for each other: run "
            f"it in a provisioned stack: repliscope evaluate {manifest_path} --stack '{stack_spec(timm)}'"
        )

    def translate(self, path: Path) -> ImportResult:
        cfg = _read(path)
        warnings: list[ImportWarning] = []

        def warn(code: str, field: str, message: str) -> None:
            warnings.append(ImportWarning(code, field, message))

        legacy = "pretrained_cfg" not in cfg
        if legacy:
            # timm's load_model_config_from_hf ("old form"): everything but architecture and num_features is the
            # pretrained config; 'labels' is the deprecated name of 'label_names'
            pcfg = {k: v for k, v in cfg.items() if k not in ("architecture", "num_features")}
            if "labels" in pcfg:
                pcfg["label_names"] = pcfg.pop("labels")
            cfg = {k: v for k, v in cfg.items() if k in ("architecture", "num_features")}
        else:
            pcfg = cfg["pretrained_cfg"]
        for key in sorted(set(cfg) - _TOP_KEYS):
            warn("timm.unknown_key", key, f"unknown top-level key (not read; known: {', '.join(sorted(_TOP_KEYS))})")
        architecture = cfg.get("architecture")
        if not isinstance(architecture, str) or not architecture:
            raise ConfigImportError(
                f"{path}: field 'architecture': missing or not a string (the timm model "
                "name, e.g. 'resnet50'); without it the model is undefined"
            )
        if not isinstance(pcfg, dict):
            raise ConfigImportError(f"{path}: field 'pretrained_cfg': expected a mapping, got {type(pcfg).__name__}")
        where = "" if legacy else "pretrained_cfg."
        for key in sorted(set(pcfg) - _CFG_KEYS - ({"model_args"} if legacy else set())):
            warn("timm.unknown_key", f"{where}{key}", "unknown pretrained_cfg key (not read)")

        def get(key: str, default: Any, shown: str) -> Any:
            """resolve_data_config's rule: a falsy value (None, 0, '', []) means the default, except
            input_size, which only None replaces; with --test-size, test_input_size / test_crop_pct first."""
            test_key = {"input_size": "test_input_size", "crop_pct": "test_crop_pct"}.get(key)
            if self.test_size and test_key and pcfg.get(test_key):
                return pcfg[test_key]
            value = pcfg.get(key)
            if value is None or (key != "input_size" and not value):
                warn("timm.default_applied", f"{where}{key}", f"missing: timm's default {shown} is used")
                return default
            return value

        num_classes = _num_classes(path, cfg, pcfg)
        input_size = _input_size(path, get("input_size", [3, 224, 224], "[3, 224, 224]"))
        fixed = bool(pcfg.get("fixed_input_size"))
        model_size = _input_size(path, pcfg.get("input_size") or [3, 224, 224])
        if fixed and input_size != model_size:
            raise ConfigImportError(
                f"{path}: field '{where}test_input_size': {list(input_size)} with --test-size, "
                f"but the model has fixed_input_size: timm builds it for img_size "
                f"{list(model_size[1:])} (input_size) and it takes no other size (allowed: "
                "no --test-size)"
            )
        interp = get("interpolation", "bicubic", "'bicubic'")
        if not isinstance(interp, str):
            raise ConfigImportError(
                f"{path}: field 'pretrained_cfg.interpolation': {type(interp).__name__} "
                f"{_short(interp)}; expected a string (allowed: "
                f"{', '.join([*_INTERPOLATIONS, *_SUBSTITUTED])})"
            )
        if interp in _SUBSTITUTED:
            warn(
                "timm.interpolation_substituted",
                "pretrained_cfg.interpolation",
                f"'{interp}' has no repliscope resize method ('random' is not an eval mode); bilinear is used "
                "(timm's own fallback for 'random' without augmentation)",
            )
            method = "bilinear"
        elif interp in _INTERPOLATIONS:
            method = _INTERPOLATIONS[interp]
        else:
            raise ConfigImportError(
                f"{path}: field 'pretrained_cfg.interpolation': {interp!r} is not a timm "
                f"interpolation (allowed: {', '.join([*_INTERPOLATIONS, *_SUBSTITUTED])})"
            )
        crop_pct = get("crop_pct", DEFAULT_CROP_PCT, str(DEFAULT_CROP_PCT))
        if isinstance(crop_pct, bool) or not isinstance(crop_pct, (int, float)) or not 0 < crop_pct <= 1:
            raise ConfigImportError(
                f"{path}: field 'pretrained_cfg.crop_pct': {_short(crop_pct)} must be a number in "
                "(0, 1] (above 1 the crop is larger than the resized image and timm pads it "
                "with zeros, which repliscope's center_crop refuses)"
            )
        check_image_size(
            *scale_size((input_size[1], input_size[2]), float(crop_pct)),
            f"{path}: field 'pretrained_cfg.crop_pct': the resize before the crop, input_size / "
            f"crop_pct = {input_size[1]} / {crop_pct}:",
        )
        crop_mode = get("crop_mode", "center", "'center'")
        if crop_mode not in CROP_MODES:
            warn(
                "timm.crop_mode_unknown",
                "pretrained_cfg.crop_mode",
                f"{crop_mode!r} is not one of {', '.join(CROP_MODES)}; timm's eval transform treats any other "
                "value as 'center', and so does this translation",
            )
            crop_mode = "center"
        mean = _triple(path, "mean", get("mean", list(IMAGENET_DEFAULT_MEAN), str(list(IMAGENET_DEFAULT_MEAN))))
        std = _triple(path, "std", get("std", list(IMAGENET_DEFAULT_STD), str(list(IMAGENET_DEFAULT_STD))))
        if any(v <= 0 for v in std):
            raise ConfigImportError(
                f"{path}: field 'pretrained_cfg.std': {std}; Normalize divides by std, so every "
                "value must be positive (a zero std divides by zero)"
            )
        if any(v > 1 for v in mean + std):
            warn(
                "timm.mean_std_units",
                "pretrained_cfg.mean",
                f"mean {mean} / std {std}: timm normalizes images already divided by 255, so values are "
                "expected in 0..1 (std > 0); these look like 0..255 units and are kept as given",
            )
        for key in ("test_input_size", "test_crop_pct"):
            if pcfg.get(key) is not None and not self.test_size:
                warn(
                    "timm.test_size_ignored",
                    f"pretrained_cfg.{key}",
                    f"{_short(pcfg[key])} is used by timm's validate.py (use_test_size); the translation uses the "
                    "train-time input_size/crop_pct, as timm.data.resolve_model_data_config does by default "
                    "(--test-size uses it)",
                )

        try:
            geometry = resize_and_crop(
                (input_size[1], input_size[2]), float(crop_pct), crop_mode, method, mean, self.timm_version
            )
        except ValueError as exc:
            raise ConfigImportError(f"{path}: field 'pretrained_cfg.mean': {exc}") from exc
        preprocess = [
            {"op": "decode", "library": "pillow", "channels": "RGB"},
            *geometry,
            {"op": "to_float", "dtype": "float32"},
            {"op": "divide_std", "value": 255.0},
            {"op": "subtract_mean", "value": mean},
            {"op": "divide_std", "value": std},
            {"op": "data_layout", "layout": "NCHW"},
        ]

        source = _source(path, warn)
        labels = _labels(cfg, pcfg, num_classes, warn)
        license_ = pcfg.get("license")
        if not isinstance(license_, str) or not license_:
            warn(
                "timm.license_missing",
                "pretrained_cfg.license",
                "no license in the config: set 'license' from the model card",
            )
            license_ = "unknown"
        model_args = (pcfg if legacy else cfg).get("model_args") or {}
        if not isinstance(model_args, dict):
            raise ConfigImportError(
                f"{path}: field 'model_args': expected a mapping of create_model keyword "
                f"arguments, got {type(model_args).__name__}"
            )
        loading = sorted(k for k in model_args if k in _LOADING_KWARGS)
        if loading:
            raise ConfigImportError(
                f"{path}: field 'model_args': {', '.join(loading)} would make create_model read a file or fetch "
                f"from the network (refused: {', '.join(_LOADING_KWARGS)}); the weights are the manifest's source"
            )
        tag = pcfg.get("tag")
        full_name = f"{architecture}.{tag}" if isinstance(tag, str) and tag else architecture
        test_note = " at the test size (validate.py)" if self.test_size else ""
        manifest: dict[str, Any] = {
            "name": _manifest_name(full_name),
            "version": "1.0.0",
            "task": "image_classification",
            "description": (
                f"timm {full_name}, translated from its config.json by repliscope's timm importer "
                f"(timm {self.timm_version} eval transform{test_note}: crop_mode {crop_mode}, "
                f"crop_pct {crop_pct}, {interp}). "
                "source.uri is relative to the config's folder: keep this manifest beside it."
            ),
            "license": license_,
            "framework": {"name": "torch", "version": ">=0"},
            "source": source,
            "architecture": {
                "factory": parse_ref(TIMM_FACTORY, what="timm importer", field="architecture.factory").text,
                "package": f"timm=={self.timm_version}",
                "kwargs": {
                    "model_name": architecture,
                    "pretrained": False,
                    "num_classes": num_classes,
                    # _update_default_model_kwargs: a fixed-size model gets img_size =
                    # input_size[-2:] unless model_args set it
                    **({"img_size": list(model_size[1:])} if fixed else {}),
                    **{k: v for k, v in model_args.items() if k not in _FIXED_KWARGS},
                },
            },
            "inputs": [
                {"name": "input", "shape": [-1, 3, input_size[1], input_size[2]], "dtype": "float32", "layout": "NCHW"}
            ],
            "preprocess": preprocess,
            "outputs": [
                {"name": "logits", "shape": [-1, num_classes], "dtype": "float32", "layout": "NC", "kind": "logits"}
            ],
            "postprocess": [{"op": "softmax", "axis": -1}, {"op": "topk", "k": min(5, num_classes)}, {"op": "labels"}],
            "labels": labels,
            "claims": [],
            "datasets": {"trained_on": [], "evaluated_on": []},
            "provenance": imported_from("timm", path, f"timm=={self.timm_version}"),
        }
        return ImportResult(manifest, warnings, path)


def _read(path: Path) -> dict[str, Any]:
    """The config as JSON, under the manifest loader's limits (:mod:`repliscope.importers.reading`)."""
    data = load_json(read_text(path), path)
    if not isinstance(data, dict):
        raise ConfigImportError(f"{path}: expected a JSON object (timm's config.json), got {type(data).__name__}")
    return data


def _num_classes(path: Path, cfg: dict[str, Any], pcfg: dict[str, Any]) -> int:
    """Top-level ``num_classes`` wins (timm's ``load_model_config_from_hf`` copies it into pretrained_cfg)."""
    value = cfg.get("num_classes", pcfg.get("num_classes"))
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigImportError(
            f"{path}: field 'num_classes': {_short(value)}; a classifier needs a positive integer "
            "(0 is a feature extractor without logits, which repliscope does not evaluate)"
        )
    return value


def _input_size(path: Path, value: Any) -> tuple[int, int, int]:
    if (
        not isinstance(value, list)
        or len(value) != 3
        or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value)
    ):
        raise ConfigImportError(
            f"{path}: field 'pretrained_cfg.input_size': {_short(value)}; expected [channels, "
            "height, width] positive integers"
        )
    if value[0] != 3:
        raise ConfigImportError(
            f"{path}: field 'pretrained_cfg.input_size': {value[0]} channels; repliscope "
            "decodes RGB images (allowed: 3)"
        )
    check_image_size(value[1], value[2], f"{path}: field 'pretrained_cfg.input_size'")
    return value[0], value[1], value[2]


def _triple(path: Path, key: str, value: Any) -> list[float]:
    if (
        not isinstance(value, list)
        or len(value) != 3
        or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
    ):
        raise ConfigImportError(f"{path}: field 'pretrained_cfg.{key}': {_short(value)}; expected 3 numbers (R, G, B)")
    return [float(v) for v in value]


def _source(path: Path, warn: Any) -> dict[str, Any]:
    for name in WEIGHT_FILES:
        weights = path.parent / name
        if weights.is_file():
            return {"uri": name, "sha256": sha256_file(weights), "format": "pytorch_state_dict"}
    warn(
        "timm.weights_missing",
        "(file)",
        f"no {' or '.join(WEIGHT_FILES)} beside the config: source.uri is {WEIGHT_FILES[0]} with the all-zero "
        "sha256 placeholder; download the weights next to the manifest and set their sha256",
    )
    return {"uri": WEIGHT_FILES[0], "sha256": PLACEHOLDER_SHA256, "format": "pytorch_state_dict"}


def _labels(cfg: dict[str, Any], pcfg: dict[str, Any], num_classes: int, warn: Any) -> dict[str, Any]:
    names = cfg.get("label_names", pcfg.get("label_names"))
    if names is not None:
        count = len(names) if isinstance(names, (list, dict)) else "?"
        warn(
            "timm.labels_not_embedded",
            "label_names",
            f"the config lists {count} label names; repliscope reads class names from a file: write them one "
            "per line, in class order, to labels.txt beside the manifest (labels.source)",
        )
        return {"source": "labels.txt", "num_classes": num_classes}
    if num_classes == 1000:
        return {"source": "builtin:imagenet-1k", "num_classes": num_classes}
    warn(
        "timm.labels_missing",
        "num_classes",
        f"{num_classes} classes and no label_names: provide labels.txt (one class per line) beside the manifest",
    )
    return {"source": "labels.txt", "num_classes": num_classes}


def _short(value: Any) -> str:
    """``repr`` of a value, cut to 60 characters (a hostile config may hold a huge structure there)."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _manifest_name(full_name: str) -> str:
    """A manifest name (``^[a-z0-9][a-z0-9._-]*$``) from ``architecture.tag``."""
    name = re.sub(r"[^a-z0-9._-]+", "-", full_name.lower()).strip("-._")
    return name or "timm-model"
