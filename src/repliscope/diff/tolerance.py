"""Per-layer error statistics and the tolerance a layer's error is judged against.

Tolerance formula (absolute, per layer, on the layer's whole output batch)::

    scale = max |ref|                      (1.0 if the reference output is all zeros)
    tol   = k * eps(dtype) * sqrt(n) * scale

``eps(dtype)`` is the machine epsilon of the reference output dtype (float32: 2**-23 = 1.19e-7), ``n`` the
layer's reduction length (products summed per output element: conv ``in/groups*kh*kw``, linear
``in_features``, average pool window; 1 for element-wise layers; the largest over the reference layers a
fused candidate layer covers), and ``k`` a safety factor (default :data:`DEFAULT_K`). ``sqrt(n)`` is the
usual random-walk growth of rounding error in a sum of ``n`` terms; ``scale`` makes it relative to the
layer's output magnitude. Overrides: ``kind_k`` sets ``k`` for a layer kind (class name, e.g. ``"Linear"``);
``layer_atol`` sets an absolute tolerance for one layer path, replacing the formula.

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
from collections.abc import Iterable

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

DEFAULT_K = 16.0
"""Calibrated on EfficientNet-Lite0, torch 2.13 vs onnxruntime (BatchNorm folded into Conv): the largest
golden-mode error is below 1/4 of the tolerance with k = 16 (see tests/diff/test_layers_onnx.py)."""

FORMULA = "tol = k * eps(dtype) * sqrt(reduction) * max|ref|"


class TolerancePolicy(BaseModel):
    """How layer tolerances are derived (see the module docstring for the formula)."""

    model_config = ConfigDict(extra="forbid")

    k: float = Field(DEFAULT_K, gt=0)
    kind_k: dict[str, float] = Field(default_factory=dict)
    """Per layer kind (class name) ``k``; for a fused layer the largest ``k`` among its kinds applies."""
    layer_atol: dict[str, float] = Field(default_factory=dict)
    """Per layer path absolute tolerance, replacing the formula."""
    rel_floor: float = Field(1e-3, gt=0)
    """Floor of the relative error's denominator, as a fraction of max |ref|."""

    def tolerance(self, path: str, kinds: Iterable[str], dtype: np.dtype | str, reduction: int,
                  scale: float) -> float:
        """The absolute tolerance of layer ``path`` whose output has dtype ``dtype`` and magnitude ``scale``."""
        if path in self.layer_atol:
            return float(self.layer_atol[path])
        ks = [self.kind_k[k] for k in kinds if k in self.kind_k]
        k = max(ks) if ks else self.k
        return k * dtype_eps(dtype) * math.sqrt(max(int(reduction), 1)) * _scale(scale)


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
    finite = np.abs(ref[np.isfinite(ref)]) if not np.all(np.isfinite(ref)) else np.abs(ref)
    return float(finite.max()) if finite.size else 0.0


def compare_arrays(ref: np.ndarray, cand: np.ndarray, tolerance: float, rel_floor: float = 1e-3,
                   scale: float | None = None) -> ErrorStats:
    """Error statistics of ``cand`` against ``ref`` (same shape, any float dtype; computed in float64 sums).

    Non-finite candidate values where the reference is finite count as ``nonfinite`` and make the
    comparison fail with ``max_abs = inf``.
    """
    if ref.shape != cand.shape:
        raise ValueError(f"shape mismatch: reference {ref.shape} vs candidate {cand.shape}")
    scale = output_scale(ref) if scale is None else scale
    r = np.asarray(ref, dtype=np.float64 if ref.dtype == np.float64 else np.float32)
    c = np.asarray(cand, dtype=r.dtype)
    diff = np.abs(c - r)
    ok = np.isfinite(r)
    bad = int(np.count_nonzero(ok & ~np.isfinite(c)))
    diff = np.where(ok, diff, 0.0) if not ok.all() else diff
    if bad:
        max_abs = mean_abs = max_rel = math.inf
    elif diff.size:
        max_abs = float(diff.max())
        mean_abs = float(diff.mean(dtype=np.float64))
        denom = np.maximum(np.abs(r), rel_floor * _scale(scale))
        max_rel = float((diff / denom).max())
    else:
        max_abs = mean_abs = max_rel = 0.0
    eps = dtype_eps(ref.dtype)
    return ErrorStats(max_abs=max_abs, mean_abs=mean_abs, max_rel=max_rel, ulp=max_abs / (eps * _scale(scale)),
                      tolerance=tolerance, passed=bad == 0 and max_abs <= tolerance, nonfinite=bad)


def _scale(scale: float) -> float:
    return scale if scale > 0 and math.isfinite(scale) else 1.0
