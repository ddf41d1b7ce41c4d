"""Name the pitfall that turns the manifest's pipeline into the candidate's.

The registered pitfall variants of the manifest's task (:func:`repliscope.pitfalls.sweep.task_pitfalls`) are
derived from the manifest pipeline; those that change no pre-processing (run settings, post-processing) cannot
show in a model input and are listed apart. A variant with degrees (:class:`repliscope.pitfalls.base.Parameter`:
a crop offset, a border grey, how many normalisation steps precede the cast, a resize library) is tried at every
degree its parameters list (:meth:`~repliscope.pitfalls.base.Pitfall.degrees`), each under its label (e.g.
``center_crop_offset[offset=[1, 0]]``); its default keeps the bare name, and a degree whose pipeline another
variant already has is tried once.

Singles run on the :data:`SEARCH_SAMPLES` samples where the candidate differs most (on the worst one first: when
some are within the threshold there, only those run on the others), with the sweep's
shared-prefix machinery (:func:`repliscope.pitfalls.sweep.prepare_all`: every op prefix the variants have in
common is computed once per sample). A variant *explains* the candidate when its output is within
``max(tolerance, EXPLAIN_FRACTION * the candidate's max error)`` of the candidate's on the searched samples and on
the other kept differing samples it is then checked on.

When no single explains, a compound mistake is searched by composing singles (``a + b``: b derived from a's
pipeline), bounded: the :data:`PAIR_POOL` pitfalls whose best degree brings the manifest's output closest to the
candidate's (mean |error| below the manifest's own) are each composed with every degree of every other pitfall,
both ways; the pairs run on the worst sample, the :data:`PAIR_FINALISTS` closest also on the other searched
samples. The diagnosis records how many singles and pairs ran and the pool.

A variant is called *closest* only when it brings the manifest's output nearer to the candidate's (its mean
|error| below the manifest's own on the searched samples; a pair only when it beats both its singles by
:data:`PAIR_GAIN`), the nearest by mean |error| first; otherwise the diagnosis says that none does. An
unexplained difference gets :func:`hints` derived from the error's signature on its worst sample.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from repliscope.datasets.base import Sample
from repliscope.ops.pipeline import Pipeline
from repliscope.pitfalls.base import PITFALLS, NotApplicable, PitfallContext, label, op_keys, task_pitfalls
from repliscope.pitfalls.sweep import PrefixMemo, prepare_all

EXPLAIN_FRACTION = 0.01
"""A variant explains the candidate when what is left is at most 1 % of the candidate's own max error (or within
the comparison tolerance)."""
SEARCH_SAMPLES = 3
"""Differing samples every single variant is run on (the worst ones); the winner is then checked on all kept ones."""
PAIR_POOL = 5
"""Pitfalls (each at its best degree) composed with every other variant when no single explains."""
PAIR_FINALISTS = 5
"""Pairs are run on the worst differing sample; the closest this many also on the other searched samples."""
PAIR_GAIN = 0.1
"""A pair is called closer than its own singles only when its mean |error| is at least 10 % below the better of
the two (a second change that shaves a border pixel is no diagnosis)."""
MANIFEST = "(the manifest)"
"""The plan name of the manifest's own pipeline in the search (its error is the yardstick of "closer")."""


