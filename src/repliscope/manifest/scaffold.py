"""``repliscope manifest new``: a commented manifest scaffolded from a model source URI.

What can be known is filled in: the sha256 (computed from the file), the format (from the suffix: ``.onnx``
-> onnx, ``.pth``/``.pt`` -> pytorch_state_dict), the framework constraint (the installed major version),
and for ONNX the input/output names and shapes read from the graph. What only the author knows (description,
license, the architecture factory of a weight-only file) is the explicit placeholder :data:`PLACEHOLDER`,
which the loader refuses by line until it is replaced. The pre-processing is written out in full, as the
common ImageNet evaluation, with a comment to check it against the model's reference code.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from repliscope.errors import SourceError
from repliscope.manifest.checksums import source_file_sha256
from repliscope.manifest.frameworks import installed_version
from repliscope.manifest.loader import PLACEHOLDER
from repliscope.manifest.sources import resolve_source

_FORMATS = {".onnx": "onnx", ".pth": "pytorch_state_dict", ".pt": "pytorch_state_dict"}


def scaffold(uri: str, base_dir: Path, cache_dir: Path, allow_outside_paths: bool = False) -> str:
    """The text of a new manifest for the model file at ``uri`` (resolved as a manifest in ``base_dir`` would
    resolve it; an https source must already be in the cache)."""
    suffix = Path(uri.split("?")[0]).suffix.lower()
    if suffix not in _FORMATS:
        raise SourceError(
            f"{uri}: cannot tell the format from the suffix '{suffix}' (allowed: {', '.join(sorted(_FORMATS))})"
        )
    fmt = _FORMATS[suffix]
    if uri.startswith("https://"):
        raise SourceError(
            f"{uri}: download the file first and scaffold from the local copy (repliscope never "
            "downloads while scaffolding); then set source.uri back to the https address"
        )
    path = resolve_source(
        uri, base_dir=base_dir, sha256=None, cache_dir=cache_dir, allow_outside_paths=allow_outside_paths
    )
    sha = source_file_sha256(path)  # an .onnx with external data: over the model and its data files
    stem = re.sub(r"[^a-z0-9._-]+", "-", Path(path).stem.lower()).strip("-._") or "model"
    io = _onnx_io(path) if fmt == "onnx" else None
    framework = "onnx" if fmt == "onnx" else "torch"
    return _TEMPLATE.format(
        name=stem,
        uri=uri,
        sha=sha,
        format=fmt,
        framework=framework,
        constraint=_constraint(framework),
        ph=PLACEHOLDER,
        architecture=_ARCHITECTURE.format(ph=PLACEHOLDER) if fmt == "pytorch_state_dict" else "",
        input_name=io["input"] if io else "input",
        input_shape=io["input_shape"] if io else "[-1, 3, 224, 224]",
        output_name=io["output"] if io else "logits",
        output_shape=io["output_shape"] if io else "[-1, 1000]",
    )


def _constraint(distribution: str) -> str:
    """``>=MAJOR.MINOR,<MAJOR+1`` of the installed version (a plain ``>=0`` if it is not installed)."""
    version = installed_version(distribution)
    if version is None:
        return ">=0"
    parts = [int(p) for p in re.findall(r"\d+", version)[:2]] + [0]
    return f">={parts[0]}.{parts[1]},<{parts[0] + 1}"


def _onnx_io(path: Path) -> dict[str, Any] | None:
    """Input/output names and shapes (-1 for a symbolic axis) of an ONNX graph; None if onnx cannot read it."""
    try:
        import onnx

        graph = onnx.load(str(path), load_external_data=False).graph
        init = {t.name for t in graph.initializer}
        inp = next(i for i in graph.input if i.name not in init)
        out = graph.output[0]
    except Exception:  # a file onnx cannot parse is reported by validate, not here
        return None

    def shape(value: Any) -> str:
        dims = value.type.tensor_type.shape.dim
        return "[" + ", ".join(str(d.dim_value) if d.dim_value > 0 else "-1" for d in dims) + "]"

    return {"input": inp.name, "input_shape": shape(inp), "output": out.name, "output_shape": shape(out)}


_ARCHITECTURE = """
# A weight-only file needs the code that builds the module: "module:callable" (dotted attributes allowed),
# the pip requirement that provides it, and the keyword arguments of the call.
architecture:
  factory: "{ph}: module:callable, e.g. efficientnet_lite_pytorch:EfficientNet.from_name"
  package: "{ph}: a requirement, e.g. efficientnet-lite-pytorch==0.1.0"
  kwargs: {{}}
"""

_TEMPLATE = """\
# Scaffolded by `repliscope manifest new`. Replace every "{ph}" value, check the pre-processing against the
# model's reference evaluation code, then run `repliscope manifest validate` on this file.
name: {name}
version: 0.1.0
task: image_classification
description: "{ph}: what the model is, where it comes from, known caveats"
license: "{ph}: the license of the weights, e.g. Apache-2.0"

framework:
  name: {framework}
  version: "{constraint}"   # PEP 440 constraint, checked against the installed version

source:
  uri: {uri}
  sha256: {sha}   # computed from the file; a mismatch refuses to run
  format: {format}
{architecture}
inputs:
  - name: {input_name}
    shape: {input_shape}   # -1 = the batch axis
    dtype: float32
    layout: NCHW

# CHECK: the common ImageNet evaluation (resize the shorter side to 256 = 224 / 0.875, center crop 224,
# ImageNet mean/std on 0-255 values). Many models differ (crop padding, mean 127 / std 128, BGR, ...).
preprocess:
  - op: decode
    library: pillow
    channels: RGB
  - op: resize
    size: 256
    keep_aspect_ratio: true
    method: bilinear
    library: pillow
    antialias: true
  - op: center_crop
    size: 224
  - op: to_float
    dtype: float32
  - op: subtract_mean
    value: [123.675, 116.28, 103.53]
  - op: divide_std
    value: [58.395, 57.12, 57.375]
  - op: data_layout
    layout: NCHW

outputs:
  - name: {output_name}
    shape: {output_shape}
    dtype: float32
    layout: NC
    kind: logits   # or probabilities (then remove the softmax below)

postprocess:
  - op: softmax
    axis: -1
  - op: topk
    k: 5
  - op: labels

labels:
  source: builtin:imagenet-1k   # or a text file next to this manifest, one class per line
  num_classes: 1000

# Published claims, e.g. {{metric: top1, value: 75.1, dataset: {{name: imagenet-1k, split: val}}, source: URL}}
claims: []

datasets:
  trained_on: []   # e.g. - {{name: imagenet-1k, split: train}}
  evaluated_on: []
"""
