"""MLModelScope model manifests (``builtin_models/*.yml`` of the rai-project / c3sr agents) -> repliscope.

The translation reproduces what MLModelScope's image pipeline ran (dlframework ``steps/read_image.go`` then
``steps/preprocess_image.go``; no crop step is ever wired in), not what the fields seem to say:

- decode in ``color_mode`` (default RGB) with libjpeg as go-libjpeg ran it (ISLOW, no fancy upsampling,
  DCT-domain downscaling to the smallest M/8 size covering ``dimensions``; PNG/GIF/BMP with Pillow), resize
  straight to ``dimensions`` [C, H, W] (no aspect ratio kept) with disintegration/imaging ``Linear``
  (``resize`` ``library: go_imaging``, bit-exact); ``max_dimension`` / ``min_dimension`` and images fed at their
  own size: :mod:`mlmodelscope_resize` (detection only: a classifier needs one input size). Then
  ``(pixel - mean) / scale`` in float32, where ``mean``/``scale`` are indexed R, G, B in BOTH colour modes (a BGR
  tensor gets ``[mean[2], mean[1], mean[0]]``), and ``scale`` DIVIDES; defaults mean 0, scale 1, layout HWC.
  ``element_type: uint8`` is Go's ``uint8(float)`` of those values: exact (the pixels) only with mean 0 and
  scale 1, refused otherwise.
- ``output.type: classification`` -> ``image_classification``; ``boundingbox`` -> ``object_detection``
  (:mod:`mlmodelscope_detection`: the outputs MLModelScope fetched, its box order, every row, no threshold);
  ``semanticsegment`` -> ``semantic_segmentation`` (:mod:`mlmodelscope_segmentation`: TensorFlow's int64 class
  map or PyTorch's argmax of output 0, resized back onto the image by nearest).
- Label files are named by their MD5 (``features_checksum``), never downloaded; an unknown one can be given
  with ``--labels FILE`` (used only when its MD5 matches).
- TensorFlow frozen graphs (``.pb``, not in an archive) run as ``tensorflow`` / ``tf_frozen_graph`` with
  tensor names ``name:0``; ONNX files as ``onnx``; anything else gets explicit placeholders.
- ``framework.version`` is a Masterminds/semver constraint: a bare ``1.12`` means ``>=1.12.0,<1.13.0``.
- Checksums are MD5: the translated sha256 is a placeholder of 64 zeros (which can never match, so nothing
  unverified runs) unless the model file is local (relative path or ``package://``), when it is hashed here.

Every inexact point is an :class:`ImportWarning` (code ``mlmodelscope.<name>``, names in
:data:`mlmodelscope_rules.WARNING_CODES`); Python
hooks in the file are never executed. See docs/mlmodelscope-semantics.md for the source references.
"""

from __future__ import annotations

import difflib
import hashlib
import re
from pathlib import Path
from typing import Any, ClassVar

from repliscope.errors import SourceError
from repliscope.importers.base import ConfigImportError, Importer, ImportResult, imported_from
from repliscope.importers.mlmodelscope_detection import (
    detection_claims,
    detection_labels,
    detection_output,
    tensor_name,
    with_tensor_names,
)
from repliscope.importers.mlmodelscope_frameworks import AGENT_FRAMEWORKS, agent_framework, carries_constraint
from repliscope.importers.mlmodelscope_resize import read_ops
from repliscope.importers.mlmodelscope_rules import (
    FRAMEWORK_KEYS,
    HOOK_KEYS,
    INPUT_PARAMS,
    KNOWN_LABEL_FILES,
    LABEL_FILE_NOTES,
    MODEL_KEYS,
    OUTPUT_PARAMS,
    REFUSAL_REASONS,
    TOP_KEYS,
    TYPE_KEYS,
    Ctx,
    given_labels,
    load_raw,
    number,
    other_labels_file,
    pep440_constraint,
    triple,
)
from repliscope.importers.mlmodelscope_segmentation import (
    segmentation_agent,
    segmentation_labels,
    segmentation_output,
)
from repliscope.importers.reading import check_image_size, read_text

PLACEHOLDER_SHA256 = "0" * 64
"""Written where only an MD5 (or nothing) is known: it never matches a file, so evaluate refuses until the real
sha256 is filled in (``sha256sum FILE`` after checking the MD5 with ``md5sum FILE``)."""