class VariantFit(BaseModel):
    """How close one variant (or pair ``a + b``) comes to the candidate: max and mean |variant - candidate|."""

    model_config = ConfigDict(extra="forbid")
    variant: str
    max_abs_error: float | None
    """None when the variant's output could not be compared (another shape, or it failed)."""
    change: str = ""
    mean_abs_error: float | None = None
    """Mean |variant - candidate| over the searched samples (the manifest's own: ``manifest_mean_abs_error``)."""


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
    """The closest variants, best first (at most 10): only those that bring the manifest's output nearer to the
    candidate's (mean |error| below the manifest's own)."""
    searched: int = 0
    """Variants and pairs run (``singles + pairs``)."""
    singles: int = 0
    """Variants run alone (every degree of a variant with parameters counted)."""
    pairs: int = 0
    """Compositions ``a + b`` run (0 when a single explains)."""
    pair_pool: list[str] = Field(default_factory=list)
    """The variants every other one was composed with (:data:`PAIR_POOL` at most)."""
    manifest_max_abs_error: float | None = None
    manifest_mean_abs_error: float | None = None
    """The manifest's own error against the candidate on the searched samples (what "closer" is measured from)."""
    checked_samples: int = 0
    not_preprocessing: list[str] = Field(default_factory=list)
    """Registered variants that change no pre-processing (nothing to find in a model input)."""
    not_applicable: dict[str, str] = Field(default_factory=dict)
    degrees_not_applicable: dict[str, str] = Field(default_factory=dict)
    """Degrees of an applicable variant that this pipeline refuses (e.g. a resize library without that method)."""
    hints: list[str] = Field(default_factory=list)
    message: str = ""


@dataclass
class _VariantPlan:
    """A derived pipeline in the shape :func:`prepare_all` reads."""

    name: str
    pipeline: Pipeline
    change: str
    op_keys: list[str] = field(default_factory=list)
    pitfall: str = ""
    """The registered name (a pair: the second one's)."""
    params: dict[str, Any] = field(default_factory=dict)
    parts: tuple[str, ...] = ()
    """A pair's two singles (their labels); empty for a single."""


@dataclass(frozen=True)
class Differing:
    """One sample where the candidate differs: the sample and the candidate's aligned output."""

    sample: Sample
    candidate: np.ndarray


def derive_variants(
    base: Pipeline, ctx: PitfallContext, task: str, degrees_refused: dict[str, str] | None = None
) -> tuple[list[_VariantPlan], list[str], dict[str, str]]:
    """The pre-processing-changing variants of ``task``, every degree of each -> (plans, names that change no
    pre-processing, not applicable name -> reason). ``degrees_refused`` receives label -> reason of the degrees
    the pipeline refuses."""
    base_keys = op_keys(base)
    seen = {tuple(base_keys)}
    plans, settings_only, not_applicable = [], [], {}
    for name in task_pitfalls(task):
        cls = PITFALLS.get(name)
        try:
            derived = cls().derive(base, ctx)
        except NotApplicable as exc:
            not_applicable[name] = str(exc)
            continue
        keys = op_keys(derived.pipeline)
        if keys == base_keys:
            settings_only.append(name)
            continue
        if tuple(keys) not in seen:
            seen.add(tuple(keys))
            plans.append(_VariantPlan(name, derived.pipeline, derived.change, keys, name, {}))
        for params in cls().degrees(base, ctx) if cls.parameters else []:
            tag = label(name, params)
            try:
                one = cls(**params).derive(base, ctx)
            except NotApplicable as exc:
                if degrees_refused is not None:
                    degrees_refused[tag] = str(exc)
                continue
            keys = op_keys(one.pipeline)
            if tuple(keys) in seen:
                continue
            seen.add(tuple(keys))
            plans.append(_VariantPlan(tag, one.pipeline, one.change, keys, name, dict(params)))
    return plans, settings_only, not_applicable


def compose(
    singles: Sequence[_VariantPlan], pool: Sequence[_VariantPlan], ctx: PitfallContext, seen: set[tuple[str, ...]]
) -> list[_VariantPlan]:
    """Every ``a + b`` of two different pitfalls, one of them in ``pool`` (b derived from a's pipeline), whose
    pipeline is not in ``seen`` (which grows)."""
    in_pool = {p.name for p in pool}
    out = []
    for a in singles:
        for b in singles:
            if a.pitfall == b.pitfall or not (a.name in in_pool or b.name in in_pool):
                continue
            try:
                derived = PITFALLS.get(b.pitfall)(**b.params).derive(a.pipeline, ctx)
            except NotApplicable:
                continue
            keys = op_keys(derived.pipeline)
            if tuple(keys) in seen:
                continue
            seen.add(tuple(keys))
            out.append(
                _VariantPlan(
                    f"{a.name} + {b.name}",
                    derived.pipeline,
                    f"{a.change}; {derived.change}",
                    keys,
                    b.pitfall,
                    b.params,
                    (a.name, b.name),
                )
            )
    return out


