"""Functional ops of a torch reference: which torch calls in a container's ``forward`` are units, how they are
named, where they come from (file:line) and how long their reductions are (for the tolerance).

Seen with a :class:`torch.overrides.TorchFunctionMode` (Python-level torch API: ``torch.*``, ``F.*`` and
``Tensor`` methods/operators), only for calls made while the innermost running module is a container (no
layer): calls inside a layer's ``forward`` (``F.conv2d`` in ``nn.Conv2d``) belong to that layer. A call is a
unit when it reads at least one activation tensor (parameters, buffers and Python numbers are constants) and
returns a new tensor (``x.contiguous()`` returning ``x`` is not).
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable, Iterable
from typing import Any

import torch

_ARITH = {
    "add",
    "sub",
    "mul",
    "truediv",
    "floordiv",
    "div",
    "matmul",
    "pow",
    "mod",
    "and",
    "or",
    "xor",
    "lshift",
    "rshift",
}
_RENAME = {"truediv": "div", "floor_divide": "floordiv"}
_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_HERE = os.path.dirname(os.path.abspath(__file__)) + os.sep
_MEAN_LIKE = {
    "mean",
    "sum",
    "nansum",
    "nanmean",
    "norm",
    "var",
    "std",
    "logsumexp",
    "prod",
    "amax",
    "amin",
    "max",
    "min",
    "avg_pool1d",
    "avg_pool2d",
    "avg_pool3d",
    "adaptive_avg_pool1d",
    "adaptive_avg_pool2d",
    "adaptive_avg_pool3d",
}


def op_name(func: Callable[..., Any]) -> str:
    """The op's name: ``add`` for ``Tensor.__add__`` / ``__radd__`` / ``__iadd__``, ``div`` for ``__truediv__``,
    ``T`` for the ``Tensor.T`` property, else the function's ``__name__`` (``relu``, ``softmax``)."""
    name = getattr(func, "__name__", "") or type(func).__name__
    if name == "__get__":
        name = str(getattr(getattr(func, "__self__", None), "__name__", "get"))
    if name.startswith("__") and name.endswith("__"):
        core = name[2:-2]
        if core[:1] in ("r", "i") and core[1:] in _ARITH:
            core = core[1:]
        name = core
    return _RENAME.get(name, name)


def in_place(func: Callable[..., Any]) -> bool:
    name = getattr(func, "__name__", "")
    return (name.endswith("_") and not name.startswith("__")) or (name.startswith("__i") and name[3:-2] in _ARITH)


def activation_inputs(args: Iterable[Any], kwargs: dict[str, Any], constants: set[int]) -> list[torch.Tensor]:
    """The tensors among ``args`` / ``kwargs`` (one level into lists and tuples: ``torch.cat([a, b])``) that are
    not parameters or buffers (``constants``: their ``id``), each once, in argument order."""
    found: list[torch.Tensor] = []
    seen: set[int] = set()

    def visit(value: Any) -> None:
        if isinstance(value, torch.Tensor):
            if id(value) not in constants and id(value) not in seen:
                seen.add(id(value))
                found.append(value)
        elif isinstance(value, list | tuple):
            for item in value:
                if isinstance(item, torch.Tensor):
                    visit(item)

    for value in (*args, *kwargs.values()):
        visit(value)
    return found


def call_site() -> str:
    """``file:line`` of the innermost Python frame outside torch and this package: the line of ``forward`` that
    called the op."""
    frame = sys._getframe(1)
    while frame is not None:
        file = frame.f_code.co_filename
        if not file.startswith(_TORCH_DIR) and not file.startswith(_HERE) and not file.startswith("<"):
            return f"{file}:{frame.f_lineno}"
        frame = frame.f_back  # type: ignore[assignment]
    return "<unknown>"


def op_reduction(name: str, args: tuple[Any, ...], kwargs: dict[str, Any], out: torch.Tensor) -> int:
    """Terms summed per output element (see tolerance.py): matmul / linear the inner dimension, softmax the
    size of its axis, layer_norm the normalized size, means / sums / pools the input elements per output
    element, a functional conv ``in/groups*kh*kw``, scaled_dot_product_attention head dim + keys (two chained
    sums), einsum the product of the summed-away index sizes; 1 for element-wise ops."""
    if name == "einsum" and args and isinstance(args[0], str):
        return _einsum_reduction(args[0], args[1:])
    first = args[0] if args and isinstance(args[0], torch.Tensor) else None
    if first is None:
        return 1
    if name in ("matmul", "mm", "bmm") and first.dim() >= 1:
        return int(first.shape[-1])
    if name == "linear" and len(args) > 1 and isinstance(args[1], torch.Tensor):
        return int(args[1].shape[-1])
    if name.startswith("conv") and len(args) > 1 and isinstance(args[1], torch.Tensor):
        return int(math.prod(args[1].shape[1:]))
    if name == "scaled_dot_product_attention" and len(args) > 1 and isinstance(args[1], torch.Tensor):
        return int(first.shape[-1] + args[1].shape[-2])  # scores sum over the head dim, then over the keys
    if name in ("softmax", "log_softmax", "softmin", "cumsum") and first.dim() >= 1:
        dim = kwargs.get("dim", args[1] if len(args) > 1 else -1)
        return int(first.shape[int(dim) if isinstance(dim, int) else -1])
    if name in ("layer_norm", "group_norm", "rms_norm"):
        shape = kwargs.get("normalized_shape", args[1] if len(args) > 1 else None)
        if isinstance(shape, int):
            return shape
        if isinstance(shape, list | tuple | torch.Size):
            return int(math.prod(int(s) for s in shape))
        return int(first.shape[-1])
    if name in _MEAN_LIKE and out.numel() > 0:
        return max(1, first.numel() // out.numel())
    return 1


def _einsum_reduction(equation: str, operands: tuple[Any, ...]) -> int:
    """Product of the sizes of the indices summed away (in an input, not in the output): ``bij,bjk->bik`` -> j."""
    tensors = list(operands[0]) if len(operands) == 1 and isinstance(operands[0], list | tuple) else list(operands)
    spec = equation.replace(" ", "")
    if "->" not in spec or "." in spec:
        return 1
    inputs, output = spec.split("->")
    sizes: dict[str, int] = {}
    for letters, t in zip(inputs.split(","), tensors, strict=False):
        if isinstance(t, torch.Tensor) and len(letters) == t.dim():
            sizes.update({c: int(d) for c, d in zip(letters, t.shape, strict=True)})
    return max(1, math.prod(sizes[c] for c in sizes if c not in output))
