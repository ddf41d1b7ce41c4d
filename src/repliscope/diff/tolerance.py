"""Per-layer error statistics and the tolerance a layer's error is judged against.

Tolerance formula (absolute, per layer, on the layer's whole output batch)::

    scale = max |ref|                      (1.0 if the reference output is all zeros)
    tol   = k * eps(dtype) * sqrt(n) * scale

``eps(dtype)`` is the machine epsilon of the reference output dtype (float32: 2**-23 = 1.19e-7), ``n`` the
layer's reduction length (products summed per output element: conv ``in/groups*kh*kw``, linear
``in_features``, average pool window; 1 for element-wise layers; the largest over the reference layers a
fused candidate layer covers), and ``k`` a safety factor (default :data:`DEFAULT_K`). ``sqrt(n)`` is the
usual random-walk growth of rounding error in a sum of ``n`` terms; ``scale`` makes it relative to the
layer's output magnitude.

Carried mode inherits the error of every earlier layer, so its tolerance accumulates the local ones in
quadrature (independent rounding errors; layer gains are not modelled)::

    tol_carried(i) = sqrt(sum_{j <= i} tol(j)**2)     over the compared layers j up to i, in execution order

(``carried="local"`` judges carried errors against the local ``tol`` instead).

Overrides: ``kind_k`` sets ``k`` for a layer kind (class name, e.g. ``"Linear"``); ``layer_atol`` sets an
absolute tolerance for one layer path, replacing the formula (in both modes).

Error measures, for reference ``r`` and candidate ``c`` of the same shape:

* ``max_abs`` / ``mean_abs``: max / mean of ``|c - r|``;
* ``max_rel``: max of ``|c - r| / max(|r|, rel_floor * scale)`` (the floor, default 1e-3 of the output
  magnitude, keeps near-zero reference values from producing huge ratios);
* ``ulp``: ``max_abs / (eps(dtype) * scale)``, the error in units of the dtype's precision at the output's
  magnitude (1.0 = one rounding step of the largest value).

A layer passes when every candidate value is finite where the reference is, and ``max_abs <= tol``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

DEFAULT_K = 8.0
"""Calibrated on EfficientNet-Lite0, torch 2.13 vs onnxruntime 1.x (BatchNorm folded into Conv), batch 8 of
real images: the largest golden-mode error is 1/8 of the tolerance with k = 8 (about eps * sqrt(n) * max|ref|),
leaving a factor 8 for other CPUs' summation orders (see tests/diff/test_layers_onnx.py)."""

_CHUNK = 1 << 20

FORMULA = "tol = k * eps(dtype) * sqrt(reduction) * max|ref|; carried: sqrt(sum of tol**2 over the layers so far)"


class TolerancePolicy(BaseModel):
    """How layer tolerances are derived (see the module docstring for the formula)."""

    model_config = ConfigDict(extra="forbid")

    k: float = Field(default=DEFAULT_K, gt=0)
    kind_k: dict[str, float] = Field(default_factory=dict)
    """Per layer kind (class name) ``k``; for a fused layer the largest ``k`` among its kinds applies."""
    layer_atol: dict[str, float] = Field(default_factory=dict)
    """Per layer path absolute tolerance, replacing the formula."""
    rel_floor: float = Field(default=1e-3, gt=0)
    """Floor of the relative error's denominator, as a fraction of max |ref|."""
    carried: Literal["accumulated", "local"] = "accumulated"
    """Carried-mode tolerance: local tolerances accumulated in quadrature, or the local one alone."""

    def tolerance(self, path: str, kinds: Iterable[str], dtype: np.dtype | str, reduction: int, scale: float) -> float:
        """The absolute tolerance of layer ``path`` whose output has dtype ``dtype`` and magnitude ``scale``."""
        if path in self.layer_atol:
            return float(self.layer_atol[path])
        ks = [self.kind_k[k] for k in kinds if k in self.kind_k]
        k = max(ks) if ks else self.k
        return k * dtype_eps(dtype) * math.sqrt(max(int(reduction), 1)) * _scale(scale)