class _SharedPrefixes(dict[tuple[str, ...], Any]):
    """A prefix memo that keeps only the prefixes more than one plan computes (a plan's own final output is
    never reused: keeping every one would hold hundreds of model inputs)."""

    def __init__(self) -> None:
        super().__init__()
        self.keep: set[tuple[str, ...]] = set()

    def share(self, plans: Sequence[_VariantPlan]) -> None:
        counts: dict[tuple[str, ...], int] = {}
        for p in plans:
            for i in range(1, len(p.op_keys)):
                key = tuple(p.op_keys[:i])
                counts[key] = counts.get(key, 0) + 1
        self.keep |= {k for k, n in counts.items() if n > 1}

    def __setitem__(self, key: tuple[str, ...], value: Any) -> None:
        if key in self.keep:
            super().__setitem__(key, value)


Residual = tuple[float, float] | None
"""(max, mean) |variant - candidate| over some samples, None when an output is missing or of another shape."""


def _residuals(
    plans: Sequence[_VariantPlan],
    samples: Sequence[Differing],
    expected: tuple[int, ...],
    memos: dict[str, _SharedPrefixes] | None = None,
) -> dict[str, Residual]:
    """(max, mean) |variant - candidate| over ``samples`` per plan (mean: of the per-sample means); ``memos``
    (sample id -> shared prefixes) keeps computed op prefixes for the next call."""
    worst: dict[str, list[float] | None] = {p.name: [0.0, 0.0] for p in plans}
    for d in samples:
        # only shared prefixes are kept, whether for the next call or within this one (never every plan's output)
        shared = _SharedPrefixes() if memos is None else memos.setdefault(d.sample.id, _SharedPrefixes())
        shared.share(plans)
        memo: PrefixMemo = shared
        cells, _ = prepare_all(d.sample, plans, expected, memo)
        cand = d.candidate.astype(np.float64)
        for p in plans:
            data, acc = cells[p.name].data, worst[p.name]
            if acc is None:
                continue
            if data is None or data.shape != d.candidate.shape:
                worst[p.name] = None
                continue
            diff = np.abs(data.astype(np.float64) - cand) if data.size else np.zeros(1)
            acc[0] = max(acc[0], float(diff.max()))
            acc[1] += float(diff.mean()) / len(samples)
    return {k: None if v is None else (v[0], v[1]) for k, v in worst.items()}


def _fits(plans: Sequence[_VariantPlan], residuals: Mapping[str, Residual]) -> list[VariantFit]:
    out = []
    for p in plans:
        r = residuals[p.name]
        out.append(
            VariantFit(
                variant=p.name,
                max_abs_error=None if r is None else r[0],
                mean_abs_error=None if r is None else r[1],
                change=p.change,
            )
        )
    return sorted(out, key=_fit_key)


def _fit_key(f: VariantFit) -> tuple[float, float, int, str]:
    return (
        math.inf if f.max_abs_error is None else f.max_abs_error,
        math.inf if f.mean_abs_error is None else f.mean_abs_error,
        f.variant.count(" + "),
        f.variant,
    )


def _closer(fit: VariantFit, manifest_mean: float) -> bool:
    """``fit`` brings the manifest's output nearer to the candidate's (a lower mean |error|)."""
    return fit.mean_abs_error is not None and fit.mean_abs_error < manifest_mean * (1 - 1e-9)


def _combined(first: Residual, rest: Residual, n_rest: int) -> Residual:
    """The worst sample's residual and the mean one of ``n_rest`` others -> over all of them."""
    if first is None or rest is None:
        return None
    return max(first[0], rest[0]), (first[1] + rest[1] * n_rest) / (1 + n_rest)