_TASKS = {
    "classification": "image_classification",
    "feature": "image_classification",
    "boundingbox": "object_detection",
    "semanticsegment": "semantic_segmentation",
}
"""MLModelScope output.type -> repliscope task. ``feature`` is the word of the Caffe2, CNTK and TensorRT agents
(and of some Caffe / TensorFlow manifests) for the same thing: the classifier's probability vector, named by the
``features_url`` synset file (rai-project/caffe2 and cntk ``predict/predict.go`` ``ReadPredictedFeatures`` ->
``CreatePredictedFeatures(output, labels)``; rai-project/tensorrt ``image_classification_predictor.go``)."""
_REFUSED_OUTPUTS = {
    "instancesegment": (
        "instance_segmentation",
        "boxes with a mask per instance (Mask R-CNN: the TensorFlow agent fetches boxes, scores, classes and "
        "per-box masks); repliscope has no instance segmentation task, so no translation keeps those masks. "
        "To evaluate the boxes alone, write an object_detection manifest by hand from the same pre-processing",
    ),
    "image": (
        "image_output",
        "an image (super-resolution, enhancement: the agent returns the output tensor as pixels); repliscope "
        "has no image-to-image task or metric (PSNR, SSIM). Its pre-processing can still be compared op by op: "
        "`repliscope diff` takes a hand-written manifest of another task",
    ),
    "coordinates": (
        "coordinates_output",
        "keypoint coordinates (pose estimation); repliscope has no keypoint task or metric (OKS, PCK)",
    ),
}
"""Output types with a known meaning and no repliscope translation: (refusal reason, what the output is)."""
_AGENT_PREPROCESS: dict[str, dict[str, Any]] = {
    # rai-project/caffe2 @ affcf57 predict/predict.go GetPreprocessOptions: ColorMode: types.BGRMode,
    # Layout: image.CHWLayout, whatever the manifest says
    "caffe2": {
        "forced": {"color_mode": "BGR", "layout": "CHW"},
        "defaults": {},
        "pins": "dlframework @ b2c3d91, image @ 2817c3d (Gopkg.lock)",
    },
    # rai-project/cntk @ ced8368 predict/predict.go: ColorMode: p.GetColorMode(types.BGRMode),
    # Layout: p.GetLayout(image.HWCLayout): the manifest's value, else BGR / HWC
    "cntk": {
        "forced": {},
        "defaults": {"color_mode": "BGR"},
        "pins": "dlframework @ 0bf83e3, image @ 1711f35 (Gopkg.lock)",
    },
}
"""Agents whose predictor builds its own PreprocessOptions (read from their sources) instead of dlframework's."""


