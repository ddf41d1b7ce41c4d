"""Helpers shared by the runners: batch checks, output normalisation, framework versions, ONNX sources.

Nothing here imports an ML framework at module level.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from repliscope.errors import FrameworkError
from repliscope.runtimes.base import ModelArtifact
from repliscope.runtimes.errors import BatchError, ModelLoadError


def distribution_version(candidates: Iterable[str]) -> tuple[str, str]:
    """(distribution name, version) of the first installed distribution among ``candidates``."""
    names = list(candidates)
    for name in names:
        try:
            return name, importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    raise FrameworkError(f"none of the distributions {', '.join(names)} is installed; "
                         f"install one, e.g. pip install {names[0]}")


def check_batch(batch: np.ndarray, artifact: ModelArtifact) -> None:
    """Check a batch against the artifact's input spec: same rank, same fixed (non-batch) dims, same dtype.

    ``batch``: (N, ...) e.g. float32 NCHW (N, 3, 224, 224). No silent casting: a float64 batch for a
    float32 model is an error, because the cast is a pre-processing choice the manifest must state.
    """
    if not isinstance(batch, np.ndarray):
        raise BatchError(f"infer() needs a numpy array, got {type(batch).__name__}")
    shape = artifact.input_shape
    if batch.ndim != len(shape):
        raise BatchError(f"batch has shape {batch.shape} (rank {batch.ndim}); input '{artifact.input_name}' "
                             f"expects rank {len(shape)}: {_fmt_shape(shape)}")
    if batch.shape[0] < 1:
        raise BatchError("batch is empty (N = 0)")
    for axis, (got, want) in enumerate(zip(batch.shape[1:], shape[1:], strict=True), start=1):
        if want is not None and want >= 0 and got != want:
            raise BatchError(f"batch has shape {batch.shape}; input '{artifact.input_name}' expects "
                                 f"{_fmt_shape(shape)} (axis {axis} is {got}, not {want})")
    if batch.dtype != np.dtype(artifact.input_dtype):
        raise BatchError(f"batch dtype is {batch.dtype}; input '{artifact.input_name}' expects "
                             f"{artifact.input_dtype} (cast it in the pre-processing pipeline)")


def to_scores(out: Any, n: int) -> np.ndarray:
    """Framework output -> float32 (N, C). Trailing singleton axes, e.g. (N, C, 1, 1), are dropped."""
    arr = np.asarray(out)
    while arr.ndim > 2 and arr.shape[-1] == 1:
        arr = arr[..., 0]
    if arr.ndim != 2 or arr.shape[0] != n:
        raise ModelLoadError(f"model output has shape {np.asarray(out).shape}; expected (N={n}, C)")
    return np.ascontiguousarray(arr, dtype=np.float32)


def onnx_source(artifact: ModelArtifact, cache_dir: Path, notes: dict[str, Any]) -> Path:
    """The ONNX file to run: the source itself, or the cached torch -> ONNX export (noted in ``notes``)."""
    if artifact.format == "onnx":
        return artifact.path
    if artifact.format == "pytorch_state_dict":
        from repliscope.runtimes.onnx_export import export_to_onnx

        path, info = export_to_onnx(artifact, cache_dir)
        notes["export"] = info
        return path
    raise ModelLoadError(f"unsupported source format '{artifact.format}' (allowed: onnx, pytorch_state_dict)")


def _fmt_shape(shape: tuple[int, ...]) -> str:
    return "(" + ", ".join("N" if d is None or d < 0 else str(d) for d in shape) + ")"