def search(
    base: Pipeline,
    ctx: PitfallContext,
    task: str,
    differing: Sequence[Differing],
    expected: tuple[int, ...],
    tolerance: float,
    error_max: float,
) -> Diagnosis:
    """Search singles (every degree), then bounded pairs, on the worst :data:`SEARCH_SAMPLES` of ``differing``
    (worst first); check the best on all of ``differing``."""
    threshold = max(tolerance, EXPLAIN_FRACTION * error_max)
    refused: dict[str, str] = {}
    singles, settings_only, not_applicable = derive_variants(base, ctx, task, refused)
    probe = list(differing[:SEARCH_SAMPLES])
    memos: dict[str, _SharedPrefixes] = {}  # per sample: shared prefixes, kept for the pairs that extend them
    manifest = _VariantPlan(MANIFEST, base, "none", op_keys(base))
    plans = {p.name: p for p in (manifest, *singles)}
    first = _residuals([manifest, *singles], probe[:1], expected, memos)
    n_rest = len(probe) - 1

    def on_all(names: Sequence[str]) -> dict[str, Residual]:
        more = _residuals([plans[n] for n in names], probe[1:], expected) if n_rest else {}
        return {n: _combined(first[n], more[n], n_rest) if n_rest else first[n] for n in names}

    # only a single within the threshold on the worst sample can explain: the others go on to the other searched
    # samples only when none of those does (their means then rank the closest and the pair pool)
    likely = [p.name for p in singles if (r := first[p.name]) is not None and r[0] <= threshold]
    residuals = on_all([MANIFEST, *likely])
    if not any((r := residuals[n]) is not None and r[0] <= threshold for n in likely):
        residuals.update(on_all([p.name for p in singles if p.name not in residuals]))
    own = residuals.pop(MANIFEST)
    del plans[MANIFEST]
    manifest_max, manifest_mean = own if own is not None else (error_max, math.inf)
    fits = _fits([p for p in singles if p.name in residuals], residuals)
    diag = Diagnosis(
        verdict="unexplained",
        singles=len(singles),
        checked_samples=len(probe),
        not_preprocessing=settings_only,
        not_applicable=not_applicable,
        degrees_not_applicable=refused,
        manifest_max_abs_error=manifest_max,
        manifest_mean_abs_error=manifest_mean,
    )
    if not fits or fits[0].max_abs_error is None or fits[0].max_abs_error > threshold:
        seen = {tuple(manifest.op_keys)} | {tuple(p.op_keys) for p in singles}
        fits = _search_pairs(singles, fits, plans, ctx, probe, expected, memos, manifest_mean, diag, seen)
    diag.searched = diag.singles + diag.pairs
    closer = _closest(fits, plans, manifest_mean)
    diag.candidates = closer[:10]
    best = fits[0] if fits and fits[0].max_abs_error is not None else None
    scope = f"{diag.singles} variants and degrees" + (
        f" and {diag.pairs} pairs composed with the {len(diag.pair_pool)} closest" if diag.pairs else ""
    )
    if best is None:
        diag.message = (
            f"unexplained: no registered pitfall variant ({scope} searched) gives an output of the candidate's shape"
        )
        return diag
    assert best.max_abs_error is not None
    residual = best.max_abs_error
    rest = list(differing[SEARCH_SAMPLES:])
    if residual <= threshold and rest:
        extra = _residuals([plans[best.variant]], rest, expected)[best.variant]
        residual = math.inf if extra is None else max(residual, extra[0])
        diag.checked_samples += len(rest)
    if residual <= threshold:
        diag.residual_max_abs_error = residual
        diag.change = best.change
        diag.verdict, diag.variant = "explained", best.variant
        diag.message = (
            f"your pipeline = the manifest with `{best.variant}` ({best.change}; max error "
            f"{residual:.3g} after the change, on {diag.checked_samples} differing samples"
            + (f"; found among {scope}" if diag.pairs else "")
            + ")"
        )
    elif closer:
        top = closer[0]
        diag.residual_max_abs_error, diag.change = top.max_abs_error, top.change
        diag.message = (
            f"unexplained: the closest registered variant, `{top.variant}`, leaves a max error of "
            f"{_g(top.max_abs_error)} (of {error_max:.3g}) and a mean error of {_g(top.mean_abs_error)} (the "
            f"manifest's own: {manifest_mean:.3g}); {scope} searched"
        )
    else:
        diag.message = (
            f"unexplained: no registered variant brings the manifest's output closer to yours (mean error "
            f"{manifest_mean:.3g}, max {error_max:.3g}; {scope} searched)"
        )
    return diag


