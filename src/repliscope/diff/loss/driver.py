"""The loss diff: the same :class:`~repliscope.diff.loss.contract.LossInputs` through an original loss and a
candidate, compared value by value, gradient by gradient and match by match, with dtype-aware tolerances
(:mod:`repliscope.diff.tolerance`'s formula), the first divergent quantity named and the worst images listed.

Tolerances (float32: the dtype of the outputs; ``k`` = :data:`repliscope.diff.tolerance.DEFAULT_K` unless given):

- a value (the total, each component): ``k * eps * sqrt(n) * max(|original|, 1)`` with ``n`` the output
  elements the value sums over (one layer's for ``yolo_16/box``, every output's for the total): the rounding of
  a float32 sum of ``n`` terms;
- a gradient: :func:`~repliscope.diff.tolerance.compare_arrays` with ``k * eps * scale``, ``scale`` the
  largest magnitude the loss computes the gradient from (``max(|original gradient|, |output|)`` and, for yolo,
  the grid size: Darknet's ``x*W - i`` is a float32 of that magnitude);
- a matching cost: ``k * eps * max(|cost|, 1)``; the pairs themselves must be the same sets.

The candidate's result is checked before anything is compared (:func:`check_result`): one clear error naming the
candidate and what is wrong (an exception, a non-finite or non-scalar total, a missing or misshapen gradient).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from repliscope.diff.loss.contract import LossFunction, LossInputs, LossResult, LossSpec
from repliscope.diff.loss.result import (
    GradientRow,
    ImageRow,
    LossDiffResult,
    MatchingRow,
    ValueRow,
)
from repliscope.diff.tolerance import DEFAULT_K, compare_arrays, dtype_eps, output_scale
from repliscope.errors import RepliscopeError

EPS32 = dtype_eps(np.dtype(np.float32))
WORST = 5
"""Images listed as the worst."""


def _finite_scalar(value: Any) -> float | None:
    try:
        if np.ndim(value) != 0:
            return None
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out


def check_result(result: Any, inputs: LossInputs, who: str) -> LossResult:
    """``result`` checked against the contract for ``inputs``; RepliscopeError naming ``who`` and the fault."""
    if not isinstance(result, LossResult):
        raise RepliscopeError(f"{who}: returned {type(result).__name__}, not a LossResult")
    total = _finite_scalar(result.total)
    if total is None:
        raise RepliscopeError(f"{who}: total is not a scalar (shape {tuple(np.shape(result.total))})")
    if not math.isfinite(total):
        raise RepliscopeError(f"{who}: total is {total} (not finite)")
    if not isinstance(result.components, dict):
        raise RepliscopeError(f"{who}: components is {type(result.components).__name__}, not a dict of floats")
    for name, value in result.components.items():
        v = _finite_scalar(value)
        if v is None or not math.isfinite(v):
            raise RepliscopeError(f"{who}: component '{name}' is {value!r} (not a finite scalar)")
    if not isinstance(result.gradients, dict):
        raise RepliscopeError(f"{who}: gradients is {type(result.gradients).__name__}, not a dict of arrays")
    for name, out in inputs.outputs.items():
        if name not in result.gradients:
            raise RepliscopeError(
                f"{who}: no gradient for output '{name}' (gradients: {', '.join(result.gradients) or 'none'})"
            )
        grad = np.asarray(result.gradients[name])
        if grad.shape != out.shape:
            raise RepliscopeError(
                f"{who}: the gradient of '{name}' has shape {tuple(grad.shape)}, the output {tuple(out.shape)}"
            )
        if not np.isfinite(grad).all():
            raise RepliscopeError(
                f"{who}: the gradient of '{name}' has {int((~np.isfinite(grad)).sum())} non-finite values"
            )
    if result.per_image is not None and len(result.per_image) != len(inputs.targets):
        raise RepliscopeError(f"{who}: per_image has {len(result.per_image)} values for {len(inputs.targets)} images")
    if result.matching is not None and len(result.matching) != len(inputs.targets):
        raise RepliscopeError(f"{who}: matching has {len(result.matching)} images, the inputs {len(inputs.targets)}")
    return result


def call_loss(fn: Callable[[LossInputs], Any], inputs: LossInputs, who: str) -> LossResult:
    """``fn(inputs)`` checked; whatever it raises is one RepliscopeError line naming ``who``."""
    try:
        result = fn(inputs)
    except RepliscopeError as exc:
        raise RepliscopeError(f"{who}: {exc}") from None
    except Exception as exc:  # the loss is someone's code: anything it raises is reported, in one line
        first = str(exc).splitlines()[0] if str(exc) else ""
        raise RepliscopeError(f"{who} raised {type(exc).__name__}: {first}") from None
    return check_result(result, inputs, who)


def _value_row(name: str, ref: float | None, cand: float | None, n: int, k: float) -> ValueRow:
    tol = k * EPS32 * math.sqrt(max(n, 1)) * max(abs(ref or 0.0), 1.0)
    if ref is None or cand is None:
        missing = "the candidate" if cand is None else "the original"
        return ValueRow(
            name=name,
            original=ref,
            candidate=cand,
            abs_error=None,
            tolerance=tol,
            passed=False,
            note=f"missing in {missing}",
        )
    err = abs(float(cand) - float(ref))
    return ValueRow(name=name, original=ref, candidate=cand, abs_error=err, tolerance=tol, passed=err <= tol)


def _entry_words(inputs: LossInputs, output: str, index: tuple[int, ...]) -> str:
    if inputs.family != "yolo" or len(index) != 4:
        return ""
    classes = int(inputs.config.get("classes", 0))
    n, c, j, i = index
    a, e = divmod(c, 5 + classes)
    entry = ("x", "y", "w", "h", "objectness")[e] if e < 5 else f"class {e - 5}"
    return f"image {n}, anchor slot {a}, {entry}, cell (y {j}, x {i})"


def _gradient_row(inputs: LossInputs, name: str, ref: np.ndarray, cand: np.ndarray, k: float) -> GradientRow:
    out = inputs.outputs[name]
    scale = max(output_scale(ref), output_scale(out))
    if inputs.family == "yolo" and out.ndim == 4:
        scale = max(scale, float(max(out.shape[2:])))
    tol = k * EPS32 * scale
    stats = compare_arrays(ref, cand.astype(np.float32, copy=False), tol, scale=scale)
    diff = np.abs(cand.astype(np.float64) - ref.astype(np.float64))
    diff[~np.isfinite(diff)] = np.inf
    at = tuple(int(v) for v in np.unravel_index(int(np.argmax(diff)), diff.shape)) if diff.size else ()
    by_entry: dict[str, float] = {}
    classes = int(inputs.config.get("classes", -1)) if inputs.family == "yolo" else -1
    if classes >= 0 and diff.ndim == 4 and diff.shape[1] % (5 + classes) == 0 and diff.size:
        per = diff.reshape(diff.shape[0], -1, 5 + classes, *diff.shape[2:])
        for e, entry in enumerate(("x", "y", "w", "h", "objectness")):
            by_entry[entry] = float(per[:, :, e].max())
        if classes:
            by_entry["class"] = float(per[:, :, 5:].max())
    return GradientRow(
        output=name,
        shape=list(ref.shape),
        max_abs=stats.max_abs,
        mean_abs=stats.mean_abs,
        max_rel=stats.max_rel,
        ulp=stats.ulp,
        tolerance=tol,
        passed=stats.passed,
        nonfinite=stats.nonfinite,
        worst_at=list(at),
        worst_entry=_entry_words(inputs, name, at),
        by_entry=by_entry,
        entries_over=[k for k, v in by_entry.items() if v > tol],
        original_value=float(ref[at]) if at else 0.0,
        candidate_value=float(cand[at]) if at else 0.0,
    )


def _matching_rows(inputs: LossInputs, ref: LossResult, cand: LossResult, k: float) -> list[MatchingRow]:
    assert ref.matching is not None and cand.matching is not None
    rows = []
    for target, mine, theirs in zip(inputs.targets, ref.matching, cand.matching, strict=True):
        a = {(int(p), int(t)): float(c) for p, t, c in mine}
        b = {(int(p), int(t)): float(c) for p, t, c in theirs}
        common = a.keys() & b.keys()
        cost_err = max((abs(a[key] - b[key]) for key in common), default=0.0)
        tol = k * EPS32 * max([1.0, *(abs(a[key]) for key in common)])
        only_a = sorted((p, t, a[(p, t)]) for p, t in a.keys() - b.keys())
        only_b = sorted((p, t, b[(p, t)]) for p, t in b.keys() - a.keys())
        rows.append(
            MatchingRow(
                image=target.image_id,
                pairs=len(a),
                only_original=only_a,
                only_candidate=only_b,
                cost_max_abs=cost_err,
                tolerance=tol,
                passed=not only_a and not only_b and cost_err <= tol,
            )
        )
    return rows


def _worst_images(inputs: LossInputs, ref: LossResult, cand: LossResult) -> list[ImageRow]:
    rows = []
    for n, target in enumerate(inputs.targets):
        g = max(
            (
                float(np.max(np.abs(cand.gradients[k][n].astype(np.float64) - ref.gradients[k][n])))
                for k in ref.gradients
            ),
            default=0.0,
        )
        r = float(ref.per_image[n]) if ref.per_image is not None else None
        c = float(cand.per_image[n]) if cand.per_image is not None else None
        err = abs(r - c) if r is not None and c is not None else None
        rows.append(ImageRow(image=target.image_id, original=r, candidate=c, abs_error=err, gradient_max_abs=g))
    rows.sort(key=lambda row: (row.gradient_max_abs, row.abs_error or 0.0), reverse=True)
    return rows[:WORST]


def _elements(inputs: LossInputs, component: str) -> int:
    layer = component.split("/", 1)[0]
    if "/" in component and layer in inputs.outputs:
        return int(inputs.outputs[layer].size)
    return sum(int(v.size) for v in inputs.outputs.values())


def compare(
    inputs: LossInputs,
    spec: LossSpec,
    original: LossResult,
    candidate_name: str,
    candidate: LossResult,
    *,
    k: float = DEFAULT_K,
    source: str,
    manifest: str = "",
    dataset: str = "",
) -> LossDiffResult:
    """Compare two checked results on the same ``inputs``."""
    all_n = sum(int(v.size) for v in inputs.outputs.values())
    total = _value_row("total", float(original.total), float(candidate.total), all_n, k)
    names = list(original.components) + [c for c in candidate.components if c not in original.components]
    components = []
    for name in names:
        ref = original.components.get(name)
        cand = candidate.components.get(name)
        row = _value_row(
            name,
            None if ref is None else float(ref),
            None if cand is None else float(cand),
            _elements(inputs, name),
            k,
        )
        if ref is None:
            row.note, row.passed = "only in the candidate (not compared)", True
        components.append(row)
    gradients = [
        _gradient_row(inputs, name, np.asarray(original.gradients[name]), np.asarray(candidate.gradients[name]), k)
        for name in inputs.outputs
    ]
    matching = None
    matching_note = ""
    if original.matching is not None and candidate.matching is not None:
        matching = _matching_rows(inputs, original, candidate, k)
    else:
        side = "the original" if original.matching is None else "the candidate"
        matching_note = f"matching not compared: {side} reports none"
    first = next((c.name for c in components if not c.passed), None)
    if first is None:
        first = next(
            (
                f"gradient of {g.output}" + (f" ({', '.join(g.entries_over)})" if g.entries_over else "")
                for g in gradients
                if not g.passed
            ),
            None,
        )
    if first is None and matching is not None:
        first = next((f"matching of image {m.image}" for m in matching if not m.passed), None)
    if first is None and not total.passed:
        first = "total"
    return LossDiffResult(
        reference=spec.name,
        candidate=candidate_name,
        origin=spec.origin,
        family=inputs.family,
        manifest=manifest,
        dataset=dataset,
        source=source,
        samples=len(inputs.targets),
        passed=first is None,
        first_divergent=first,
        k=k,
        total=total,
        components=components,
        gradients=gradients,
        matching=matching,
        matching_note=matching_note,
        worst_images=_worst_images(inputs, original, candidate),
        differences=list(spec.differences),
        original_notes=list(original.notes),
        candidate_notes=list(candidate.notes),
    )


def run_loss_diff(
    inputs: LossInputs,
    spec: LossSpec,
    original: LossFunction,
    candidate_name: str,
    candidate: LossFunction,
    *,
    k: float = DEFAULT_K,
    source: str,
    manifest: str = "",
    dataset: str = "",
    diagnose: bool = True,
) -> LossDiffResult:
    """Run both losses on ``inputs`` and compare; a failing candidate names a loss pitfall when one explains it."""
    import time

    if spec.family != inputs.family:
        raise RepliscopeError(f"the original '{spec.name}' is a {spec.family} loss; the inputs are {inputs.family}")
    t0 = time.perf_counter()
    ref = call_loss(original, inputs, f"the original loss '{spec.name}'")
    t1 = time.perf_counter()
    cand = call_loss(candidate, inputs, f"--loss {candidate_name}")
    t2 = time.perf_counter()
    result = compare(inputs, spec, ref, candidate_name, cand, k=k, source=source, manifest=manifest, dataset=dataset)
    result.seconds = {"original": round(t1 - t0, 4), "candidate": round(t2 - t1, 4)}
    if diagnose:
        from repliscope.diff.loss.pitfalls import diagnose_loss

        result.diagnosis = diagnose_loss(inputs, ref, cand, result)
    return result
