"""Runners for variants that change run settings: another thread count, or reduced-precision inference (float16 /
bfloat16, the whole model or only its normalisation layers)."""

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
    if precision not in PRECISIONS:
        raise NotApplicable(f"precision {precision!r} is not implemented (allowed: float32, {', '.join(PRECISIONS)})")
    dtype, _, scope = precision.partition(":")
    if base.name == "torch":
        return MixedPrecisionTorchRunner(
            base.artifact, threads=threads, cache_dir=base.cache_dir, dtype=dtype, scope=scope or "all"
        )
    if base.name == "onnxruntime" and dtype == "float16":
        return float16_onnxruntime_runner(base, threads, scope or "all")
    raise NotApplicable(f"{precision} inference is not implemented for the {base.name} runtime")


PRECISIONS = ("float16", "bfloat16", "float16:normalization", "bfloat16:normalization")
"""Run precisions besides float32: the whole model in float16 / bfloat16, or only its normalisation layers
(batch / layer / group / instance norm: the layers reduced precision breaks first) with float32 elsewhere."""

ONNX_NORMALIZATION_OPS = frozenset(
    {"BatchNormalization", "LayerNormalization", "GroupNormalization", "InstanceNormalization"}
)


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


def float16_onnxruntime_runner(base: Runner, threads: int, scope: str = "all") -> Runner:
    """ONNX Runtime on a float16 copy of the model (onnxconverter-common; float32 inputs/outputs kept),
    cached next to the float32 file under a name keyed by its sha256. ``scope="normalization"``: only the
    normalisation nodes in float16 (every other node on the converter's block list), with casts around them.
    A model whose normalisations are folded into convolutions (an ONNX export in eval mode) has none: then
    NotApplicable."""
    import onnx
    from onnxconverter_common import float16

    from repliscope.runtimes._common import onnx_source

    notes: dict[str, object] = {}
    src = onnx_source(base.artifact, base.cache_dir, notes)
    suffix = ":keep_io" if scope == "all" else f":keep_io:{scope}"
    key = hashlib.sha256(f"{sha256_file(src)}:fp16{suffix}".encode()).hexdigest()[:16]
    target = base.cache_dir / f"{src.stem}-fp16-{key}.onnx"
    if not target.is_file():
        from repliscope.runtimes.onnx_external import check_external_data

        check_external_data(src)  # before onnx.load reads the external data files
        model = onnx.load(str(src))
        blocked: list[str] | None = None
        if scope == "normalization":
            norms = [n for n in model.graph.node if n.op_type in ONNX_NORMALIZATION_OPS]
            if not norms:
                raise NotApplicable(
                    "the ONNX model has no normalisation node (folded into the convolutions): nothing to run in float16"
                )
            blocked = [n.name for n in model.graph.node if n.op_type not in ONNX_NORMALIZATION_OPS]
        model16 = float16.convert_float_to_float16(model, keep_io_types=True, node_block_list=blocked)
        tmp = target.with_suffix(".onnx.part")
        onnx.save(model16, str(tmp))
        tmp.replace(target)
    artifact = replace(
        base.artifact,
        path=target,
        sha256=sha256_file(target),
        format="onnx",
        architecture=None,
        origin=f"{base.artifact.origin} -> float16{'' if scope == 'all' else ' ' + scope} ({target.name})",
    )
    runner = RUNTIMES.get("onnxruntime")(artifact, threads=threads, cache_dir=base.cache_dir)
    runner.notes["float16_from"] = str(src)
    return runner


def _torch_runner_cls() -> type[Runner]:
    return RUNTIMES.get("torch")


def _torch_normalization_types() -> tuple[type, ...]:
    import torch

    return (
        torch.nn.modules.batchnorm._NormBase,  # BatchNorm1d/2d/3d, InstanceNorm*, SyncBatchNorm
        torch.nn.LayerNorm,
        torch.nn.GroupNorm,
        torch.nn.LocalResponseNorm,
    )


class MixedPrecisionTorchRunner(Runner):
    """Eager torch with the whole module (``scope="all"``: ``module.to(dtype)``, the input cast to ``dtype``) or
    only its normalisation layers (``scope="normalization"``: each such layer's parameters and buffers in
    ``dtype``, its input cast to ``dtype`` and its output back to float32 by hooks) in float16 / bfloat16;
    float32 in, float32 out. ``notes["precision"]`` says which, ``notes["reduced_layers"]`` how many layers."""

    name = "torch"

    def __init__(
        self, artifact: ModelArtifact, *, threads: int, cache_dir: Path, dtype: str = "float16", scope: str = "all"
    ) -> None:
        if dtype not in ("float16", "bfloat16") or scope not in ("all", "normalization"):
            raise NotApplicable(f"precision {dtype}:{scope} is not implemented")
        super().__init__(artifact, threads=threads, cache_dir=cache_dir)
        self.dtype, self.scope = dtype, scope
        self._inner = _torch_runner_cls()(artifact, threads=threads, cache_dir=cache_dir)

    def framework(self) -> tuple[str, str]:
        return self._inner.framework()

    @property
    def module(self) -> Any:
        """The loaded reduced-precision torch module (loads on first use), e.g. for tracing hooks."""
        self.load()
        return self._inner._module  # type: ignore[attr-defined]

    def _load(self) -> None:
        import torch

        self._inner.load()
        module: torch.nn.Module = self._inner._module  # type: ignore[attr-defined]
        dtype = getattr(torch, self.dtype)
        if self.scope == "all":
            module.to(dtype)
            reduced = sum(1 for _ in module.modules())
        else:
            norms = [m for m in module.modules() if isinstance(m, _torch_normalization_types())]
            if not norms:
                raise NotApplicable("the model has no normalisation layer to run in reduced precision")
            for m in norms:
                m.to(dtype)
                m.register_forward_pre_hook(lambda _m, args, d=dtype: tuple(a.to(d) for a in args))
                m.register_forward_hook(lambda _m, _args, out: out.float())
            reduced = len(norms)
        self.notes.update(self._inner.notes)
        self.notes["precision"] = self.dtype if self.scope == "all" else f"{self.dtype}:{self.scope}"
        self.notes["reduced_layers"] = reduced

    def _infer(self, batch: np.ndarray) -> np.ndarray:
        import torch

        module: torch.nn.Module = self._inner._module  # type: ignore[attr-defined]
        torch.set_num_threads(self.threads)
        x = torch.from_numpy(np.ascontiguousarray(batch, dtype=np.float32))
        if self.scope == "all":
            x = x.to(getattr(torch, self.dtype))
        with torch.inference_mode():
            out = module(x)
        return np.asarray(out.float().numpy(), dtype=np.float32)


Float16TorchRunner = MixedPrecisionTorchRunner
"""The whole module in float16 (the default of :class:`MixedPrecisionTorchRunner`)."""