def _closest(fits: Sequence[VariantFit], plans: Mapping[str, _VariantPlan], manifest_mean: float) -> list[VariantFit]:
    """The fits that bring the manifest's output nearer to the candidate's, nearest (lowest mean |error|) first;
    a pair only when it beats both its singles by :data:`PAIR_GAIN`."""
    single = {f.variant: f.mean_abs_error for f in fits if not plans[f.variant].parts}

    def admitted(f: VariantFit) -> bool:
        if not _closer(f, manifest_mean):
            return False
        parts = [single.get(p) for p in plans[f.variant].parts]
        if not parts:
            return True
        known = [m for m in parts if m is not None]
        return (
            len(known) == len(parts)
            and f.mean_abs_error is not None
            and f.mean_abs_error < (1 - PAIR_GAIN) * min(known)
        )

    return sorted(
        (f for f in fits if admitted(f)),
        key=lambda f: (f.mean_abs_error, f.max_abs_error or math.inf, f.variant.count(" + "), f.variant),
    )


def _g(v: float | None) -> str:
    return "-" if v is None else f"{v:.3g}"


def _search_pairs(
    singles: Sequence[_VariantPlan],
    fits: list[VariantFit],
    plans: dict[str, _VariantPlan],
    ctx: PitfallContext,
    probe: Sequence[Differing],
    expected: tuple[int, ...],
    memos: dict[str, _SharedPrefixes],
    manifest_mean: float,
    diag: Diagnosis,
    seen: set[tuple[str, ...]],
) -> list[VariantFit]:
    """Compose the pool with every other single (see the module docstring) -> all fits, best first."""
    pool: list[_VariantPlan] = []
    for f in fits:  # best first: each pitfall once, at its best degree, if it brings the output closer
        p = plans[f.variant]
        if _closer(f, manifest_mean) and all(q.pitfall != p.pitfall for q in pool):
            pool.append(p)
        if len(pool) == PAIR_POOL:
            break
    diag.pair_pool = [p.name for p in pool]
    if not pool:
        return fits
    pairs = compose(singles, pool, ctx, seen)
    diag.pairs = len(pairs)
    plans.update({p.name: p for p in pairs})
    on_worst = _residuals(pairs, probe[:1], expected, memos)
    ranked = _fits(pairs, on_worst)
    n_rest = len(probe) - 1
    if n_rest:  # the finalists, and any pair that would lead, also on the other searched samples
        seen_all: dict[str, Residual] = {}
        queue = [f.variant for f in ranked[:PAIR_FINALISTS] if f.max_abs_error is not None]
        while queue:
            more = _residuals([plans[n] for n in queue], probe[1:], expected)
            seen_all.update({n: _combined(on_worst[n], more[n], n_rest) for n in queue})
            ranked = _fits(pairs, {n: seen_all.get(n, on_worst[n]) for n in on_worst})
            lead = ranked[0] if ranked and ranked[0].max_abs_error is not None else None
            queue = [lead.variant] if lead is not None and lead.variant not in seen_all else []
        # a pair seen on the worst sample only is not comparable with the others: listed without its errors
        ranked = [
            f if f.variant in seen_all else f.model_copy(update={"max_abs_error": None, "mean_abs_error": None})
            for f in ranked
        ]
    return sorted(fits + ranked, key=_fit_key)