class MLModelScopeImporter(Importer):
    """``repliscope manifest import mlmodelscope FILE.yml``."""

    name: ClassVar[str] = "mlmodelscope"
    patterns: ClassVar[tuple[str, ...]] = ("*.yml", "*.yaml")
    refusal_reasons: ClassVar[dict[str, str]] = REFUSAL_REASONS
    options: ClassVar[tuple[str, ...]] = ("labels",)

    def __init__(self, labels: Path | None = None) -> None:
        self.labels = Path(labels) if labels is not None else None
        if self.labels is not None and not self.labels.is_file():
            raise ConfigImportError(f"--labels {self.labels}: no such file")
        """``--labels FILE``: the downloaded features file, used when its MD5 is the manifest's
        ``features_checksum`` and the importer does not know that file itself."""

    def translate(self, path: Path) -> ImportResult:
        try:
            return self._translate(path)
        except ConfigImportError as exc:  # number()/triple() name the field only: add the file
            if str(exc).startswith(str(path)):
                raise
            raise ConfigImportError(f"{path}: {exc}", exc.reason) from None
        except (AttributeError, TypeError, ValueError, KeyError, IndexError) as exc:  # a field of the wrong type
            raise ConfigImportError(
                f"{path}: a field has an unexpected structure ({type(exc).__name__}: {exc}); "
                "expected MLModelScope's ModelManifest layout (registry.proto)"
            ) from exc

    def _translate(self, path: Path) -> ImportResult:
        ctx = Ctx(path, self.labels)
        data = load_raw(read_text(path), str(path))
        _check_keys(ctx, data)
        _hooks(ctx, data)
        name = _name(ctx, data)
        inp = _image_input(ctx, data)
        out_type = str((data.get("output") or {}).get("type", "")).strip().lower()
        task = _TASKS.get(out_type)
        if task is None:
            reason, what = _REFUSED_OUTPUTS.get(out_type, ("other_output", "an output with no repliscope task"))
            raise ctx.fail(
                "output.type", f"{out_type or '(missing)'!r} is {what} (allowed: {', '.join(_TASKS)})", reason
            )
        if out_type == "feature":
            ctx.warn(
                "feature_output",
                "output.type",
                "'feature': the agent's classifier output (probabilities "
                "named by features_url, sorted top-k); translated as image_classification",
            )
        from repliscope.tasks.base import truth_of

        detection = truth_of(task) == "boxes"
        segmentation = truth_of(task) == "masks"
        fw_name = str((data.get("framework") or {}).get("name") or "").strip()
        framework, source = _framework_and_source(ctx, data)
        _agent_preprocess(ctx, inp, fw_name)
        preprocess, shape, layout, dtype, fixed_hw = _pipeline(ctx, inp, detection or segmentation)
        input_name = str(inp["params"].get("input_layer", "input"))
        if detection:
            outputs, postprocess = detection_output(ctx, data, fw_name, fixed_hw)
            labels = detection_labels(ctx, data)
            claims = detection_claims(data, _attr, path.name)
        elif segmentation:
            reader = segmentation_agent(ctx, fw_name)
            labels, num_classes = segmentation_labels(ctx, data)
            outputs, postprocess = segmentation_output(ctx, data, reader, fw_name, fixed_hw, num_classes)
            claims = []
        else:
            labels, num_classes = _labels(ctx, data)
            outputs, postprocess = _output(ctx, data, num_classes, fw_name)
            claims = _claims(data, path)
        if framework["name"] == "tensorflow":  # runnable frozen graph: the tensors the agent fed and fetched
            input_name = tensor_name(input_name)
            outputs, postprocess = with_tensor_names(outputs, postprocess)
        manifest: dict[str, Any] = {
            "name": name,
            "version": _semver(ctx, data.get("version")),
            "task": task,
            "description": _description(data),
            "license": _license(ctx, data),
            "framework": framework,
            "source": source,
            "inputs": [{"name": input_name, "shape": shape, "dtype": dtype, "layout": layout}],
            "preprocess": preprocess,
            "outputs": outputs,
            "postprocess": postprocess,
            "labels": labels,
            "claims": claims,
            "datasets": _datasets(data, bool(claims) and detection),
            "provenance": imported_from("mlmodelscope", path),
        }
        return ImportResult(manifest, ctx.warnings, path)


def _check_keys(ctx: Ctx, data: dict[str, Any]) -> None:
    def unknown(keys: Any, allowed: set[str], prefix: str) -> None:
        for k in keys:
            if str(k) not in allowed:
                close = difflib.get_close_matches(str(k), sorted(allowed), n=1)
                hint = f" (did you mean '{close[0]}'?)" if close else ""
                ctx.warn(
                    "unknown_key",
                    f"{prefix}{k}",
                    f"'{k}' is read by no MLModelScope struct{hint}; ignored "
                    f"as MLModelScope ignored it (known: {', '.join(sorted(allowed))})",
                )

    unknown(data, TOP_KEYS, "")
    for key, allowed in (("framework", FRAMEWORK_KEYS), ("model", MODEL_KEYS), ("output", TYPE_KEYS)):
        if isinstance(data.get(key), dict):
            unknown(data[key], allowed, f"{key}.")
    for i, inp in enumerate(data.get("inputs") or []):
        if isinstance(inp, dict):
            unknown(inp, TYPE_KEYS | {"name"}, f"inputs[{i}].")
            unknown(inp.get("parameters") or {}, INPUT_PARAMS, f"inputs[{i}].parameters.")
    out = data.get("output")
    if isinstance(out, dict):
        unknown(out.get("parameters") or {}, OUTPUT_PARAMS, "output.parameters.")
    if data.get("container"):
        images = sorted(
            {str(v) for arch in (data["container"] or {}).values() if isinstance(arch, dict) for v in arch.values()}
        )
        ctx.warn(
            "container_image",
            "container",
            f"container images {', '.join(images)} are not used: repliscope "
            "runs the model in the local Python environment (framework versions are checked instead)",
        )


def _hooks(ctx: Ctx, data: dict[str, Any]) -> None:
    for key in HOOK_KEYS:
        if data.get(key):
            lines = len(str(data[key]).splitlines())
            ctx.warn(
                "python_hook",
                key,
                f"an embedded Python hook ({lines} lines) that MLModelScope's "
                "predict_general step runs in-process; it was NOT executed and is NOT translated: check "
                "what it does by reading it and express it with repliscope ops",
            )


