"""Convert a ``.tflite`` flatbuffer or a TensorFlow frozen GraphDef to ONNX once, with tf2onnx, cached.

Converter: tf2onnx (``tf2onnx.convert.from_tflite`` / ``from_graph_def``), the converter the ONNX project
maintains; it installs beside numpy 2, onnx 1.2x and protobuf 7 (it imports TensorFlow, which must be
installed). Opset :data:`OPSET`. Tensor names are kept: a TFLite model's input/outputs keep their tensor names
(e.g. ``input``, ``reshaped_regressor_face_4``); a frozen graph's keep the TF names the manifest gives (e.g.
``image_tensor:0``, ``detection_boxes:0``). Layout is kept (NHWC models stay NHWC).

Cache: ``cache_dir / f"{sha256[:16]}-{key}.onnx"``, ``key`` hashing the source sha256 and format, the input and
output names, the opset and the tf2onnx version; the cache is the one every conversion shares
(:meth:`repliscope.runtimes.loaders.Conversion.cached`): written aside, verified, renamed atomically, a sidecar
``.json`` recording the inputs (source sha256, format, key) and the output's sha256, a hit used only when both
match; its info is the record's ``notes["conversion"]``.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from repliscope.backends.tensorflow.loader import read_graph_def, tensor_name
from repliscope.runtimes.base import ModelArtifact
from repliscope.runtimes.errors import ModelLoadError
from repliscope.runtimes.loaders import Conversion

OPSET = 17
CONVERTER = "tf2onnx"


def converter_version() -> str:
    try:
        return importlib.metadata.version(CONVERTER)
    except importlib.metadata.PackageNotFoundError as exc:
        raise ModelLoadError(
            "running a 'tflite' or 'tf_frozen_graph' source on an ONNX runtime converts it "
            "with tf2onnx, which is not installed: pip install 'repliscope[tflite]' "
            "(tf2onnx needs tensorflow too: pip install 'repliscope[keras]')"
        ) from exc


def conversion_key(artifact: ModelArtifact) -> str:
    """16 hex digits identifying a conversion of ``artifact`` with this tf2onnx and opset."""
    payload = {
        "source_sha256": artifact.sha256,
        "format": artifact.format,
        "input_name": artifact.input_name,
        "output_names": list(artifact.output_names),
        "opset": OPSET,
        "converter": f"{CONVERTER}=={converter_version()}",
    }
    if artifact.format == "tflite":  # the custom-op handlers (repliscope.runtimes.tf2onnx_custom_ops) it runs with
        from repliscope.runtimes.tf2onnx_custom_ops import HANDLERS_VERSION

        payload["custom_op_handlers"] = HANDLERS_VERSION
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def conversion_cache_path(artifact: ModelArtifact, cache_dir: Path) -> Path:
    return Path(cache_dir) / f"{artifact.sha256[:16]}-{conversion_key(artifact)}.onnx"


class Tf2OnnxConversion(Conversion):
    """A ``tflite`` / ``tf_frozen_graph`` source -> ONNX with tf2onnx, through the shared verified cache
    (:meth:`repliscope.runtimes.loaders.Conversion.cached`); its info is the record's ``notes["conversion"]``."""

    target = "onnx"

    def __init__(self, source: str) -> None:
        self.source = source

    def check_source(self, artifact: ModelArtifact) -> None:
        if artifact.format not in ("tflite", "tf_frozen_graph"):
            raise ModelLoadError(f"tf2onnx converts 'tflite' and 'tf_frozen_graph' sources, not '{artifact.format}'")
        super().check_source(artifact)

    def cache_path(self, artifact: ModelArtifact, cache_dir: Path) -> Path:
        return conversion_cache_path(artifact, cache_dir)

    def inputs(self, artifact: ModelArtifact) -> dict[str, Any]:
        return {"source_sha256": artifact.sha256, "format": artifact.format, "cache_key": conversion_key(artifact)}

    def convert(self, artifact: ModelArtifact, out: Path) -> dict[str, Any]:
        start = time.perf_counter()
        with _quiet():
            _convert(artifact, out)
        return {
            "converter": CONVERTER,
            "converter_version": converter_version(),
            "opset": OPSET,
            "from": artifact.format,
            "source_sha256": artifact.sha256,
            "seconds": round(time.perf_counter() - start, 3),
        }


TFLITE_TO_ONNX = Tf2OnnxConversion("tflite")
FROZEN_GRAPH_TO_ONNX = Tf2OnnxConversion("tf_frozen_graph")


def convert_to_onnx(artifact: ModelArtifact, cache_dir: Path) -> tuple[Path, dict[str, Any]]:
    """The ONNX conversion of a ``tflite`` / ``tf_frozen_graph`` artifact, converted on first use and reused
    after. Returns ``(path, info)``: converter, version, opset, source sha256, cache path, onnx sha256, seconds,
    ``cached`` (True when reused)."""
    conversion = FROZEN_GRAPH_TO_ONNX if artifact.format == "tf_frozen_graph" else TFLITE_TO_ONNX
    return conversion.cached(artifact, cache_dir)


def _convert(artifact: ModelArtifact, target: Path) -> None:
    import tf2onnx

    outputs = list(artifact.output_names) or None
    try:
        if artifact.format == "tflite":
            from repliscope.runtimes.tf2onnx_custom_ops import custom_op_handlers

            tf2onnx.convert.from_tflite(
                str(artifact.path),
                opset=OPSET,
                output_path=str(target),
                input_names=[artifact.input_name] if artifact.input_name else None,
                output_names=outputs,
                custom_op_handlers=custom_op_handlers(artifact.path) or None,
            )
            return
        if not artifact.input_name or not outputs:
            raise ModelLoadError(
                "a frozen graph is converted between named tensors: the manifest must name "
                "inputs[0] and every output (e.g. image_tensor:0, detection_boxes:0)"
            )
        tf2onnx.convert.from_graph_def(
            read_graph_def(artifact.path),
            opset=OPSET,
            output_path=str(target),
            input_names=[tensor_name(artifact.input_name)],
            output_names=[tensor_name(n) for n in outputs],
        )
    except ModelLoadError:
        raise
    except Exception as exc:
        raise ModelLoadError(
            f"tf2onnx cannot convert '{artifact.path}' ({artifact.format}) to ONNX opset {OPSET}: "
            f"{type(exc).__name__}: {exc}"
        ) from exc


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """tf2onnx logs every rewrite at INFO: keep it at WARNING while converting."""
    logger = logging.getLogger("tf2onnx")
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(level)
