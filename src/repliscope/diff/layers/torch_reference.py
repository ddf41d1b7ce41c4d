"""The reference side of a layer-level diff: a torch module whose layers are observed with forward hooks.

Which modules are layers:

* a module with no child modules, or with parameters or buffers of its own (``recurse=False``) whose children
  are all leaves (``Conv2dStaticSamePadding`` holding its ``static_padding``: it and its child are layers);
  containers (``Sequential``, ``ModuleList``, a block that only calls its children, the root module, a
  module whose own weights sit beside container children such as a ViT's position embedding) are not;
* functional no-ops are skipped: ``Identity``, ``Dropout*`` in eval mode, zero-size padding, ``Flatten`` of
  an already flat tensor, and any module whose traced output IS its input tensor;
* only modules actually called by ``forward`` (found by a trace), in the order their forward ENDS (a nested
  child before its parent). The n-th call (n >= 2) of a module is the layer ``path#n``.

Functional ops called in a container's ``forward`` are units too (see ``ref_ops.py``), in call order among
the layers: ``layer1.0/add``, ``blocks.0.attn/softmax``, ``/flatten`` (root), ``layer1.0/relu#2`` (the second
``relu`` of that container call; a container's n-th call is ``path#n/op``). ``ops=False`` turns them off.

Tensors handed to callbacks are numpy views of the torch tensors (reference layout, e.g. float32 NCHW
(N, C, H, W) for convolutions, (N, F) for linear layers); copy what you keep.
"""

from __future__ import annotations

import inspect
import math
import weakref
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from repliscope.diff.base import LayerInfo, Reference
from repliscope.diff.layers.ref_ops import activation_inputs, call_site, in_place, op_name, op_reduction
from repliscope.runtimes.base import ModelArtifact

StartCallback = Callable[[str, list[np.ndarray]], None]
"""Called when layer ``path`` starts, with its tensor inputs."""
EndCallback = Callable[[str, list[np.ndarray], np.ndarray], None]
"""Called when layer ``path`` ends, with its tensor inputs and its output."""

_NOOP_TYPES: tuple[type[nn.Module], ...] = (nn.Identity,)
_DROPOUT_TYPES: tuple[type[nn.Module], ...] = (
    nn.Dropout,
    nn.Dropout1d,
    nn.Dropout2d,
    nn.Dropout3d,
    nn.AlphaDropout,
    nn.FeatureAlphaDropout,
)


@dataclass(frozen=True)
class TracedLayer:
    """A layer seen in the trace: its info plus the traced input and output shapes (batch of the trace)."""

    info: LayerInfo
    input_shape: tuple[int, ...]
    output_shape: tuple[int, ...]