def _name(ctx: Ctx, data: dict[str, Any]) -> str:
    raw = str(data.get("name") or "").strip()
    if not raw:
        raise ctx.fail("name", "missing: MLModelScope keys every model by name")
    return re.sub(r"[^a-z0-9._-]+", "-", raw.lower()).strip("-._") or "model"


def _semver(ctx: Ctx, raw: Any) -> str:
    if raw is None:
        ctx.warn("missing_field", "version", "no model version; '0.0.0' used (placeholder)")
        return "0.0.0"
    parts = str(raw).strip().split(".")
    if not all(p.isdigit() for p in parts) or len(parts) > 3:
        raise ctx.fail("version", f"{raw!r} is not a semantic version (e.g. 1.0)")
    return ".".join(str(int(p)) for p in parts + ["0"] * (3 - len(parts)))


def _description(data: dict[str, Any]) -> str:
    text = " ".join(str(data.get("description") or "").split())
    refs = [str(r) for r in data.get("references") or []]
    tail = f" References: {'; '.join(refs)}." if refs else ""
    return (text or "(no description in the MLModelScope manifest)") + tail


def _license(ctx: Ctx, data: dict[str, Any]) -> str:
    lic = str(data.get("license") or "").strip()
    if not lic:
        ctx.warn("missing_field", "license", "no license; 'unknown' written")
        return "unknown"
    return lic


def _image_input(ctx: Ctx, data: dict[str, Any]) -> dict[str, Any]:
    inputs = data.get("inputs")
    if not isinstance(inputs, list) or not inputs:
        raise ctx.fail("inputs", "missing or empty: the pipeline input is undefined")
    first = inputs[0] if isinstance(inputs[0], dict) else {}
    kind = str(first.get("type", "")).strip().lower()
    if kind != "image":
        raise ctx.fail(
            "inputs[0].type",
            f"{kind or '(missing)'!r} is not supported (allowed: image); "
            "MLModelScope's image steps only run for image inputs",
            "non_image_input",
        )
    if len(inputs) > 1:
        raise ctx.fail(
            "inputs",
            f"{len(inputs)} inputs; the image predictor reads inputs[0] only and repliscope models take one input",
            "non_image_input",
        )
    return {"params": first.get("parameters") or {}}


def _agent_preprocess(ctx: Ctx, inp: dict[str, Any], fw_name: str) -> None:
    """Apply the agent's own PreprocessOptions (:data:`_AGENT_PREPROCESS`) to the input parameters, in place."""
    rules = _AGENT_PREPROCESS.get(fw_name.lower())
    if rules is None:
        return
    params = dict(inp["params"])
    f = "inputs[0].parameters"
    for key, value in rules["forced"].items():
        given = f"{params[key]!r} is ignored" if key in params else "absent"
        if key not in params or str(params[key]).upper() != value:
            ctx.warn(
                "agent_overrides",
                f"{f}.{key}",
                f"{given}: the {fw_name} agent always uses {value} (its "
                f"predict.go GetPreprocessOptions), whatever the manifest says; translated as {value}",
            )
        params[key] = value
    for key, value in rules["defaults"].items():
        if key not in params:
            ctx.warn(
                "agent_overrides",
                f"{f}.{key}",
                f"absent: the {fw_name} agent's own default {value} is used "
                "(its predict.go GetPreprocessOptions), not dlframework's",
            )
            params[key] = value
    ctx.warn(
        "agent_steps_unverified",
        "framework.name",
        f"the {fw_name} agent pins {rules['pins']}, older than "
        "the dlframework/image the translation reproduces (4aaa12c / 407d61a); their preprocess_image.go and "
        "read_image.go were not compared line by line: check a few tensors before trusting a comparison",
    )
    inp["params"] = params


def _dims(ctx: Ctx, params: dict[str, Any]) -> list[int] | None:
    raw = params.get("dimensions")
    if raw is None:
        return None
    vals = raw if isinstance(raw, list) else [raw]
    dims = [int(number(v, "inputs[0].parameters.dimensions")) for v in vals]
    if len(dims) == 1:
        dims = [3, dims[0], dims[0]]
    if len(dims) != 3:
        raise ctx.fail(
            "inputs[0].parameters.dimensions",
            f"{dims}: expected [C, H, W] or [S] "
            "(GetInputDimensions refuses other lengths; do not put the batch size in)",
        )
    if dims[0] != 3:
        raise ctx.fail(
            "inputs[0].parameters.dimensions", f"{dims}: {dims[0]} channels; the image steps always produce 3"
        )
    if dims[1] < 1 or dims[2] < 1:
        raise ctx.fail("inputs[0].parameters.dimensions", f"{dims}: height and width must be positive")
    check_image_size(dims[1], dims[2], f"{ctx.path}: inputs[0].parameters.dimensions")
    return dims


