"""Name the pitfall that turns the manifest's pipeline into the candidate's.

The registered pitfall variants of the manifest's task (:func:`repliscope.pitfalls.sweep.task_pitfalls`) are
derived from the manifest pipeline; those that change no pre-processing (run settings, post-processing) cannot
show in a model input and are listed apart. Every variant, then every ordered pair of two different variants
(the second derived from the first's pipeline), is run on a few of the samples where the candidate differs most
(pairs: all on the worst sample, the closest :data:`PAIR_FINALISTS` also on the others),
with the sweep's shared-prefix machinery (:func:`repliscope.pitfalls.sweep.prepare_all`: every op prefix the
variants have in common is computed once per sample). A variant *explains* the candidate when its output is within
``max(tolerance, EXPLAIN_FRACTION * the candidate's max error)`` of the candidate's on the searched samples and on
the other kept differing samples it is then checked on. Pairs are searched only when no single variant explains.

An unexplained difference gets :func:`hints` from the arrays of its worst sample.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import permutations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from repliscope.datasets.base import Sample
from repliscope.ops.pipeline import Pipeline
from repliscope.pitfalls.base import PITFALLS, NotApplicable, PitfallContext
from repliscope.pitfalls.sweep import PrefixMemo, op_keys, prepare_all, task_pitfalls

EXPLAIN_FRACTION = 0.01
"""A variant explains the candidate when what is left is at most 1 % of the candidate's own max error (or within
the comparison tolerance)."""
SEARCH_SAMPLES = 3
"""Differing samples every single variant is run on (the worst ones); the winner is then checked on all kept ones."""
PAIR_FINALISTS = 5
"""Pairs are run on the worst differing sample; the closest this many also on the other searched samples."""


class VariantFit(BaseModel):
    """How close one variant (or pair ``a + b``) comes to the candidate: max |variant - candidate|."""

    model_config = ConfigDict(extra="forbid")
    variant: str
    max_abs_error: float | None
    """None when the variant's output could not be compared (another shape, or it failed)."""
    change: str = ""


class Diagnosis(BaseModel):
    model_config = ConfigDict(extra="forbid")
    verdict: str
    """``match`` | ``explained`` | ``unexplained``."""
    variant: str | None = None
    change: str | None = None
    """The variant's change in words (e.g. ``decode.channels: RGB -> BGR``)."""
    residual_max_abs_error: float | None = None
    """max |variant - candidate| over the checked samples (the explaining or closest variant)."""
    candidates: list[VariantFit] = Field(default_factory=list)
    """The closest variants, best first (at most 10)."""
    searched: int = 0
    """Variants and pairs run."""
    checked_samples: int = 0
    not_preprocessing: list[str] = Field(default_factory=list)
    """Registered variants that change no pre-processing (nothing to find in a model input)."""
    not_applicable: dict[str, str] = Field(default_factory=dict)
    hints: list[str] = Field(default_factory=list)
    message: str = ""


@dataclass
class _VariantPlan:
    """A derived pipeline in the shape :func:`prepare_all` reads."""

    name: str
    pipeline: Pipeline
    change: str
    op_keys: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Differing:
    """One sample where the candidate differs: the sample and the candidate's aligned output."""

    sample: Sample
    candidate: np.ndarray


def derive_variants(
    base: Pipeline, ctx: PitfallContext, task: str
) -> tuple[list[_VariantPlan], list[str], dict[str, str]]:
    """The pre-processing-changing variants of ``task`` -> (plans, names that change no pre-processing,
    not applicable name -> reason)."""
    base_keys = op_keys(base)
    plans, settings_only, not_applicable = [], [], {}
    for name in task_pitfalls(task):
        try:
            derived = PITFALLS.get(name)().derive(base, ctx)
        except NotApplicable as exc:
            not_applicable[name] = str(exc)
            continue
        keys = op_keys(derived.pipeline)
        if keys == base_keys:
            settings_only.append(name)
            continue
        plans.append(_VariantPlan(name, derived.pipeline, derived.change, keys))
    return plans, settings_only, not_applicable


def derive_pairs(singles: Sequence[_VariantPlan], ctx: PitfallContext) -> list[_VariantPlan]:
    """Every ordered pair ``a + b`` (b derived from a's pipeline) whose pipeline no single variant or earlier pair
    already has."""
    seen = {tuple(p.op_keys) for p in singles}
    out = []
    for a, b in permutations(singles, 2):
        try:
            derived = PITFALLS.get(b.name)().derive(a.pipeline, ctx)
        except NotApplicable:
            continue
        keys = op_keys(derived.pipeline)
        if tuple(keys) in seen:
            continue
        seen.add(tuple(keys))
        out.append(_VariantPlan(f"{a.name} + {b.name}", derived.pipeline, f"{a.change}; {derived.change}", keys))
    return out


