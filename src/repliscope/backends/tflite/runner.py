"""TFLite runner: a ``.tflite`` flatbuffer run by LiteRT's ``Interpreter`` (the ``ai-edge-litert`` wheel).

Quantisation (``notes["quantization"]``): a tensor whose ``quantization`` scale is non-zero is quantised. A
float32 batch for a quantised int8/uint8 input is quantised with that tensor's scale and zero point
(``q = clip(round(x / scale) + zero_point)``, round half to even as ``np.rint``, clipped to the dtype's range);
a batch already in the tensor's dtype is fed as is. Quantised outputs are dequantised to float32
(``(q - zero_point) * scale``). Each tensor's scale and zero point are recorded.

Batching (``notes["batching"]``): a model whose input ``shape_signature`` has a dynamic batch (-1) is resized to
the batch size (``resize_tensor_input`` + ``allocate_tensors``) and run once per batch (``"resize"``); a model
with a fixed batch of 1 (most exported detectors: their reshapes fix the batch) is run once per image and the
outputs are stacked (``"loop"``).

Tracing (``--trace-level framework``): LiteRT's Python interpreter exposes no per-operator profiler, so the
level records, per ``invoke``, a ``tflite.run`` span (framework) with three stages as ``layer`` spans:
``set_input`` (quantise + copy in), ``invoke`` (the whole graph) and ``get_outputs`` (copy out + dequantise).

Outputs are matched by NAME: the manifest's ``outputs[*].name`` against the interpreter's output details'
``name``; the runner's output dict follows the manifest order. Without manifest output names (a single-output
classification model), the interpreter's outputs in ``get_output_details()`` order.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from repliscope.runtimes._common import (
    check_batch,
    distribution_version,
    output_keys,
    select_outputs,
    single_output_scores,
)
from repliscope.runtimes.base import ModelArtifact, Runner, import_framework
from repliscope.runtimes.errors import BatchError, ModelLoadError


def quantization_of(detail: dict[str, Any]) -> dict[str, Any] | None:
    """``{"scale", "zero_point", "dtype"}`` of a per-tensor quantised tensor detail, None for a float tensor.
    Per-channel quantised inputs/outputs (several scales) are refused: no image model feeds those."""
    params = detail.get("quantization_parameters", {})
    scales = np.asarray(params.get("scales", []))
    if scales.size == 0:
        scale, zero = detail.get("quantization", (0.0, 0))
        if not scale:
            return None
        return {"scale": float(scale), "zero_point": int(zero), "dtype": np.dtype(detail["dtype"]).name}
    if scales.size > 1:
        raise ModelLoadError(
            f"tensor '{detail['name']}' is quantised per channel ({scales.size} scales); "
            "only per-tensor quantised model inputs/outputs are supported"
        )
    return {
        "scale": float(scales[0]),
        "zero_point": int(np.asarray(params["zero_points"])[0]),
        "dtype": np.dtype(detail["dtype"]).name,
    }


def quantize(x: np.ndarray, q: dict[str, Any]) -> np.ndarray:
    """float -> the quantised dtype: ``clip(rint(x / scale) + zero_point)`` (round half to even)."""
    dtype = np.dtype(q["dtype"])
    info = np.iinfo(dtype)
    values = np.rint(x.astype(np.float64) / q["scale"]) + q["zero_point"]
    return np.clip(values, info.min, info.max).astype(dtype)


def dequantize(x: np.ndarray, q: dict[str, Any]) -> np.ndarray:
    """quantised -> float32: ``(x - zero_point) * scale``."""
    return ((x.astype(np.float32) - np.float32(q["zero_point"])) * np.float32(q["scale"])).astype(np.float32)


class TfliteRunner(Runner):
    """LiteRT ``Interpreter(model_path, num_threads=threads)`` with its default op resolver (built-in kernels +
    the default XNNPACK delegate for float models).

    ``infer``: a batch of ``artifact.input_dtype`` in the model's layout (TFLite image models are NHWC, e.g.
    float32 (N, 192, 192, 3)) -> float32 (N, C) of the single output; ``infer_outputs`` -> every output by
    manifest name, batch first (float32 after dequantisation; integer outputs of float models stay as produced).
    """

    name = "tflite"

    def __init__(self, artifact: ModelArtifact, *, threads: int, cache_dir: Path) -> None:
        super().__init__(artifact, threads=threads, cache_dir=cache_dir)
        self._interp: Any = None
        self._input: dict[str, Any] = {}
        self._outputs: list[dict[str, Any]] = []
        self._in_q: dict[str, Any] | None = None
        self._out_q: list[dict[str, Any] | None] = []
        self._dynamic_batch = False
        self._batch = -1
        self.tracer: Any = None
        """Set by :mod:`repliscope.tracing.instruments` while tracing at the framework level."""

    def framework(self) -> tuple[str, str]:
        return distribution_version(["ai-edge-litert", "tflite-runtime"])

    def _load(self) -> None:
        interpreter = import_framework(
            "ai_edge_litert.interpreter", "tflite", "pip install 'repliscope[tflite]', i.e. ai-edge-litert"
        )
        path = self.artifact.path
        if self.artifact.format != "tflite":
            raise ModelLoadError(
                f"the tflite runtime runs 'tflite' sources (.tflite files), not "
                f"'{self.artifact.format}' (an ONNX runtime runs a .tflite through tf2onnx, not the "
                "other way)"
            )
        try:
            interp = interpreter.Interpreter(model_path=str(path), num_threads=self.threads)
        except Exception as exc:
            raise ModelLoadError(f"LiteRT cannot load '{path}': {type(exc).__name__}: {exc}") from exc
        inputs = interp.get_input_details()
        names = [d["name"] for d in inputs]
        wanted = self.artifact.input_name
        if len(inputs) != 1:
            raise ModelLoadError(
                f"'{path.name}' has {len(inputs)} inputs ({', '.join(names)}); the tflite runner feeds exactly one"
            )
        if wanted and wanted != names[0]:
            raise ModelLoadError(
                f"'{path.name}' has no input named '{wanted}' (the manifest's inputs[0].name); its input is: {names[0]}"
            )
        self._input = inputs[0]
        details = interp.get_output_details()
        chosen = select_outputs([d["name"] for d in details], self.artifact.output_names, path.name)
        by_name = {d["name"]: d for d in details}
        self._outputs = [by_name[n] for n in chosen]
        self._in_q = quantization_of(self._input)
        self._out_q = [quantization_of(d) for d in self._outputs]
        signature = [int(d) for d in self._input["shape_signature"]]
        self._dynamic_batch = signature[0] == -1
        if not self._dynamic_batch and signature[0] != 1:
            raise ModelLoadError(
                f"'{path.name}': input batch is fixed at {signature[0]}; the tflite runner runs "
                "a dynamic batch or a batch of 1"
            )
        interp.allocate_tensors()
        self._interp = interp
        self._batch = int(self._input["shape"][0])
        self.notes["batching"] = (
            "resize: the input's batch axis is dynamic, resized to each batch"
            if self._dynamic_batch
            else "loop: the model's batch is fixed at 1, images run one by one and stacked"
        )
        self.notes["interpreter"] = {
            "num_threads": self.threads,
            "op_resolver": "AUTO (builtin + XNNPACK)",
            "input": self._input["name"],
            "input_dtype": np.dtype(self._input["dtype"]).name,
            "outputs": chosen,
        }
        self.notes["quantization"] = {
            "input": self._in_q or "float",
            "input_fed": self._input_policy(),
            "outputs": {d["name"]: (q or "float") for d, q in zip(self._outputs, self._out_q, strict=True)},
        }

    def _input_policy(self) -> str:
        model_dtype = np.dtype(self._input["dtype"])
        if np.dtype(self.artifact.input_dtype) == model_dtype:
            return f"as is ({model_dtype.name})"
        if self._in_q is not None and np.dtype(self.artifact.input_dtype).kind == "f":
            return f"quantised {self.artifact.input_dtype} -> {model_dtype.name} with the input's scale/zero point"
        raise ModelLoadError(
            f"the manifest's input dtype is {self.artifact.input_dtype}, the model's input "
            f"'{self._input['name']}' is {model_dtype.name} (not quantised): make the "
            f"pre-processing produce {model_dtype.name}"
        )

    def _feed(self, batch: np.ndarray) -> np.ndarray:
        model_dtype = np.dtype(self._input["dtype"])
        if batch.dtype == model_dtype:
            return np.ascontiguousarray(batch)
        assert self._in_q is not None
        return quantize(batch, self._in_q)

    def _run(self, x: np.ndarray) -> list[np.ndarray]:
        interp = self._interp
        if self._dynamic_batch and x.shape[0] != self._batch:
            interp.resize_tensor_input(self._input["index"], list(x.shape))
            interp.allocate_tensors()
            self._batch = x.shape[0]
        if self.tracer is not None:
            return self._traced_run(x)
        interp.set_tensor(self._input["index"], x)
        interp.invoke()
        return self._fetch()

    def _fetch(self) -> list[np.ndarray]:
        outs = []
        for d, q in zip(self._outputs, self._out_q, strict=True):
            out = self._interp.get_tensor(d["index"])
            outs.append(dequantize(out, q) if q is not None else np.array(out, copy=True))
        return outs

    def _traced_run(self, x: np.ndarray) -> list[np.ndarray]:
        span = self.tracer.span
        stage = {"op_type": "stage", "source": "tflite"}
        with span("tflite.run", "framework", batch_size=int(x.shape[0])):
            with span("set_input", "framework", layer="set_input", **stage):
                self._interp.set_tensor(self._input["index"], x)
            with span("invoke", "framework", layer="invoke", **stage):
                self._interp.invoke()
            with span("get_outputs", "framework", layer="get_outputs", **stage):
                return self._fetch()

    def _infer_outputs(self, batch: np.ndarray) -> dict[str, np.ndarray]:
        assert self._interp is not None
        check_batch(batch, self.artifact)
        x = self._feed(batch)
        if self._dynamic_batch:
            outs = self._run(x)
        else:
            rows = [self._run(x[i : i + 1]) for i in range(x.shape[0])]
            outs = [np.concatenate([r[k] for r in rows], axis=0) for k in range(len(self._outputs))]
        for d, out in zip(self._outputs, outs, strict=True):
            if out.shape[0] != batch.shape[0]:
                raise BatchError(
                    f"output '{d['name']}' has shape {out.shape}: its first axis is not the batch ({batch.shape[0]})"
                )
        keys = output_keys(self.artifact, [d["name"] for d in self._outputs])
        return dict(zip(keys, outs, strict=True))

    def _infer(self, batch: np.ndarray) -> np.ndarray:
        return single_output_scores(self._infer_outputs(batch), batch.shape[0])