def _pipeline(
    ctx: Ctx, inp: dict[str, Any], any_size: bool
) -> tuple[list[dict[str, Any]], list[int], str, str, tuple[int, int] | None]:
    """(pre ops, input shape, layout, input dtype, fixed (H, W) or None when the size depends on the image).
    ``any_size``: the task takes an input whose size depends on the image (detection, segmentation)."""
    p = inp["params"]
    f = "inputs[0].parameters"
    elem = str(p.get("element_type", "float32")).lower()
    if elem not in ("float32", "uint8"):
        raise ctx.fail(f"{f}.element_type", f"{elem!r} is not supported (allowed: float32, uint8)")
    mode = str(p.get("color_mode", "RGB")).upper()
    if "color_mode" not in p:
        ctx.warn("missing_field", f"{f}.color_mode", "absent: MLModelScope's default RGB is used")
    if mode not in ("RGB", "BGR"):
        raise ctx.fail(f"{f}.color_mode", f"{mode!r} (allowed: RGB, BGR)")
    layout = str(p.get("layout", "HWC")).upper()
    if "layout" not in p:
        ctx.warn("missing_field", f"{f}.layout", "absent: MLModelScope's default HWC is used")
    if layout not in ("CHW", "HWC"):
        raise ctx.fail(f"{f}.layout", f"{layout!r} (allowed: CHW, HWC)")
    for key in ("crop_method", "crop_ratio"):
        if key in p:
            ctx.warn(
                "crop_ignored",
                f"{f}.{key}",
                f"{key} is parsed into PreprocessOptions but no pipeline wires "
                "steps.NewCropImage: MLModelScope never cropped, so neither does the translation",
            )
    dims = _dims(ctx, p)
    ops, fixed_hw = read_ops(ctx, p, f, mode, dims, fixed_size=not any_size)
    mean = triple(p.get("mean"), f"{f}.mean", 0.0)
    scale = triple(p.get("scale"), f"{f}.scale", 1.0)
    for key, default in (("mean", 0), ("scale", 1)):
        if key not in p:
            ctx.warn("missing_field", f"{f}.{key}", f"absent: MLModelScope's default {default} is used")
    if any(s == 0 for s in scale):
        raise ctx.fail(f"{f}.scale", f"{scale}: a zero divisor (preprocess_image.go divides by scale)")
    if elem == "uint8" and (any(m != 0 for m in mean) or any(s != 1 for s in scale)):
        raise ctx.fail(
            f"{f}.element_type",
            "'uint8' with a mean or scale: preprocess_image.go casts the "
            "normalised float32 values with Go's uint8(f) (truncating, undefined out of range); only "
            "mean 0 and scale 1 (the pixels themselves) are reproducible (allowed: float32, or uint8 "
            "without mean/scale)",
        )
    _units(ctx, f, mean, scale)
    if mode == "BGR" and len(set(mean)) > 1:
        looks = "RGB-ordered (red first)" if mean[0] > mean[2] else "BGR-ordered (blue first)"
        ctx.warn(
            "bgr_mean_order",
            f"{f}.mean",
            f"color_mode BGR with mean {_fmt(mean)}, which looks {looks}; "
            "preprocess_image.go indexes mean/scale R,G,B in both modes, so MLModelScope subtracted "
            f"{_fmt(mean[2])} from blue, {_fmt(mean[1])} from green, {_fmt(mean[0])} from red; the "
            "translation does the same"
            + ("" if mean[0] > mean[2] else " (probably NOT what the author meant: Caffe's BGR means are blue first)"),
        )
    order = [2, 1, 0] if mode == "BGR" else [0, 1, 2]
    if elem == "float32":
        ops.append({"op": "to_float", "dtype": "float32"})
    if any(m != 0 for m in mean):
        ops.append({"op": "subtract_mean", "value": _per_channel([mean[i] for i in order])})
    if any(s != 1 for s in scale):
        ops.append({"op": "divide_std", "value": _per_channel([scale[i] for i in order])})
    nchw = layout == "CHW"
    ops.append({"op": "data_layout", "layout": "NCHW" if nchw else "NHWC"})
    h, w = fixed_hw if fixed_hw is not None else (-1, -1)
    shape = [-1, 3, h, w] if nchw else [-1, h, w, 3]
    return ops, shape, "NCHW" if nchw else "NHWC", elem, fixed_hw