def hints(ref: np.ndarray, cand: np.ndarray, layout: str, tolerance: float, stds: Sequence[float] = ()) -> list[str]:
    """Explanations of ``cand - ref`` derived from the error's signature (one sample, same shape, ``layout`` HWC
    or CHW), the first that fits decides and no later one may contradict it: channels reversed, axes permuted,
    a reshape for a transpose, a per-channel constant offset or scale, an error confined to the padding band of a
    letterbox (or to the image inside it: the other hints then read that region only), an error that is an exact
    multiple of one step (a wrap-around: ``256 / std`` with ``stds``, the manifest's divide_std values), a spatial
    shift, a smoother or sharper image (only when the error follows the image's edges, :func:`_edge_correlation`:
    else it is named noise-like)."""
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
    band = _band(rc, cc, small)  # before the wrap-around: a border in another grey is also "0 or one step"
    if band is not None:
        text, inside = band
        if inside is None:
            return [text]
        out.append(text)
        rows, cols = inside
        rc, cc = rc[:, rows, cols], cc[:, rows, cols]
    wrap = _wrap(rc, cc, small, stds)
    if wrap is not None:
        return [*out, wrap]
    shift = _shift(rc, cc)
    if shift is not None:
        dy, dx = shift
        out.append(
            f"a spatial shift of {dy:+d} px (rows), {dx:+d} px (columns): a crop offset or size rounding "
            "(round vs floor)"
        )
    edges = _edge_correlation(rc, cc)
    ratio = _sharpness(cc) / max(_sharpness(rc), 1e-12)
    if abs(edges) < EDGE_CORRELATION:  # not where the image changes: no interpolation makes that
        if shift is None:
            out.append(
                f"the error does not follow the image's edges (correlation with its Laplacian {edges:+.2f}): noise, "
                "dithering or another JPEG decoder, not an interpolation or a geometry change"
            )
    elif ratio < 0.9 and edges < 0:
        out.append(
            f"the candidate is smoother (high-frequency energy x{ratio:.2f}): another interpolation "
            "(bilinear / area where bicubic is expected) or antialiasing on"
        )
    elif ratio > 1.1 and edges > 0:
        out.append(
            f"the candidate is sharper (high-frequency energy x{ratio:.2f}): nearest-neighbour, or antialiasing off"
        )
    return out


def _wrap(r: np.ndarray, c: np.ndarray, small: float, stds: Sequence[float]) -> str | None:
    """An error that is 0 on some values and one magnitude per channel on the others (what integer arithmetic
    that wraps around, then a division, leaves) -> the hint, or None."""
    d = c - r
    off = np.abs(d) > small
    if not off.any() or off.all():
        return None
    steps: list[float | None] = []
    for ch in range(d.shape[0]):
        v = np.abs(d[ch][off[ch]])
        if v.size == 0:
            steps.append(None)
            continue
        q = float(np.median(v))
        if np.max(np.abs(v - q)) > max(small, 1e-6 * q):
            return None
        steps.append(q)
    qs = [q for q in steps if q is not None]
    signs = {int(s) for s in np.unique(np.sign(d[off]))}
    sign = "+" if signs == {1} else "-" if signs == {-1} else "+-"
    share = float(off.mean())
    where = " where the manifest's value is negative" if bool(np.all(r[off] < 0)) else ""
    text = (
        f"the error is exactly {sign}{_fmt(np.array(qs)) if len(set(qs)) > 1 else f'{qs[0]:.4g}'} on "
        f"{share:.1%} of the values{where} and 0 elsewhere"
    )
    per_channel = list(stds) if len(stds) == len(steps) else [stds[0]] * len(steps) if len(stds) == 1 else []
    if per_channel and all(
        q is None or abs(q - 256 / s) <= max(small, 1e-6 * q) for q, s in zip(steps, per_channel, strict=True)
    ):
        std = f"{per_channel[0]:g}" if len(set(per_channel)) == 1 else _fmt(np.array(per_channel))
        return (
            f"{text}: 256/std (std {std}), an integer wrap-around (uint8 arithmetic modulo 256) before the division "
            "by the std: the mean subtracted (or the scale applied) on the bytes before the cast to float"
        )
    per = _fmt(256 / np.array(qs)) if len(set(qs)) > 1 else f"{256 / qs[0]:.4g}"
    return f"{text}: a wrap-around or a quantisation step (256 / the step = {per})"