def _residuals(
    plans: Sequence[_VariantPlan],
    samples: Sequence[Differing],
    expected: tuple[int, ...],
    memos: dict[str, PrefixMemo] | None = None,
) -> dict[str, float | None]:
    """max |variant - candidate| over ``samples`` per plan (None: a sample's output missing or of another shape);
    ``memos`` (sample id -> prefix memo) keeps computed op prefixes for the next call."""
    worst: dict[str, float | None] = {p.name: 0.0 for p in plans}
    for d in samples:
        memo = None if memos is None else memos.setdefault(d.sample.id, {})
        cells, _ = prepare_all(d.sample, plans, expected, memo)
        for p in plans:
            data, prev = cells[p.name].data, worst[p.name]
            if prev is None:
                continue
            if data is None or data.shape != d.candidate.shape:
                worst[p.name] = None
                continue
            err = float(np.max(np.abs(data.astype(np.float64) - d.candidate.astype(np.float64)))) if data.size else 0.0
            worst[p.name] = max(prev, err)
    return worst


def search(
    base: Pipeline,
    ctx: PitfallContext,
    task: str,
    differing: Sequence[Differing],
    expected: tuple[int, ...],
    tolerance: float,
    error_max: float,
) -> Diagnosis:
    """Search singles, then pairs, on the worst :data:`SEARCH_SAMPLES` of ``differing`` (worst first); check the
    best on all of ``differing``."""
    threshold = max(tolerance, EXPLAIN_FRACTION * error_max)
    singles, settings_only, not_applicable = derive_variants(base, ctx, task)
    probe = list(differing[:SEARCH_SAMPLES])
    memos: dict[str, PrefixMemo] = {}  # the worst sample's prefixes, kept for the pairs that extend them
    fits = _fits(singles, _residuals(singles, probe[:1], expected, memos))
    if len(probe) > 1:
        more = _residuals(singles, probe[1:], expected)
        for f in fits:
            m = more[f.variant]
            f.max_abs_error = None if m is None or f.max_abs_error is None else max(f.max_abs_error, m)
        fits.sort(key=_fit_key)
    searched = len(singles)
    plans = {p.name: p for p in singles}
    if not fits or fits[0].max_abs_error is None or fits[0].max_abs_error > threshold:
        pairs = derive_pairs(singles, ctx)
        searched += len(pairs)
        plans.update({p.name: p for p in pairs})
        # every pair on the worst sample; the PAIR_FINALISTS closest also on the other searched samples
        first = _fits(pairs, _residuals(pairs, probe[:1], expected, memos))
        finalists = [plans[f.variant] for f in first[:PAIR_FINALISTS] if f.max_abs_error is not None]
        others = _residuals(finalists, probe[1:], expected) if len(probe) > 1 else {}
        full = {f.variant for f in first if f.variant in others or len(probe) == 1}

        def widen(fit: VariantFit, more: float | None) -> None:
            fit.max_abs_error = None if more is None or fit.max_abs_error is None else max(fit.max_abs_error, more)

        for f in first:
            if f.variant in others:
                widen(f, others[f.variant])
        fits = sorted(fits + first, key=_fit_key)
        while (
            fits
            and fits[0].max_abs_error is not None
            and fits[0].variant in plans
            and " + " in fits[0].variant
            and fits[0].variant not in full
        ):  # a pair seen on one sample only leads: see it on the others too
            widen(fits[0], _residuals([plans[fits[0].variant]], probe[1:], expected)[fits[0].variant])
            full.add(fits[0].variant)
            fits.sort(key=_fit_key)
    best = fits[0] if fits and fits[0].max_abs_error is not None else None
    diag = Diagnosis(
        verdict="unexplained",
        candidates=fits[:10],
        searched=searched,
        checked_samples=len(probe),
        not_preprocessing=settings_only,
        not_applicable=not_applicable,
    )
    if best is None:
        diag.message = "no registered pitfall variant (single or pair) gives an output of the candidate's shape"
        return diag
    assert best.max_abs_error is not None
    residual = best.max_abs_error
    rest = list(differing[SEARCH_SAMPLES:])
    if residual <= threshold and rest:
        extra = _residuals([plans[best.variant]], rest, expected)[best.variant]
        residual = math.inf if extra is None else max(residual, extra)
        diag.checked_samples += len(rest)
    diag.residual_max_abs_error = residual
    diag.change = best.change
    if residual <= threshold:
        diag.verdict, diag.variant = "explained", best.variant
        diag.message = (
            f"your pipeline = the manifest with `{best.variant}` ({best.change}; max error "
            f"{residual:.3g} after the change, on {diag.checked_samples} differing samples)"
        )
    else:
        diag.message = (
            f"unexplained: the closest registered variant, `{best.variant}`, leaves a max error of "
            f"{residual:.3g} (of {error_max:.3g})"
        )
    return diag


def _fit_key(f: VariantFit) -> tuple[float, int, str]:
    return (math.inf if f.max_abs_error is None else f.max_abs_error, f.variant.count("+"), f.variant)