def _units(ctx: Ctx, f: str, mean: list[float], scale: list[float]) -> None:
    if 0 < max(mean) <= 1:
        ctx.warn(
            "suspicious_units",
            f"{f}.mean",
            f"mean {_fmt(mean)} looks like [0, 1] units, but MLModelScope "
            "subtracts it from 0-255 pixel values (translated as written)",
        )
    if min(scale) < 1:
        ctx.warn(
            "suspicious_units",
            f"{f}.scale",
            f"scale {_fmt(scale)} < 1 looks like a multiplier, but "
            "MLModelScope DIVIDES by scale (translated as a division, as it ran)",
        )


def _per_channel(vals: list[float]) -> float | list[float]:
    return vals[0] if len(set(vals)) == 1 else vals


def _fmt(v: float | list[float]) -> str:
    if isinstance(v, list):
        return "[" + ", ".join(_fmt(x) for x in v) + "]"
    return f"{v:g}"


def _https(ctx: Ctx, url: str, field: str) -> str:
    if url.startswith("http://"):
        new = "https://" + url.removeprefix("http://")
        ctx.warn(
            "http_url",
            field,
            f"{url} rewritten to {new}: repliscope downloads over https only (check that the host serves it)",
        )
        return new
    return url


def _join(base: str, rel: str) -> str:
    """GetGraphUrl/GetWeightsUrl: base_url trimmed of '/', plus '/', plus the path (base may be empty)."""
    base = base.strip().rstrip("/").strip()
    return f"{base}/{rel}" if base else rel