class TorchReference(Reference):
    """A torch module (eval mode, CPU) observed layer by layer: the default :class:`~repliscope.diff.base.Reference`.

    ``layers(example)`` traces one forward pass on ``example[:1]`` and returns the layers (and, with ``ops``,
    the functional ops) in the order their forward ends; ``run(x, on_start, on_end)`` runs the forward on
    ``x`` calling the callbacks for every traced unit. Only the CURRENT unit's tensors are handed out;
    nothing is kept. An op's callbacks get its activation inputs (parameters and buffers excluded).
    """

    def __init__(self, module: nn.Module, name: str = "torch", ops: bool = True) -> None:
        self.module = module.eval()
        self.name = name
        self.ops = ops
        self._paths = {m: p for p, m in module.named_modules()}
        self._constants = {id(t) for t in (*module.parameters(), *module.buffers())}
        self._traced: list[TracedLayer] | None = None
        self._multi: list[LayerInfo] = []

    @classmethod
    def from_artifact(cls, artifact: ModelArtifact) -> TorchReference:
        """Build the module exactly as the torch runtime does (strict weights, eval mode)."""
        from repliscope.backends.torch.loader import build_torch_module

        return cls(build_torch_module(artifact))

    def describe(self) -> dict[str, Any]:
        return {"framework": self.name, "module": type(self.module).__qualname__}

    def layers(self, example: np.ndarray) -> list[LayerInfo]:
        """The layers, in the order their forward ends (traced once on ``example[:1]``, then cached)."""
        return [t.info for t in self.trace(example)]

    def trace(self, example: np.ndarray) -> list[TracedLayer]:
        if self._traced is None:
            self._traced = self._trace(example[:1])
        return self._traced

    def run(
        self, x: np.ndarray, on_start: StartCallback | None = None, on_end: EndCallback | None = None
    ) -> np.ndarray:
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
        producers: dict[str, tuple[str, ...]] = {}
        made_by: dict[int, str] = {}  # id(live output tensor) -> unit path (entry dropped when the tensor dies)

        def made(output: torch.Tensor, path: str) -> None:
            made_by[id(output)] = path
            weakref.finalize(output, made_by.pop, id(output), None)

        def start(path: str, inputs: list[torch.Tensor]) -> None:
            shapes_in[path] = tuple(inputs[0].shape) if inputs else ()
            producers[path] = tuple(made_by.get(id(t), "") for t in inputs)

        def end(path: str, inputs: list[torch.Tensor], output: Any) -> None:
            if "/" in path:  # a functional op (already filtered by _OpMode)
                info = replace(ops_seen[path], producers=producers.get(path, ()))
                traced.append(TracedLayer(info, shapes_in.get(path, ()), tuple(output.shape)))
                made(output, path)
                return
            module = self._module_of(path)
            if not isinstance(output, torch.Tensor) or _is_noop(module, inputs, output):
                return
            in_shape, out_shape = shapes_in.get(path, ()), tuple(output.shape)
            info = LayerInfo(
                path=path,
                kind=type(module).__name__,
                source=source_of(type(module)),
                reduction=reduction_length(module, in_shape, out_shape),
                producers=producers.get(path, ()),
            )
            traced.append(TracedLayer(info, in_shape, out_shape))
            made(output, path)

        ops_seen: dict[str, LayerInfo] = {}
        self._forward(example, start, end, ops_seen)
        return traced

    def multi_output_ops(self, example: np.ndarray) -> list[LayerInfo]:
        """Functional ops returning several tensors (``q, k = t.chunk(2)``): not units (a golden comparison
        needs one output), but their consumers are, each fed the reference tensors; listed as not compared."""
        self.trace(example)
        return list(self._multi)

    def _module_of(self, path: str) -> nn.Module:
        return self.module.get_submodule(path.split("#", 1)[0]) if path.split("#", 1)[0] else self.module

    def _forward(
        self,
        x: np.ndarray,
        start: Callable[[str, list[torch.Tensor]], None],
        end: Callable[[str, list[torch.Tensor], Any], None],
        describe_ops: dict[str, LayerInfo] | None = None,
    ) -> Any:
        """Run the module once with hooks on every module (layers: ``start``/``end``; containers: the scope
        of the ops called in their ``forward``) and, with ``ops``, the op mode. ``describe_ops``: filled with
        each op's :class:`LayerInfo` (trace only)."""
        calls: dict[nn.Module, int] = {}
        stack: list[tuple[str, bool]] = []
        handles = []
        layer_ids = {
            id(m)
            for m in self.module.modules()
            if is_layer_module(m) and (m is not self.module or not any(True for _ in m.children()))
        }

        def pre_hook(module: nn.Module, args: tuple[Any, ...]) -> None:
            calls[module] = calls.get(module, 0) + 1
            base = self._paths[module]
            path = base if calls[module] == 1 else f"{base}#{calls[module]}"
            is_layer = id(module) in layer_ids
            stack.append((path, is_layer))
            if is_layer:
                stack.append(("", True))  # callbacks may call torch: never seen as ops
                start(path, [a for a in args if isinstance(a, torch.Tensor)])
                stack.pop()

        def hook(module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
            path, is_layer = stack[-1]
            if is_layer:
                stack.append(("", True))
                end(path, [a for a in args if isinstance(a, torch.Tensor)], output)
                stack.pop()
            stack.pop()

        for module in self.module.modules():
            handles.append(module.register_forward_pre_hook(pre_hook))
            handles.append(module.register_forward_hook(hook))
        arr = np.ascontiguousarray(x)
        if not arr.flags.writeable:
            arr = arr.copy()
        mode = _OpMode(stack, self._constants, start, end, describe_ops) if self.ops else None
        try:
            with torch.inference_mode():
                if mode is None:
                    return self.module(torch.from_numpy(arr))
                with mode:
                    return self.module(torch.from_numpy(arr))
        finally:
            for h in handles:
                h.remove()
            if mode is not None and describe_ops is not None:
                self._multi = list(mode.multi.values())


class _OpMode(TorchFunctionMode):
    """Reports each functional op called while the innermost running module is a container (see ref_ops)."""

    def __init__(
        self,
        stack: list[tuple[str, bool]],
        constants: set[int],
        start: Callable[[str, list[torch.Tensor]], None],
        end: Callable[[str, list[torch.Tensor], Any], None],
        describe: dict[str, LayerInfo] | None,
    ) -> None:
        super().__init__()
        self.stack, self.constants, self.start, self.end, self.describe = stack, constants, start, end, describe
        self.counts: dict[str, Counter[str]] = {}
        self.multi: dict[str, LayerInfo] = {}
        """Ops returning several tensors (``chunk``, ``split``): named, not units (their consumers are)."""

    def __torch_function__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        kwargs = kwargs or {}
        if not self.stack or self.stack[-1][1]:
            return func(*args, **kwargs)
        inputs = activation_inputs(args, kwargs, self.constants)
        if not inputs:
            return func(*args, **kwargs)
        before = [t.clone() for t in inputs] if in_place(func) else inputs
        out = func(*args, **kwargs)
        several = isinstance(out, tuple | list) and len(out) > 1 and all(isinstance(t, torch.Tensor) for t in out)
        same = isinstance(out, torch.Tensor) and not in_place(func) and any(out is t for t in inputs)
        if not several and (not isinstance(out, torch.Tensor) or same):
            return out
        scope = self.stack[-1][0]
        name = op_name(func)
        counter = self.counts.setdefault(scope, Counter())
        counter[name] += 1
        path = f"{scope}/{name}" + (f"#{counter[name]}" if counter[name] > 1 else "")
        if self.describe is not None:
            info = LayerInfo(
                path=path,
                kind=name,
                source=call_site(),
                op=name,
                arity=len(inputs),
                reduction=1 if several else op_reduction(name, args, kwargs, out),
            )
            if several:
                self.multi[path] = info
            else:
                self.describe[path] = info
        if not several:
            self.start(path, before)
            self.end(path, before, out)
        return out


def is_layer_module(module: nn.Module) -> bool:
    """A module without children, or with parameters/buffers of its own and only leaf children (see the module
    docstring; the root module is a layer only when it has no children)."""
    children = list(module.children())
    if not children:
        return True
    own = any(True for _ in module.parameters(recurse=False)) or any(True for _ in module.buffers(recurse=False))
    return own and not any(any(True for _ in c.children()) for c in children)


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
    pools = (
        nn.AvgPool1d,
        nn.AvgPool2d,
        nn.AvgPool3d,
        nn.AdaptiveAvgPool1d,
        nn.AdaptiveAvgPool2d,
        nn.AdaptiveAvgPool3d,
        nn.LPPool1d,
        nn.LPPool2d,
    )
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
