"""Runners for variants that change run settings: another thread count, or float16 inference."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from repliscope.manifest.sources import sha256_file
from repliscope.pitfalls.base import NotApplicable
from repliscope.runtimes.base import RUNTIMES, ModelArtifact, Runner


def runner_for(base: Runner, threads: int, precision: str, input_shape: tuple[int, ...] | None = None) -> Runner:
    """A runner like ``base`` (same runtime and model) with other threads, precision and/or model input shape
    (``input_shape`` without the batch axis, e.g. (3, 608, 608)). Another shape is the same model file at another
    input size: a darknet source is converted (or resized by libdarknet) at it; a model that cannot run at it
    (a fixed-shape file, a runtime that builds the cfg's size) is NotApplicable (:func:`check_resizable`)."""
    if input_shape is not None and tuple(input_shape) != tuple(base.artifact.input_shape[1:]):
        check_resizable(base.name, base.artifact, tuple(int(d) for d in input_shape))
        batch_axis = base.artifact.input_shape[0] if base.artifact.input_shape else -1
        shape = (batch_axis, *(int(d) for d in input_shape))
        artifact = replace(
            base.artifact, input_shape=shape, origin=f"{base.artifact.origin} at input shape {list(shape)}"
        )
        base = RUNTIMES.get(base.name)(artifact, threads=base.threads, cache_dir=base.cache_dir)
        base.notes["input_shape"] = list(shape)
    if precision == "float32":
        runner = RUNTIMES.get(base.name)(base.artifact, threads=threads, cache_dir=base.cache_dir)
        runner.notes.update(base.notes)
        return runner
    if precision != "float16":
        raise NotApplicable(f"precision {precision!r} is not implemented")
    if base.name == "torch":
        return Float16TorchRunner(base.artifact, threads=threads, cache_dir=base.cache_dir)
    if base.name == "onnxruntime":
        return float16_onnxruntime_runner(base, threads)
    raise NotApplicable(f"float16 inference is not implemented for the {base.name} runtime")


DARKNET_AT_ANY_SIZE = ("darknet", "onnxruntime", "opencv_dnn")
"""Runtimes that build a darknet source at the artifact's input size (libdarknet's resize_network, the ONNX
conversion; OpenCV < 5's own reader refuses another size when it loads)."""


def check_resizable(runtime: str, artifact: ModelArtifact, input_shape: tuple[int, ...]) -> None:
    """NotApplicable unless ``runtime`` can run the model at ``input_shape`` (no batch axis): a darknet source on
    :data:`DARKNET_AT_ANY_SIZE`, or an ONNX file whose input declares those dims or leaves them dynamic."""
    if artifact.format == "darknet":
        if runtime not in DARKNET_AT_ANY_SIZE:
            raise NotApplicable(
                f"the {runtime} runtime builds a darknet source at the cfg's size only (runtimes "
                f"that run it at {list(input_shape)}: {', '.join(DARKNET_AT_ANY_SIZE)})"
            )
        return
    if artifact.format != "onnx":
        raise NotApplicable(
            f"a {artifact.format} model file has the input it was exported with; another input "
            f"shape {list(input_shape)} needs a source built at it (darknet sources are)"
        )
    import onnx

    model = onnx.load(str(artifact.path), load_external_data=False)
    initializers = {i.name for i in model.graph.initializer}
    first = next(i for i in model.graph.input if i.name not in initializers)
    dims = [d.dim_value if d.HasField("dim_value") else None for d in first.type.tensor_type.shape.dim][1:]
    fixed = [
        (axis, want, got)
        for axis, (want, got) in enumerate(zip(dims, input_shape, strict=False), start=1)
        if want is not None and want != got
    ]
    if len(dims) != len(input_shape) or fixed:
        raise NotApplicable(
            f"{artifact.path.name} declares input {first.name!r} as {['N', *dims]}; it cannot run "
            f"at {list(input_shape)}"
        )


def float16_onnxruntime_runner(base: Runner, threads: int) -> Runner:
    """ONNX Runtime on a float16 copy of the model (onnxconverter-common; float32 inputs/outputs kept),
    cached next to the float32 file under a name keyed by its sha256."""
    import onnx
    from onnxconverter_common import float16

    from repliscope.runtimes._common import onnx_source

    notes: dict[str, object] = {}
    src = onnx_source(base.artifact, base.cache_dir, notes)
    key = hashlib.sha256(f"{sha256_file(src)}:fp16:keep_io".encode()).hexdigest()[:16]
    target = base.cache_dir / f"{src.stem}-fp16-{key}.onnx"
    if not target.is_file():
        from repliscope.runtimes.onnx_external import check_external_data

        check_external_data(src)  # before onnx.load reads the external data files
        model16 = float16.convert_float_to_float16(onnx.load(str(src)), keep_io_types=True)
        tmp = target.with_suffix(".onnx.part")
        onnx.save(model16, str(tmp))
        tmp.replace(target)
    artifact = replace(
        base.artifact,
        path=target,
        sha256=sha256_file(target),
        format="onnx",
        architecture=None,
        origin=f"{base.artifact.origin} -> float16 ({target.name})",
    )
    runner = RUNTIMES.get("onnxruntime")(artifact, threads=threads, cache_dir=base.cache_dir)
    runner.notes["float16_from"] = str(src)
    return runner


def _torch_runner_cls() -> type[Runner]:
    return RUNTIMES.get("torch")


class Float16TorchRunner(Runner):
    """Eager torch with the module in float16 (``module.half()``); float32 in, float32 out."""

    name = "torch"

    def __init__(self, artifact: ModelArtifact, *, threads: int, cache_dir: Path) -> None:
        super().__init__(artifact, threads=threads, cache_dir=cache_dir)
        self._inner = _torch_runner_cls()(artifact, threads=threads, cache_dir=cache_dir)

    def framework(self) -> tuple[str, str]:
        return self._inner.framework()

    @property
    def module(self) -> Any:
        """The loaded float16 torch module (loads on first use), e.g. for tracing hooks."""
        self.load()
        return self._inner._module  # type: ignore[attr-defined]

    def _load(self) -> None:
        import torch

        self._inner.load()
        module: torch.nn.Module = self._inner._module  # type: ignore[attr-defined]
        module.half()
        self.notes.update(self._inner.notes)
        self.notes["precision"] = "float16"

    def _infer(self, batch: np.ndarray) -> np.ndarray:
        import torch

        module: torch.nn.Module = self._inner._module  # type: ignore[attr-defined]
        torch.set_num_threads(self.threads)
        with torch.inference_mode():
            out = module(torch.from_numpy(np.ascontiguousarray(batch, dtype=np.float16)))
        return np.asarray(out.float().numpy(), dtype=np.float32)