def _framework_and_source(ctx: Ctx, data: dict[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    fw = data.get("framework") or {}
    fw_name = str(fw.get("name") or "").strip()
    if not fw_name:
        raise ctx.fail("framework.name", "missing: the agent that ran the model is unknown")
    raw_version = str(fw.get("version") or "").strip()
    constraint = ">=0"
    if raw_version:
        first = raw_version.split("||")[0]
        if first != raw_version:
            ctx.warn(
                "framework_version",
                "framework.version",
                f"{raw_version!r} has OR alternatives ('||'); "
                f"PEP 440 cannot express them: only {first.strip()!r} is kept",
            )
        constraint = pep440_constraint(first, f"{ctx.path}: framework.version")
    model = data.get("model") or {}
    graph = str(model.get("graph_path") or "").strip()
    weights = str(model.get("weights_path") or "").strip()
    base = str(model.get("base_url") or "").strip()
    archive = model.get("is_archive") is True
    if not graph and not (archive and base):
        raise ctx.fail("model.graph_path", "missing: no model file to run")
    if archive:
        uri, field, checksum = base, "model.base_url", ""
        ctx.warn(
            "archive_source",
            "model.is_archive",
            f"the model is {graph!r} inside the archive {base}; "
            "MLModelScope downloaded and unpacked the archive WITHOUT checking a checksum (graph_checksum "
            "is not passed to DownloadInto); extract the file and point source.uri at it",
        )
    else:
        uri, field = _join(base, graph), "model.graph_path"
        checksum = str(model.get("graph_checksum") or "").strip()
    if weights:
        ctx.warn(
            "two_file_model",
            "model.weights_path",
            f"graph {graph!r} and weights {weights!r} are two files; "
            "repliscope runs one model file: source.uri names the graph only (convert both to one ONNX file)",
        )
    agent = agent_framework(fw_name)
    runnable = (
        agent is not None
        and agent.suffix is not None
        and graph.lower().endswith(agent.suffix)
        and not archive
        and not weights
    )
    uri = _https(ctx, uri, field) if "://" in uri else uri
    sha256 = _source_sha256(ctx, uri, checksum, "model.graph_checksum")
    if runnable and agent is not None and agent.framework is not None and agent.source_format is not None:
        kept = carries_constraint(agent)
        framework = {"name": agent.framework, "version": constraint if kept else ">=0"}
        if not kept and constraint != ">=0":
            ctx.warn(
                "framework_runtime",
                "framework.version",
                f"MLModelScope ran the model with {agent.title} {raw_version} ({agent.distribution}{constraint} "
                f"in PEP 440); repliscope's framework '{agent.framework}' constrains the {agent.framework} "
                f"package, not {agent.distribution}, so framework.version is >=0; to run it on the agent's runtime "
                f"version: repliscope evaluate MANIFEST --runtime {agent.runtime} "
                f"--stack '{agent.distribution}{constraint}'",
            )
        if agent.framework == "tensorflow" and not _allows_tf2(constraint):
            ctx.warn(
                "framework_version",
                "framework.version",
                f"MLModelScope ran the graph with TensorFlow "
                f"{raw_version} (= {constraint}); kept, so evaluate refuses under TensorFlow 2 until you relax "
                "it (repliscope's tensorflow runtime loads TF1 frozen graphs through tf.compat.v1)",
            )
        return framework, {"uri": uri, "sha256": sha256, "format": agent.source_format}
    framework = {"name": "onnx", "version": ">=0"}
    known = ", ".join(a.title for a in AGENT_FRAMEWORKS.values())
    what = (
        f"{agent.title}" if agent is not None else f"{fw_name}, an agent this importer does not know (known: {known})"
    )
    ctx.warn(
        "framework_not_runnable",
        "framework",
        f"MLModelScope ran {graph or base!r} with {what} "
        f"{raw_version} (= {constraint} in PEP 440); repliscope runs ONNX files, TensorFlow frozen graphs "
        "(.pb) and torch state_dicts only: framework 'onnx' >=0 and source.format 'onnx' are placeholders; "
        "export the model to ONNX and replace source.uri and source.sha256 (the pre-processing stays valid)",
    )
    return framework, {"uri": uri, "sha256": sha256, "format": "onnx"}


def _allows_tf2(constraint: str) -> bool:
    from packaging.specifiers import SpecifierSet

    return SpecifierSet(constraint).contains("2.99", prereleases=True)


def _source_sha256(ctx: Ctx, uri: str, md5: str, field: str) -> str:
    """The sha256 of a local (relative or package://) file; the placeholder for remote ones, with a warning."""
    local: Path | None = None
    if uri.startswith("package://"):
        from repliscope.manifest.sources import locate_package_file

        try:
            local = locate_package_file(uri)
        except SourceError as exc:
            raise ctx.fail(field, str(exc), "model_file") from exc
    elif "://" not in uri:
        from repliscope.manifest.sources import local_path

        try:  # the manifest's path policy: inside the config's folder (no '..', absolute path or symlink out)
            local = local_path(uri, ctx.path.parent)
        except SourceError as exc:  # the path is the problem, not the checksum
            raise ctx.fail("model.graph_path", str(exc), "model_file") from exc
        if not local.is_file():
            raise ctx.fail(
                field,
                f"the local model file {local} does not exist (relative paths are read against {ctx.path.parent})",
                "model_file",
            )
    if local is not None:
        blob = local.read_bytes()
        if md5 and hashlib.md5(blob).hexdigest() != md5.lower():
            raise ctx.fail(
                field,
                f"MD5 of {local} is {hashlib.md5(blob).hexdigest()}, the manifest "
                f"declares {md5}: not the file MLModelScope ran",
                "model_file",
            )
        if not md5:
            ctx.warn(
                "empty_checksum",
                field,
                f"empty: MLModelScope would have run {uri} unverified; its sha256 was computed from the local file",
            )
        return hashlib.sha256(blob).hexdigest()
    if not md5:
        ctx.warn(
            "empty_checksum",
            field,
            f"empty: MLModelScope downloaded {uri} without any check; "
            f"source.sha256 is the placeholder {PLACEHOLDER_SHA256[:8]}... (never matches): download the "
            "file, check it by other means, then `sha256sum FILE` and write the result to source.sha256",
        )
    else:
        ctx.warn(
            "md5_checksum",
            field,
            f"MD5 {md5} (checked by rai-project/downloadmanager) cannot stand for a "
            f"sha256: source.sha256 is the placeholder {PLACEHOLDER_SHA256[:8]}... (never matches, so "
            f"nothing unverified runs); download {uri}, check `md5sum FILE` = {md5}, then `sha256sum FILE` "
            "and write the result to source.sha256",
        )
    return PLACEHOLDER_SHA256


def _labels(ctx: Ctx, data: dict[str, Any]) -> tuple[dict[str, Any], int]:
    params = (data.get("output") or {}).get("parameters") or {}
    url = str(params.get("features_url") or "").strip()
    md5 = str(params.get("features_checksum") or "").strip().lower()
    f = "output.parameters.features_url"
    if not url:
        raise ctx.fail(f, "missing: without the class names file the class count is undefined")
    known = KNOWN_LABEL_FILES.get(md5)
    if known is None:
        given = given_labels(ctx, url, md5)
        if given is not None:
            return {k: v for k, v in given.items() if k != "names"}, int(given["num_classes"])
        raise ctx.fail(
            f,
            f"{url} (MD5 {md5 or 'empty'}) is not a label file the importer knows"
            f"{other_labels_file(ctx)}; the class count and names cannot be read without it: "
            "download it, check "
            f"`md5sum FILE` = {md5 or '(none given: check the file by other means)'} and import again with "
            "--labels FILE (known MD5s: " + ", ".join(sorted(KNOWN_LABEL_FILES)) + ")",
            "unknown_label_file",
        )
    source, count = known
    trained = str(_attr(data, "training_dataset") or "").strip()
    if trained and not trained.lower().startswith(("imagenet", "ilsvrc")):
        ctx.warn(
            "label_file_mismatch",
            f,
            f"attributes.training_dataset is {trained!r} but {url} is an ImageNet "
            f"label file ({count} classes): MLModelScope named the predictions with ImageNet classes; the "
            f"translation keeps {count} classes as it ran (check the model's real class count)",
        )
    note = LABEL_FILE_NOTES.get(md5)
    if note:
        ctx.warn("label_offset", f, f"{url} {note}")
    return {"source": source, "num_classes": count}, count


_DEFAULT_OUTPUT = {"cntk": "z", "tensorrt": "prob"}
"""The agents' DefaultOutputLayerName (rai-project/cntk predict/default.go, rai-project/tensorrt predictor/
default.go), used when probabilities_layer is absent; other agents: ``output`` (a placeholder)."""


def _output(
    ctx: Ctx, data: dict[str, Any], num_classes: int, fw_name: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    params = (data.get("output") or {}).get("parameters") or {}
    if "probabilities_layer" not in params:
        default = _DEFAULT_OUTPUT.get(fw_name.lower())
        ctx.warn(
            "missing_field",
            "output.parameters.probabilities_layer",
            f"absent: the {fw_name} agent's default output {default!r} is used"
            if default
            else "absent: 'output' is written (a placeholder: set the model's real output name)",
        )
        params = {**params, "probabilities_layer": default or "output"}
    transform = str(params.get("probabilities_transform") or "").strip().lower()
    if transform not in ("", "softmax"):
        raise ctx.fail("output.parameters.probabilities_transform", f"{transform!r} (allowed: softmax, or absent)")
    logits = transform == "softmax"
    post: list[dict[str, Any]] = ([{"op": "softmax", "axis": -1}] if logits else []) + [
        {"op": "topk", "k": min(5, num_classes)},
        {"op": "labels"},
    ]
    out = {
        "name": str(params.get("probabilities_layer", "output")),
        "shape": [-1, num_classes],
        "dtype": "float32",
        "layout": "NC",
        "kind": "logits" if logits else "probabilities",
    }
    return [out], post


def _attr(data: dict[str, Any], key: str) -> Any:
    attrs = data.get("attributes") or {}
    return next((v for k, v in attrs.items() if str(k).lower() == key), None)


def _datasets(data: dict[str, Any], coco_claim: bool = False) -> dict[str, list[dict[str, str]]]:
    ds = str(_attr(data, "training_dataset") or "").strip()
    if coco_claim:
        return {
            "trained_on": [{"name": "coco", "split": "train"}],
            "evaluated_on": [{"name": "coco", "split": "val2017"}],
        }
    if ds.lower() == "imagenet":
        return {
            "trained_on": [{"name": "imagenet-1k", "split": "train"}],
            "evaluated_on": [{"name": "imagenet-1k", "split": "val"}],
        }
    if ds:
        return {"trained_on": [{"name": "coco" if ds.lower() == "coco" else ds, "split": "train"}], "evaluated_on": []}
    return {"trained_on": [], "evaluated_on": []}


def _claims(data: dict[str, Any], path: Path) -> list[dict[str, Any]]:
    if str(_attr(data, "training_dataset") or "").strip().lower() != "imagenet":
        return []
    claims = []
    for metric in ("top1", "top5"):
        val = _attr(data, metric)
        if val is None:
            continue
        claims.append(
            {
                "metric": metric,
                "value": float(val),
                "dataset": {"name": "imagenet-1k", "split": "val"},
                "source": f"MLModelScope manifest {path.name} (attributes.{metric})",
            }
        )
    return claims
