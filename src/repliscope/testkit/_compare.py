"""Flatten model outputs into named arrays and compare two sets of them, describing every difference.

Framework-neutral: a leaf is anything with a ``shape`` (a torch tensor, a NumPy array, a TensorFlow or Keras
tensor) or a Python number. torch is never imported here; a torch tensor is recognised by its type's module.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

Named = list[tuple[str, Any]]


def flatten_outputs(obj: Any, prefix: str = "output") -> Named:
    """``(name, leaf)`` pairs of a model output, in order.

    Names read like Python: ``output`` for a single tensor, ``output[0]`` for tuples and lists,
    ``output['logits']`` for dicts (including Hugging Face ``ModelOutput``), ``output.logits`` for namedtuples.
    ``None`` leaves and strings are skipped.
    """
    if obj is None or isinstance(obj, str | bytes):
        return []
    if hasattr(obj, "shape") or isinstance(obj, int | float | complex | np.generic):
        return [(prefix, obj)]
    if isinstance(obj, Mapping):
        out: Named = []
        for key, value in obj.items():
            out.extend(flatten_outputs(value, f"{prefix}[{key!r}]"))
        return out
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        out = []
        for field in obj._fields:
            out.extend(flatten_outputs(getattr(obj, field), f"{prefix}.{field}"))
        return out
    if isinstance(obj, Sequence):
        out = []
        for i, value in enumerate(obj):
            out.extend(flatten_outputs(value, f"{prefix}[{i}]"))
        return out
    return []


def to_numpy(value: Any) -> np.ndarray:
    """A NumPy copy of ``value``; torch tensors are detached and moved to the CPU (bfloat16 and float8 widen)."""
    if type(value).__module__.startswith("torch"):
        tensor = value.detach().cpu()
        if tensor.is_floating_point() and (tensor.dtype.itemsize < 2 or str(tensor.dtype) == "torch.bfloat16"):
            tensor = tensor.float()  # NumPy has neither bfloat16 nor float8
        return np.asarray(tensor.numpy())
    if hasattr(value, "numpy") and not isinstance(value, np.ndarray):
        return np.asarray(value.numpy())
    return np.asarray(value)


def compare_named(
    expected: Named,
    actual: Named,
    *,
    atol: float = 0.0,
    rtol: float = 0.0,
    exact: bool = False,
    expected_label: str = "expected",
    actual_label: str = "got",
) -> list[str]:
    """One line per difference between two flattened outputs; empty when they agree.

    ``exact=True`` demands equal dtypes and equal values (NaN equals NaN at the same position); otherwise
    elements must satisfy ``|actual - expected| <= atol + rtol * |expected|`` (``numpy.isclose``).
    """
    problems: list[str] = []
    if len(expected) != len(actual):
        problems.append(
            f"{len(expected)} output tensors ({_names(expected)}) in {expected_label}, "
            f"{len(actual)} ({_names(actual)}) in {actual_label}"
        )
    for (name, exp_value), (act_name, act_value) in zip(expected, actual, strict=False):
        exp, act = to_numpy(exp_value), to_numpy(act_value)
        line = compare_arrays(exp, act, atol=atol, rtol=rtol, exact=exact)
        if line:
            label = name if act_name == name else f"{name} / {actual_label} '{act_name}'"
            problems.append(f"{label}: {line}")
    return problems


def compare_arrays(expected: np.ndarray, actual: np.ndarray, *, atol: float, rtol: float, exact: bool) -> str:
    """A one-line description of how ``actual`` differs from ``expected``, or ``""`` if it does not."""
    if expected.shape != actual.shape:
        return f"shape {tuple(actual.shape)} differs from {tuple(expected.shape)}"
    if exact and expected.dtype != actual.dtype:
        return f"dtype {actual.dtype} differs from {expected.dtype}"
    if expected.size == 0:
        return ""
    numeric = np.issubdtype(expected.dtype, np.number) and np.issubdtype(actual.dtype, np.number)
    if not numeric:
        return "" if np.array_equal(expected, actual) else "values differ"
    floating = np.issubdtype(expected.dtype, np.inexact) or np.issubdtype(actual.dtype, np.inexact)
    if exact:
        ok = np.equal(expected, actual) | (np.isnan(expected) & np.isnan(actual) if floating else False)
        what = "differ (bit-identical required)"
    else:
        ok = np.isclose(actual, expected, atol=atol, rtol=rtol, equal_nan=True)
        what = f"differ beyond atol={atol:g}, rtol={rtol:g}"
    bad = int(ok.size - np.count_nonzero(ok))
    if bad == 0:
        return ""
    exp64, act64 = expected.astype(np.float64), actual.astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        diff = np.abs(act64 - exp64)
        rel = diff / np.abs(exp64)
    mismatch = ~ok
    finite_bad = mismatch & np.isfinite(diff)
    nonfinite_bad = mismatch & ~np.isfinite(diff)
    parts = [f"{bad} of {ok.size} elements {what}"]
    if finite_bad.any():
        where = np.unravel_index(int(np.argmax(np.where(finite_bad, diff, -1.0))), diff.shape)
        parts.append(
            f"max abs diff {diff[where]:.3g} at {_index(where)} (expected {exp64[where]:.7g}, got {act64[where]:.7g})"
        )
        finite_rel = rel[np.isfinite(rel)]
        if finite_rel.size and finite_rel.max() > 0:
            parts.append(f"max rel diff {float(finite_rel.max()):.3g}")
    if nonfinite_bad.any():
        where = np.unravel_index(int(np.argmax(nonfinite_bad)), diff.shape)
        parts.append(
            f"{int(nonfinite_bad.sum())} NaN/Inf mismatch(es), first at {_index(where)} "
            f"(expected {exp64[where]:.7g}, got {act64[where]:.7g})"
        )
    return "; ".join(parts)


def _index(where: tuple[Any, ...]) -> tuple[int, ...]:
    return tuple(int(i) for i in where)


def _names(named: Named) -> str:
    shown = ", ".join(name for name, _ in named[:6])
    return shown + (", ..." if len(named) > 6 else "")
