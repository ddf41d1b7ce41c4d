"""Loss pitfalls: the classic mistakes of a re-implemented loss, each ONE named change to an original's form, and
the diagnosis that names the one a failing candidate makes (as the pipeline diff names a pre-processing pitfall).

A :class:`LossPitfall` belongs to one registered original (``original``: ``darknet_yolo``'s are variants of
:class:`~repliscope.diff.loss.yolo_form.YoloForm`); its ``variants`` are the concrete forms of the mistake (a
focal loss's alpha and gamma, a normaliser's divisor) and ``values`` evaluates the loss with one of them on the
same inputs. Users and other originals register theirs in :data:`LOSS_PITFALLS` (an original's own in
``repliscope/diff/loss/originals/<name>_pitfalls.py``, found and imported on the registry's first read).

Diagnosis (values, not gradients: a form's gradient follows from its values, and the values of every variant are
cheap): every variant of the original's pitfalls is evaluated; its residual is the largest
``|variant - candidate| / max(|candidate|, 1)`` over the total and the components both have. The closest variant
*explains* the candidate when its residual is at most ``max(EXPLAIN_FLOOR, EXPLAIN_FRACTION * the candidate's own
relative error against the original)``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from repliscope.diff.loss.contract import LossInputs, LossResult
from repliscope.diff.loss.result import LossDiagnosis, LossDiffResult, LossFit
from repliscope.diff.loss.yolo_form import DARKNET, YoloForm, describe_form, form_values
from repliscope.registry import Registry

EXPLAIN_FRACTION = 0.01
EXPLAIN_FLOOR = 1e-6


@dataclass(frozen=True)
class LossPitfall:
    """One classic loss mistake: ``variants`` (change in words, parameter) evaluated by ``values``."""

    name: str
    original: str
    description: str
    variants: tuple[tuple[str, Any], ...]
    values: Callable[[LossInputs, Any], Mapping[str, float]]


LOSS_PITFALLS: Registry[LossPitfall] = Registry(
    "loss pitfall", providers=("repliscope.diff.loss.originals.maskformer_pitfalls",)
)


def _yolo_values(inputs: LossInputs, form: YoloForm) -> dict[str, float]:
    comps = form_values(inputs, form).components
    return {"total": sum(comps.values()), **comps}


def _yolo(name: str, description: str, *forms: YoloForm) -> None:
    LOSS_PITFALLS.add(
        name,
        LossPitfall(name, "darknet_yolo", description, tuple((describe_form(f), f) for f in forms), _yolo_values),
    )


_yolo(
    "sum_vs_mean",
    "each loss term averaged over its elements (torch's default reduction='mean') where Darknet sums",
    replace(DARKNET, reduction="mean"),
)
_yolo(
    "normaliser",
    "the loss divided by the batch's images, truths (boxes) or predictions (anchor slots); Darknet divides by none",
    replace(DARKNET, normaliser="image"),
    replace(DARKNET, normaliser="box"),
    replace(DARKNET, normaliser="anchor"),
)
_yolo(
    "scaled_sigmoid",
    "x, y through a scaled sigmoid k*sigmoid - (k-1)/2 (later Darknets' scale_x_y) where YOLOv3 has the plain one",
    *(replace(DARKNET, scale_x_y=k) for k in (1.05, 1.1, 1.2)),
)
_yolo(
    "iou_box_loss",
    "the box loss as 1 - IoU, GIoU or CIoU of the decoded boxes instead of YOLOv3's (2 - w*h)-scaled BCE/MSE on "
    "(tx, ty, tw, th)",
    replace(DARKNET, box="iou"),
    replace(DARKNET, box="giou"),
    replace(DARKNET, box="ciou"),
)
_yolo(
    "ignore_thresh_not_applied",
    "every unassigned prediction gets the no-object loss, also those whose best IoU exceeds ignore_thresh",
    replace(DARKNET, ignore=False),
)
_yolo(
    "objectness_target_iou",
    "the objectness target of an assigned prediction is its IoU with the truth instead of 1",
    replace(DARKNET, objectness_target="iou"),
)
_yolo(
    "class_softmax_ce",
    "the class loss as softmax cross-entropy instead of YOLOv3's independent logistic (BCE) per class",
    replace(DARKNET, class_loss="softmax_ce"),
)
_yolo(
    "focal_class_loss",
    "a focal class loss alpha_t (1 - p_t)^gamma BCE instead of plain BCE",
    *(replace(DARKNET, focal=fg) for fg in ((0.25, 2.0), (0.5, 2.0), (0.25, 1.5), (1.0, 2.0))),
)
_yolo(
    "noobj_weight",
    "the no-object loss weighted (YOLOv1's lambda_noobj 0.5 and the like) where Darknet's YOLOv3 weights it 1",
    *(replace(DARKNET, noobj_weight=w) for w in (0.5, 0.1, 0.05)),
)


def _values(result: LossResult) -> dict[str, float]:
    return {"total": float(result.total), **{k: float(v) for k, v in result.components.items()}}


def _residual(a: Mapping[str, float], b: Mapping[str, float]) -> float | None:
    common = a.keys() & b.keys()
    if not common:
        return None
    return max(abs(a[k] - b[k]) / max(abs(b[k]), 1.0) for k in common)


def diagnose_loss(
    inputs: LossInputs, original: LossResult, candidate: LossResult, result: LossDiffResult
) -> LossDiagnosis:
    """Name the registered pitfall of ``result.reference`` that turns the original's values into the candidate's."""
    if result.passed:
        return LossDiagnosis(verdict="match", message="the candidate reproduces the original within tolerance")
    pitfalls = [
        LOSS_PITFALLS.get(n) for n in LOSS_PITFALLS.names() if LOSS_PITFALLS.get(n).original == result.reference
    ]
    if not pitfalls:
        return LossDiagnosis(
            verdict="not_available",
            message=f"no loss pitfall is registered for the original '{result.reference}'",
        )
    cand = _values(candidate)
    orig = _values(original)
    own = _residual(orig, cand) or 0.0
    if own <= EXPLAIN_FLOOR:
        return LossDiagnosis(
            verdict="unexplained",
            residual=own,
            message="the candidate's values are the original's: the difference is in the gradients or the matching "
            "(a mistake that keeps the values: a hand-written gradient, a detached term, another assignment)",
        )
    fits: list[LossFit] = []
    invisible: list[str] = []
    for pitfall in pitfalls:
        for change, variant in pitfall.variants:
            try:
                values = dict(pitfall.values(inputs, variant))
            except (ValueError, ArithmeticError):
                fits.append(LossFit(pitfall=pitfall.name, change=change, max_rel_error=None))
                continue
            if (_residual(orig, values) or 0.0) <= EXPLAIN_FLOOR:
                invisible.append(f"{pitfall.name} ({change})")
                continue
            fits.append(LossFit(pitfall=pitfall.name, change=change, max_rel_error=_residual(values, cand)))
    fits.sort(key=lambda f: (f.max_rel_error is None, f.max_rel_error if f.max_rel_error is not None else 0.0))
    best = fits[0] if fits else None
    bound = max(EXPLAIN_FLOOR, EXPLAIN_FRACTION * own)
    unseen = f"; not visible on these inputs (same values as the original): {', '.join(invisible)}" if invisible else ""
    if best is not None and best.max_rel_error is not None and best.max_rel_error <= bound:
        return LossDiagnosis(
            verdict="explained",
            pitfall=best.pitfall,
            change=best.change,
            residual=best.max_rel_error,
            candidates=fits[:10],
            message=f"the candidate's values are the original's with one mistake: {best.pitfall} ({best.change})"
            + unseen,
        )
    closest = f"; closest: {best.pitfall} ({best.change}), residual {best.max_rel_error:.3g}" if best else ""
    return LossDiagnosis(
        verdict="unexplained",
        residual=best.max_rel_error if best else None,
        candidates=fits[:10],
        message=f"no registered pitfall of '{result.reference}' explains the candidate (its relative error "
        f"{own:.3g}){closest}{unseen}",
    )
