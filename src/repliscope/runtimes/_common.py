"""Helpers shared by the runners: batch checks, output normalisation, framework versions, ONNX sources.

Nothing here imports an ML framework at module level.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from repliscope.errors import FrameworkError
from repliscope.runtimes.base import ModelArtifact
from repliscope.runtimes.errors import BatchError, ModelLoadError
from repliscope.runtimes.loaders import load_as


def distribution_version(candidates: Iterable[str]) -> tuple[str, str]:
    """(distribution name, version) of the first installed distribution among ``candidates``."""
    names = list(candidates)
    for name in names:
        try:
            return name, importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    raise FrameworkError(
        f"none of the distributions {', '.join(names)} is installed; install one, e.g. pip install {names[0]}"
    )


def check_batch(batch: np.ndarray, artifact: ModelArtifact) -> None:
    """Check a batch against the artifact's input spec: same rank, same fixed (non-batch) dims, same dtype.

    ``batch``: (N, ...) e.g. float32 NCHW (N, 3, 224, 224). No silent casting: a float64 batch for a
    float32 model is an error, because the cast is a pre-processing choice the manifest must state.
    """
    if not isinstance(batch, np.ndarray):
        raise BatchError(f"infer() needs a numpy array, got {type(batch).__name__}")
    shape = artifact.input_shape
    if batch.ndim != len(shape):
        raise BatchError(
            f"batch has shape {batch.shape} (rank {batch.ndim}); input '{artifact.input_name}' "
            f"expects rank {len(shape)}: {_fmt_shape(shape)}"
        )
    if batch.shape[0] < 1:
        raise BatchError("batch is empty (N = 0)")
    for axis, (got, want) in enumerate(zip(batch.shape[1:], shape[1:], strict=True), start=1):
        if want is not None and want >= 0 and got != want:
            raise BatchError(
                f"batch has shape {batch.shape}; input '{artifact.input_name}' expects "
                f"{_fmt_shape(shape)} (axis {axis} is {got}, not {want})"
            )
    if batch.dtype != np.dtype(artifact.input_dtype):
        raise BatchError(
            f"batch dtype is {batch.dtype}; input '{artifact.input_name}' expects "
            f"{artifact.input_dtype} (cast it in the pre-processing pipeline)"
        )


def to_scores(out: Any, n: int) -> np.ndarray:
    """Framework output -> float32 (N, C). Trailing singleton axes, e.g. (N, C, 1, 1), are dropped."""
    arr = np.asarray(out)
    while arr.ndim > 2 and arr.shape[-1] == 1:
        arr = arr[..., 0]
    if arr.ndim != 2 or arr.shape[0] != n:
        raise ModelLoadError(f"model output has shape {np.asarray(out).shape}; expected (N={n}, C)")
    return np.ascontiguousarray(arr, dtype=np.float32)


def single_output_scores(outputs: dict[str, np.ndarray], n: int) -> np.ndarray:
    """The (N, C) float32 scores of a single-output model (:meth:`Runner.infer`); a model with several outputs
    (detection) is refused: its runner's ``infer_outputs`` returns them all."""
    if len(outputs) != 1:
        raise ModelLoadError(
            f"the model has {len(outputs)} outputs ({', '.join(outputs)}): a single score "
            "output needs infer_outputs (detection)"
        )
    return to_scores(next(iter(outputs.values())), n)


def select_outputs(available: list[str], wanted: tuple[str, ...], model: str) -> list[str]:
    """The model's output names to fetch, in the manifest's order: each of ``wanted`` (the manifest's output
    names) must be one of ``available`` (the model's outputs); a single-output model with a single manifest
    output is that output whatever its name (classification manifests name it by role, e.g. ``logits``);
    every available output when the manifest names none."""
    if not wanted:
        return list(available)
    if len(wanted) == 1 and len(available) == 1:
        return list(available)
    missing = [n for n in wanted if n not in available]
    if missing:
        raise ModelLoadError(
            f"'{model}' has no output named {', '.join(repr(n) for n in missing)} (the "
            f"manifest's outputs[*].name); its outputs are: {', '.join(available)}"
        )
    return list(wanted)


def output_keys(artifact: ModelArtifact, model_names: list[str]) -> list[str]:
    """The keys of ``infer_outputs``: the manifest's output names, or the model's when the manifest names none."""
    return list(artifact.output_names) or list(model_names)


def onnx_source(artifact: ModelArtifact, cache_dir: Path, notes: dict[str, Any]) -> Path:
    """The ONNX file to run: the source itself, or its verified cached conversion through the registered loaders
    (:func:`repliscope.runtimes.loaders.load_as`), recorded in ``notes``: the torch -> ONNX export
    (``notes["export"]``), the TFLite / frozen-graph -> ONNX conversion by tf2onnx or the darknet -> ONNX
    conversion (``notes["conversion"]``)."""
    return load_as(artifact, "onnx", cache_dir, notes)


def onnx_fixed_batch(path: Path) -> int:
    """The literal batch dimension of the ONNX graph's first input (its first input that is no initializer),
    e.g. 1 for an export from a batch-1 example without dynamic axes; 0 when the batch axis is dynamic."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    initializers = {i.name for i in model.graph.initializer}
    first = next((i for i in model.graph.input if i.name not in initializers), None)
    dims = first.type.tensor_type.shape.dim if first is not None else []
    return int(dims[0].dim_value) if dims and dims[0].HasField("dim_value") else 0


def onnx_batch_fixed_at_one(path: Path) -> bool:
    """True when the ONNX graph's first input has a literal batch dimension of 1 (e.g. a TFLite conversion, whose
    reshapes fix the batch): such a model runs one image at a time."""
    return onnx_fixed_batch(path) == 1


def run_per_image(run: Callable[[np.ndarray], list[np.ndarray]], batch: np.ndarray) -> list[np.ndarray]:
    """``run`` on each image (1, ...) of ``batch`` and its outputs concatenated on the batch axis."""
    rows = [run(batch[i : i + 1]) for i in range(batch.shape[0])]
    return [np.concatenate([r[k] for r in rows], axis=0) for k in range(len(rows[0]))]


def _fmt_shape(shape: tuple[int, ...]) -> str:
    return "(" + ", ".join("N" if d is None or d < 0 else str(d) for d in shape) + ")"