def _bands(r: np.ndarray) -> tuple[int, int, int, int]:
    """(top, bottom, left, right) counts of the border rows / columns where ``r`` (CHW) holds one value per
    channel, the same as the other border lines: a letterbox's padding."""
    h, w = r.shape[1:]
    fill: np.ndarray | None = None

    def flat(line: np.ndarray) -> bool:
        nonlocal fill
        lo, hi = line.min(axis=1), line.max(axis=1)
        if not np.array_equal(lo, hi):
            return False
        if fill is None:
            fill = lo
        return bool(np.array_equal(lo, fill))

    def run(lines: list[np.ndarray]) -> int:
        n = 0
        for line in lines:
            if not flat(line):
                break
            n += 1
        return n

    top = run([r[:, i, :] for i in range(h)])
    bottom = run([r[:, h - 1 - i, :] for i in range(h - top)])
    left = run([r[:, :, j] for j in range(w)])
    right = run([r[:, :, w - 1 - j] for j in range(w - left)])
    return top, bottom, left, right


def _band(r: np.ndarray, c: np.ndarray, small: float) -> tuple[str, tuple[slice, slice] | None] | None:
    """An error confined to the padding band, or to the image inside it -> (hint, the inner region to read the
    other hints in, or None when the error is only in the band); None without a band or when the error is in
    both."""
    h, w = r.shape[1:]
    top, bottom, left, right = _bands(r)
    if (top + bottom == 0 and left + right == 0) or top + bottom >= h or left + right >= w:
        return None
    band = np.zeros((h, w), bool)
    band[:top], band[h - bottom :], band[:, :left], band[:, w - right :] = True, True, True, True
    err = np.any(np.abs(c - r) > small, axis=0)
    if not err.any():
        return None
    parts = []
    for axis, spans in (("rows", ((0, top), (h - bottom, h))), ("columns", ((0, left), (w - right, w)))):
        runs = [f"{lo}-{hi - 1}" for lo, hi in spans if hi > lo]
        if runs:
            parts.append(f"{axis} {' and '.join(runs)}")
    where = "; ".join(parts)
    if not (err & ~band).any():
        fill = r[:, band][:, 0]
        got = c[:, band]
        if np.max(got.max(axis=1) - got.min(axis=1)) <= small:
            yours = got[:, 0]
            return (
                f"the error is confined to the padding band ({where}): your border is {_fmt(yours)} where the "
                f"manifest's is {_fmt(fill)}: another letterbox fill value",
                None,
            )
        return (
            f"the error is confined to the padding band ({where}), where your values are not one border value: "
            "the padding is placed or sized differently",
            None,
        )
    if not (err & band).any():
        rows, cols = slice(top, h - bottom), slice(left, w - right)
        return (
            f"the padding band ({where}) matches; the error is confined to the image inside it: the border is "
            "right, the content differs (its decode, resampling or values)",
            (rows, cols),
        )
    return None


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


EDGE_CORRELATION = 0.1
"""Below this |correlation| of the error with the manifest image's Laplacian, the error is not an interpolation's
(smoothing correlates negatively, sharpening positively: -0.93 and +0.84 for Pillow bilinear and OpenCV bicubic
against Pillow bicubic on a texture; additive noise 0.00)."""


def _edge_correlation(r: np.ndarray, c: np.ndarray) -> float:
    """Pearson correlation of ``c - r`` with the discrete Laplacian of ``r`` (CHW, interior pixels); 0 when either
    is constant."""
    lap = 4 * r[:, 1:-1, 1:-1] - r[:, :-2, 1:-1] - r[:, 2:, 1:-1] - r[:, 1:-1, :-2] - r[:, 1:-1, 2:]
    d = (c - r)[:, 1:-1, 1:-1]
    if d.size < 2 or float(d.std()) == 0.0 or float(lap.std()) == 0.0:
        return 0.0
    return float(np.corrcoef(d.reshape(-1), lap.reshape(-1))[0, 1])


def _sharpness(x: np.ndarray) -> float:
    """Mean squared discrete Laplacian over the spatial axes of a CHW array."""
    lap = 4 * x[:, 1:-1, 1:-1] - x[:, :-2, 1:-1] - x[:, 2:, 1:-1] - x[:, 1:-1, :-2] - x[:, 1:-1, 2:]
    return float(np.mean(lap * lap))