def accumulate(local: Sequence[float]) -> list[float]:
    """Carried-mode tolerances from the local ones, in execution order: ``sqrt(cumsum(tol**2))``."""
    total, out = 0.0, []
    for tol in local:
        total += tol * tol
        out.append(math.sqrt(total))
    return out


class ErrorStats(BaseModel):
    """One comparison of a candidate output with the reference output of the same layer."""

    max_abs: float
    mean_abs: float
    max_rel: float
    ulp: float
    tolerance: float
    passed: bool
    nonfinite: int = 0
    """Candidate values that are NaN/inf where the reference value is finite."""

    @property
    def ratio(self) -> float:
        """``max_abs / tolerance`` (> 1 fails)."""
        return self.max_abs / self.tolerance if self.tolerance > 0 else math.inf


def dtype_eps(dtype: np.dtype | str) -> float:
    """Machine epsilon of a float dtype; 1.0 for integer dtypes (exact up to one unit)."""
    dt = np.dtype(dtype)
    if np.issubdtype(dt, np.floating):
        return float(np.finfo(dt).eps)
    return 1.0


def output_scale(ref: np.ndarray) -> float:
    """max |ref| over finite values (0.0 for an empty or all-non-finite array)."""
    if ref.size == 0:
        return 0.0
    hi, lo = float(np.max(ref)), float(np.min(ref))
    if math.isfinite(hi) and math.isfinite(lo):
        return max(abs(hi), abs(lo))
    finite = np.abs(ref[np.isfinite(ref)])
    return float(finite.max()) if finite.size else 0.0


def compare_arrays(
    ref: np.ndarray, cand: np.ndarray, tolerance: float, rel_floor: float = 1e-3, scale: float | None = None
) -> ErrorStats:
    """Error statistics of ``cand`` against ``ref`` (same shape, any float dtype; means summed in float64).

    Non-finite candidate values where the reference is finite count as ``nonfinite`` and make the
    comparison fail with ``max_abs = inf``; positions where the reference itself is not finite are ignored.
    """
    if ref.shape != cand.shape:
        raise ValueError(f"shape mismatch: reference {ref.shape} vs candidate {cand.shape}")
    scale = output_scale(ref) if scale is None else scale
    work = np.float64 if np.float64 in (ref.dtype, cand.dtype) else np.float32
    floor = rel_floor * _scale(scale)
    flat_r, flat_c = ref.reshape(-1), cand.reshape(-1)
    max_abs = max_rel = sum_abs = 0.0
    bad = 0
    for lo in range(0, flat_r.size, _CHUNK):  # bounded temporaries: at most _CHUNK values at a time
        r = np.asarray(flat_r[lo : lo + _CHUNK], dtype=work)
        diff = np.abs(np.subtract(np.asarray(flat_c[lo : lo + _CHUNK], dtype=work), r))
        if not math.isfinite(float(diff.max())):
            ok = np.isfinite(r)
            bad += int(np.count_nonzero(ok & ~np.isfinite(diff)))
            diff[~ok] = 0.0
        max_abs = max(max_abs, float(diff.max()))
        sum_abs += float(diff.sum(dtype=np.float64))
        denom = np.abs(r)
        np.maximum(denom, floor, out=denom)
        np.divide(diff, denom, out=diff)
        max_rel = max(max_rel, float(diff.max()))
    mean_abs = sum_abs / flat_r.size if flat_r.size else 0.0
    if bad:
        max_abs = mean_abs = max_rel = math.inf
    eps = dtype_eps(ref.dtype)
    return ErrorStats(
        max_abs=max_abs,
        mean_abs=mean_abs,
        max_rel=max_rel,
        ulp=max_abs / (eps * _scale(scale)),
        tolerance=tolerance,
        passed=bad == 0 and max_abs <= tolerance,
        nonfinite=bad,
    )


def _scale(scale: float) -> float:
    return scale if scale > 0 and math.isfinite(scale) else 1.0