def _fits(plans: Sequence[_VariantPlan], residuals: dict[str, float | None]) -> list[VariantFit]:
    return sorted(
        (VariantFit(variant=p.name, max_abs_error=residuals[p.name], change=p.change) for p in plans), key=_fit_key
    )


def hints(ref: np.ndarray, cand: np.ndarray, layout: str, tolerance: float) -> list[str]:
    """Simple explanations of ``cand - ref`` (one sample, same shape, ``layout`` HWC or CHW): a per-channel
    constant offset or scale, channels reversed, axes permuted, a spatial shift, a smoother or sharper image."""
    r, c = ref.astype(np.float64), cand.astype(np.float64)
    out: list[str] = []
    if r.ndim != 3 or r.shape != c.shape:
        return out
    chw = layout.endswith("CHW")
    rc, cc = (r, c) if chw else (r.transpose(2, 0, 1), c.transpose(2, 0, 1))  # both CHW from here on
    span = max(float(rc.max() - rc.min()), 1e-12)
    small = max(tolerance, 1e-4 * span)
    if np.max(np.abs(cc - rc[::-1])) <= small:
        return ["the channels are reversed (RGB <-> BGR)"]
    if rc.shape[1] == rc.shape[2] and np.max(np.abs(cc - rc.transpose(0, 2, 1))) <= small:
        return ["height and width are swapped (axes permuted)"]
    if (
        np.max(np.abs(cc.reshape(-1) - np.ascontiguousarray(rc.transpose(1, 2, 0)).reshape(-1))) <= small
        or np.max(np.abs(cc.transpose(1, 2, 0).reshape(-1) - rc.reshape(-1))) <= small
    ):
        return ["the same values in another axis order: a reshape where a transpose (HWC <-> CHW) was needed"]
    affine = _affine(rc, cc)
    if affine is not None:
        scale, offset, resid = affine
        if resid <= small:
            if np.allclose(scale, 1.0, atol=1e-4):
                out.append(f"a per-channel constant offset {_fmt(offset)}: another mean (or the mean in other units)")
            else:
                out.append(
                    f"a per-channel scale {_fmt(scale)} and offset {_fmt(offset)}: mean/std in other units "
                    "([0, 1] vs [0, 255]) or other normalization constants"
                )
            return out
    shift = _shift(rc, cc)
    if shift is not None:
        dy, dx = shift
        out.append(
            f"a spatial shift of {dy:+d} px (rows), {dx:+d} px (columns): a crop offset or size rounding "
            "(round vs floor)"
        )
    ratio = _sharpness(cc) / max(_sharpness(rc), 1e-12)
    if ratio < 0.9:
        out.append(
            f"the candidate is smoother (high-frequency energy x{ratio:.2f}): another interpolation "
            "(bilinear / area where bicubic is expected) or antialiasing on"
        )
    elif ratio > 1.1:
        out.append(
            f"the candidate is sharper (high-frequency energy x{ratio:.2f}): nearest-neighbour, or antialiasing off"
        )
    return out


def _fmt(values: np.ndarray) -> str:
    return "[" + ", ".join(f"{v:.3g}" for v in values) + "]"


def _affine(r: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray, float] | None:
    """Per channel least squares ``c = a * r + b`` -> (a, b, max residual); None when a channel is constant."""
    scales, offsets, resid = [], [], 0.0
    for rr, cc in zip(r, c, strict=True):
        x, y = rr.reshape(-1), cc.reshape(-1)
        if float(x.std()) == 0.0:
            return None
        a, b = np.polyfit(x, y, 1)
        scales.append(a)
        offsets.append(b)
        resid = max(resid, float(np.max(np.abs(a * x + b - y))))
    return np.array(scales), np.array(offsets), resid


def _shift(r: np.ndarray, c: np.ndarray, k: int = 4) -> tuple[int, int] | None:
    """The (dy, dx), |d| <= k, under which ``c`` matches ``r`` far better (mean error / 10) than unshifted."""
    base = float(np.mean(np.abs(c - r)))
    best, where = base, None
    h, w = r.shape[1:]
    for dy in range(-k, k + 1):
        for dx in range(-k, k + 1):
            if (dy, dx) == (0, 0) or h <= 2 * k or w <= 2 * k:
                continue
            rr = r[:, max(dy, 0) : h + min(dy, 0), max(dx, 0) : w + min(dx, 0)]
            cc = c[:, max(-dy, 0) : h + min(-dy, 0), max(-dx, 0) : w + min(-dx, 0)]
            err = float(np.mean(np.abs(cc - rr)))
            if err < best:
                best, where = err, (dy, dx)
    return where if where is not None and best < base / 10 else None


def _sharpness(x: np.ndarray) -> float:
    """Mean squared discrete Laplacian over the spatial axes of a CHW array."""
    lap = 4 * x[:, 1:-1, 1:-1] - x[:, :-2, 1:-1] - x[:, 2:, 1:-1] - x[:, 1:-1, :-2] - x[:, 1:-1, 2:]
    return float(np.mean(lap * lap))
