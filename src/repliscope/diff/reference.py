"""The reference side of a layer-level diff: a torch module whose layers are observed with forward hooks.

Which modules are layers:

* a module with parameters or buffers of its own (``recurse=False``), or with no child modules;
  containers (``Sequential``, ``ModuleList``, a block that only calls its children) are not layers, but a
  module with its own weights AND children (``Conv2dStaticSamePadding`` holding its ``static_padding``) is,
  and so is each child;
* functional no-ops are skipped: ``Identity``, ``Dropout*`` in eval mode, zero-size padding, ``Flatten`` of
  an already flat tensor, and any module whose traced output IS its input tensor;
* only modules actually called by ``forward`` (found by a trace), in the order their forward ENDS (a nested
  child before its parent). The n-th call (n >= 2) of a module is the layer ``path#n``.

Tensors handed to callbacks are numpy views of the torch tensors (reference layout, e.g. float32 NCHW
(N, C, H, W) for convolutions, (N, F) for linear layers); copy what you keep.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from repliscope.diff.base import LayerInfo
from repliscope.runtimes.base import ModelArtifact

StartCallback = Callable[[str, list[np.ndarray]], None]
"""Called when layer ``path`` starts, with its tensor inputs."""
EndCallback = Callable[[str, list[np.ndarray], np.ndarray], None]
"""Called when layer ``path`` ends, with its tensor inputs and its output."""

_NOOP_TYPES: tuple[type[nn.Module], ...] = (nn.Identity,)
_DROPOUT_TYPES: tuple[type[nn.Module], ...] = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d,
                                               nn.AlphaDropout, nn.FeatureAlphaDropout)


@dataclass(frozen=True)
class TracedLayer:
    """A layer seen in the trace: its info plus the traced input and output shapes (batch of the trace)."""

    info: LayerInfo
    input_shape: tuple[int, ...]
    output_shape: tuple[int, ...]


class TorchReference:
    """A torch module (eval mode, CPU) observed layer by layer.

    ``layers(example)`` traces one forward pass on ``example[:1]`` and returns the layers in the order their
    forward ends; ``run(x, on_start, on_end)`` runs the forward on ``x`` calling the callbacks for every
    traced layer. Only the CURRENT layer's tensors are handed out; nothing is kept.
    """

    def __init__(self, module: nn.Module, name: str = "torch") -> None:
        self.module = module.eval()
        self.name = name
        self._paths = {m: p for p, m in module.named_modules()}
        self._traced: list[TracedLayer] | None = None

    @classmethod
    def from_artifact(cls, artifact: ModelArtifact) -> TorchReference:
        """Build the module exactly as the torch runtime does (strict weights, eval mode)."""
        from repliscope.runtimes.torch_model import build_torch_module

        return cls(build_torch_module(artifact))

    def layers(self, example: np.ndarray) -> list[LayerInfo]:
        """The layers, in the order their forward ends (traced once on ``example[:1]``, then cached)."""
        return [t.info for t in self.trace(example)]

    def trace(self, example: np.ndarray) -> list[TracedLayer]:
        if self._traced is None:
            self._traced = self._trace(example[:1])
        return self._traced

    def run(self, x: np.ndarray, on_start: StartCallback | None = None,
            on_end: EndCallback | None = None) -> np.ndarray:
        """Forward ``x`` (reference layout and dtype, e.g. float32 NCHW) under ``torch.inference_mode``,
        calling ``on_start`` / ``on_end`` for each traced layer; returns the model output as numpy."""
        wanted = {t.info.path for t in self.trace(x)}

        def start(path: str, inputs: list[torch.Tensor]) -> None:
            if on_start is not None and path in wanted:
                on_start(path, [_np(t) for t in inputs])

        def end(path: str, inputs: list[torch.Tensor], output: Any) -> None:
            if on_end is not None and path in wanted and isinstance(output, torch.Tensor):
                on_end(path, [_np(t) for t in inputs], _np(output))

        out = self._forward(x, start, end)
        return _np(out).copy() if isinstance(out, torch.Tensor) else np.asarray(out)

    def _trace(self, example: np.ndarray) -> list[TracedLayer]:
        traced: list[TracedLayer] = []
        shapes_in: dict[str, tuple[int, ...]] = {}

        def start(path: str, inputs: list[torch.Tensor]) -> None:
            shapes_in[path] = tuple(inputs[0].shape) if inputs else ()

        def end(path: str, inputs: list[torch.Tensor], output: Any) -> None:
            module = self._module_of(path)
            if not isinstance(output, torch.Tensor) or _is_noop(module, inputs, output):
                return
            in_shape, out_shape = shapes_in.get(path, ()), tuple(output.shape)
            info = LayerInfo(path=path, kind=type(module).__name__, source=source_of(type(module)),
                             reduction=reduction_length(module, in_shape, out_shape))
            traced.append(TracedLayer(info, in_shape, out_shape))

        self._forward(example, start, end)
        return traced

    def _module_of(self, path: str) -> nn.Module:
        return self.module.get_submodule(path.split("#", 1)[0]) if path.split("#", 1)[0] else self.module

    def _forward(self, x: np.ndarray, start: Callable[[str, list[torch.Tensor]], None],
                 end: Callable[[str, list[torch.Tensor], Any], None]) -> Any:
        calls: dict[nn.Module, int] = {}
        stack: list[str] = []
        handles = []

        def pre_hook(module: nn.Module, args: tuple[Any, ...]) -> None:
            calls[module] = calls.get(module, 0) + 1
            base = self._paths[module]
            path = base if calls[module] == 1 else f"{base}#{calls[module]}"
            stack.append(path)
            start(path, [a for a in args if isinstance(a, torch.Tensor)])

        def hook(module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
            path = stack.pop()
            end(path, [a for a in args if isinstance(a, torch.Tensor)], output)

        for module in self.module.modules():
            if is_layer_module(module):
                handles.append(module.register_forward_pre_hook(pre_hook))
                handles.append(module.register_forward_hook(hook))
        arr = np.ascontiguousarray(x)
        if not arr.flags.writeable:
            arr = arr.copy()
        try:
            with torch.inference_mode():
                return self.module(torch.from_numpy(arr))
        finally:
            for h in handles:
                h.remove()


def is_layer_module(module: nn.Module) -> bool:
    """A module with parameters/buffers of its own, or without children (see the module docstring)."""
    own = any(True for _ in module.parameters(recurse=False)) or any(True for _ in module.buffers(recurse=False))
    return own or not any(True for _ in module.children())


def _is_noop(module: nn.Module, inputs: Sequence[torch.Tensor], output: torch.Tensor) -> bool:
    if isinstance(module, _NOOP_TYPES):
        return True
    if isinstance(module, _DROPOUT_TYPES) and not module.training:
        return True
    padding = getattr(module, "padding", None)
    pads = padding if isinstance(padding, tuple | list) else [padding]
    zero_pad = padding is not None and all(int(p or 0) == 0 for p in pads)
    if isinstance(module, nn.modules.padding._ConstantPadNd) and zero_pad:
        return True
    if isinstance(module, nn.Flatten) and inputs and tuple(inputs[0].shape) == tuple(output.shape):
        return True
    return bool(inputs) and output is inputs[0]


def reduction_length(module: nn.Module, in_shape: tuple[int, ...], out_shape: tuple[int, ...]) -> int:
    """Products (or terms) summed per output element, which sets the tolerance (see tolerance.py)."""
    if isinstance(module, nn.modules.conv._ConvNd):
        return int(module.in_channels // module.groups * math.prod(module.kernel_size))
    if isinstance(module, nn.Linear):
        return int(module.in_features)
    if isinstance(module, nn.Bilinear):
        return int(module.in1_features * module.in2_features)
    if isinstance(module, nn.LayerNorm):
        return int(math.prod(module.normalized_shape))
    if isinstance(module, nn.GroupNorm) and len(in_shape) >= 2:
        return int(in_shape[1] // module.num_groups * math.prod(in_shape[2:]))
    if isinstance(module, nn.modules.batchnorm._BatchNorm) and module.training and len(in_shape) >= 2:
        return int(in_shape[0] * math.prod(in_shape[2:]))
    pools = (nn.AvgPool1d, nn.AvgPool2d, nn.AvgPool3d, nn.AdaptiveAvgPool1d, nn.AdaptiveAvgPool2d,
             nn.AdaptiveAvgPool3d, nn.LPPool1d, nn.LPPool2d)
    if isinstance(module, pools) and len(in_shape) > 2 and len(out_shape) > 2:
        return max(1, math.prod(in_shape[2:]) // max(1, math.prod(out_shape[2:])))
    if isinstance(module, nn.Softmax | nn.LogSoftmax) and in_shape:
        dim = module.dim if module.dim is not None else -1
        return int(in_shape[dim])
    if isinstance(module, nn.MultiheadAttention):
        return int(module.embed_dim)
    return 1


def source_of(cls: type) -> str:
    """``file:line`` of a class definition (``<unknown>`` for builtins / C extensions); cached per class."""
    cached = _SOURCES.get(cls)
    if cached is None:
        cached = _SOURCES[cls] = _source_of(cls)
    return cached


_SOURCES: dict[type, str] = {}


def _source_of(cls: type) -> str:
    try:
        file = inspect.getsourcefile(cls)
        _, line = inspect.getsourcelines(cls)
    except (OSError, TypeError):
        return f"<unknown> ({cls.__module__}.{cls.__qualname__})"
    return f"{Path(file).as_posix() if file else '<unknown>'}:{line}"


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().numpy()
