"""Export a weight-only torch source to ONNX once, cached by everything that determines the graph.

Exporter: ``torch.onnx.export(dynamo=True)`` (torch.export + onnxscript), opset 18, batch axis dynamic. It
was chosen over the TorchScript exporter (``dynamo=False``, deprecated since torch 2.9) because its graph is
clean (for EfficientNet-Lite: 49 Conv, 33 Clip, 9 Add, ReduceMean, Reshape, Gemm; BatchNorm folded, the
"same" padding folded into Conv pads) and both onnxruntime and OpenCV DNN (both engines) run it with any
batch size; OpenCV's classic engine cannot run the TorchScript export with a batch other than the traced
one (its Gemm gets (1, N*1280)).

Cache: ``cache_dir / f"{sha256[:16]}-{key}.onnx"``, ``key`` hashing the source sha256, the architecture
factory + kwargs, the input shape and dtype, the opset, the exporter and the torch version. A sidecar
``.json`` keeps the export's provenance and sha256; a cached file that no longer matches it is exported
again. Files are written under temporary names and renamed atomically, so concurrent runs never see a
partial file (at worst both export, and the last rename wins; the export is byte-for-byte deterministic).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import time
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from repliscope.backends.torch.loader import build_torch_module
from repliscope.errors import RepliscopeError
from repliscope.manifest.sources import sha256_file
from repliscope.runtimes.base import ModelArtifact
from repliscope.runtimes.errors import ModelLoadError

OPSET = 18
EXPORTER = "torch.onnx.export(dynamo=True)"
_EXAMPLE_BATCH = 2  # torch.export specialises sizes 0 and 1, so trace with 2 to keep the batch axis dynamic


def export_key(artifact: ModelArtifact) -> str:
    """16 hex digits identifying an export of ``artifact`` with this torch, exporter and opset."""
    arch = artifact.architecture
    payload = {
        "source_sha256": artifact.sha256,
        "factory": arch.factory if arch else None,
        "kwargs": arch.kwargs if arch else None,
        "input_shape": [-1 if d is None or d < 0 else int(d) for d in artifact.input_shape],
        "input_dtype": artifact.input_dtype,
        "input_name": artifact.input_name,
        "opset": OPSET,
        "exporter": EXPORTER,
        "torch_version": torch.__version__,
    }
    if arch is not None and arch.module_sha256 is not None:  # a local module: its code shapes the graph
        payload["module_sha256"] = arch.module_sha256
    blob = json.dumps(payload, sort_keys=True, default=repr).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def export_cache_path(artifact: ModelArtifact, cache_dir: Path) -> Path:
    """Where the export of ``artifact`` is (or will be) cached."""
    return Path(cache_dir) / f"{artifact.sha256[:16]}-{export_key(artifact)}.onnx"


def export_to_onnx(artifact: ModelArtifact, cache_dir: Path) -> tuple[Path, dict[str, Any]]:
    """The ONNX export of a ``pytorch_state_dict`` artifact, exported on first use and reused after.

    The ONNX model has one input named ``artifact.input_name`` (same dtype and layout as the torch
    model, e.g. float32 NCHW (N, 3, 224, 224), N dynamic when the manifest's batch is -1) and one output
    ``"logits"`` (N, C) float32. Returns ``(path, info)``; ``info["cached"]`` is True when reused.
    """
    if artifact.format != "pytorch_state_dict":
        raise ModelLoadError(f"only a 'pytorch_state_dict' source can be exported to ONNX, not '{artifact.format}'")
    path = export_cache_path(artifact, cache_dir)
    sidecar = path.with_suffix(".json")
    stale = None
    if path.is_file() and sidecar.is_file():
        try:
            info = json.loads(sidecar.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            info = None
        if isinstance(info, dict):
            digest = sha256_file(path)
            if digest == info.get("onnx_sha256"):
                return path, {**info, "onnx_path": str(path), "cached": True}
            stale = f"cached file's sha256 {digest[:16]} differs from the recorded {info.get('onnx_sha256')}"
    info = _export(artifact, path)
    if stale:
        info["reexported_because"] = stale
    return path, {**info, "cached": False}


def _export(artifact: ModelArtifact, path: Path) -> dict[str, Any]:
    dims = list(artifact.input_shape)
    if any(d is None or d < 0 for d in dims[1:]):
        raise ModelLoadError(f"input shape {tuple(dims)}: only the batch axis may be dynamic for an ONNX export")
    dynamic = dims[0] is None or dims[0] < 0
    example_shape = (_EXAMPLE_BATCH if dynamic else dims[0], *dims[1:])
    describe: dict[str, Any] = {}
    module = build_torch_module(artifact, describe)
    example = torch.from_numpy(np.zeros(example_shape, dtype=np.dtype(artifact.input_dtype)))
    input_name = artifact.input_name or "input"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp.onnx")
    dynamic_shapes = ({0: torch.export.Dim("batch")},) if dynamic else None
    start = time.perf_counter()
    try:
        with quiet_torch_exporter():
            torch.onnx.export(
                module,
                (example,),
                str(tmp),
                dynamo=True,
                opset_version=OPSET,
                input_names=[input_name],
                output_names=["logits"],
                dynamic_shapes=dynamic_shapes,
                external_data=False,
                optimize=True,
                verbose=False,
            )
        seconds = time.perf_counter() - start
        info: dict[str, Any] = {
            "exported_from": "torch",
            "exporter": EXPORTER,
            "opset": OPSET,
            "onnx_path": str(path),
            "torch_version": torch.__version__,
            "source_sha256": artifact.sha256,
            "cache_key": export_key(artifact),
            "input_name": input_name,
            "input_shape": [-1 if d is None or d < 0 else int(d) for d in dims],
            "dynamic_batch": dynamic,
            "export_seconds": round(seconds, 3),
            "model": describe,
            "onnx_sha256": sha256_file(tmp),
        }
        _atomic_write_text(path.with_suffix(".json"), json.dumps(info, indent=2, sort_keys=True))
        os.replace(tmp, path)
    except RepliscopeError:
        raise
    except Exception as exc:
        raise ModelLoadError(
            f"exporting '{artifact.path.name}' to ONNX with {EXPORTER} failed: "
            f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc) else ''}. "
            "Give an ONNX source in the manifest instead, or use the torch runtime"
        ) from exc
    finally:
        tmp.unlink(missing_ok=True)
    return info


@contextlib.contextmanager
def quiet_torch_exporter() -> Iterator[None]:
    """Silence torch-internal chatter that users cannot act on (deprecations inside torch.export and Inductor,
    and "torchvision is not installed. Skipping torchvision::nms" from the op registry). Errors still raise."""
    registry_logger = logging.getLogger("torch.onnx._internal.exporter._registration")
    level = registry_logger.level
    registry_logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            warnings.simplefilter("ignore", DeprecationWarning)
            yield
    finally:
        registry_logger.setLevel(level)


def _atomic_write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
