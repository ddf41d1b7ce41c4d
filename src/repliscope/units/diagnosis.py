"""Which simple transform best explains how observed boxes differ from their reference boxes.

Each candidate maps a reference box ``r`` (xyxy, source pixels) to where a pipeline bug would put it, is fitted
to the pairs (least squares / medians / exact counting), and scored by its residual: per pair the RMS of the
coordinate errors divided by the reference box's (w, h, w, h), then the median over pairs. Box candidates:
``none``; ``shift_relative`` (tx, ty as fractions of the box size: medians); ``shift_px`` (medians, pixels);
``scale`` (sx, sy about the image origin, least squares: e.g. the wrong side used to denormalise);
``box_size`` (w, h scaled about the centre: exp of the median log ratios); format swaps ``xywh_as_xyxy``,
``xyxy_as_xywh``, ``yxyx_as_xyxy``, ``cxcywh_as_xyxy`` (the model's format read as another one; no parameter);
``swapped_sides`` (normalised x denormalised by H and y by W; needs the image sizes); ``letterbox_not_undone``
(boxes left in the letterboxed input space: ``r * s + pad`` with ``s = min(S/H, S/W)``, position centre or
top_left; S is given or fitted by least squares; needs the image sizes); ``letterbox_padding_kept`` (the scale
undone but not a centred letterbox's padding: ``r + ((max(H, W) - W) / 2, (max(H, W) - H) / 2)`` in source
pixels, for a square input of any size; the padding exact or floored, the better one). Class candidate: ``class_offset``
(the most frequent predicted - reference class difference k != 0, by exact counting).

The winner is the box candidate with the smallest residual when it removes at least
:data:`MIN_IMPROVEMENT` of the ``none`` residual; among candidates that leave at most :data:`NEAR` of it, the
one that reproduces the most pairs; ``explains`` = 1 - residual / none's residual, and
``exact`` = the share of pairs it maps to within 1 % of the box size.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from repliscope.units.matching import Pair

MIN_IMPROVEMENT = 0.5
NEAR = 0.05
EXACT = 0.01


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Candidate(_Model):
    name: str
    kind: Literal["box", "class"]
    params: dict[str, float | str]
    residual: float
    """Box: median normalised RMS coordinate error; class: share of pairs the offset does not explain."""
    exact: float
    """Share of pairs the transform reproduces (box: within 1 % of the box size; class: equal class)."""


class Diagnosis(_Model):
    pairing: str
    n_pairs: int
    candidates: list[Candidate]
    box: Candidate | None
    box_explains: float
    classes: Candidate | None
    summary: list[str]


Transform = Callable[[np.ndarray], np.ndarray]


def _residuals(obs: np.ndarray, pred: np.ndarray, ref: np.ndarray) -> np.ndarray:
    w = np.maximum(ref[:, 2] - ref[:, 0], 1e-9)
    h = np.maximum(ref[:, 3] - ref[:, 1], 1e-9)
    scale = np.stack([w, h, w, h], axis=1)
    return np.sqrt(np.mean(((obs - pred) / scale) ** 2, axis=1))


def _box_candidates(
    ref: np.ndarray, obs: np.ndarray, sizes: np.ndarray | None, input_size: tuple[int, int] | None
) -> list[tuple[str, dict[str, float | str], np.ndarray]]:
    """[(name, params, mapped reference boxes)]."""
    w, h = ref[:, 2] - ref[:, 0], ref[:, 3] - ref[:, 1]
    cx, cy = (ref[:, 0] + ref[:, 2]) / 2, (ref[:, 1] + ref[:, 3]) / 2
    ow, oh = obs[:, 2] - obs[:, 0], obs[:, 3] - obs[:, 1]
    ocx, ocy = (obs[:, 0] + obs[:, 2]) / 2, (obs[:, 1] + obs[:, 3]) / 2
    out: list[tuple[str, dict[str, float | str], np.ndarray]] = [("none", {}, ref.copy())]
    with np.errstate(divide="ignore", invalid="ignore"):
        tx, ty = float(np.nanmedian((ocx - cx) / w)), float(np.nanmedian((ocy - cy) / h))
        out.append(("shift_relative", {"tx": tx, "ty": ty}, ref + np.stack([tx * w, ty * h, tx * w, ty * h], axis=1)))
        px, py = float(np.median(ocx - cx)), float(np.median(ocy - cy))
        out.append(("shift_px", {"tx": px, "ty": py}, ref + np.array([px, py, px, py])))
        xs, ys = ref[:, [0, 2]], ref[:, [1, 3]]
        sx = float((obs[:, [0, 2]] * xs).sum() / max((xs * xs).sum(), 1e-12))
        sy = float((obs[:, [1, 3]] * ys).sum() / max((ys * ys).sum(), 1e-12))
        out.append(("scale", {"sx": sx, "sy": sy}, ref * np.array([sx, sy, sx, sy])))
        kw = float(np.exp(np.nanmedian(np.log(ow / w))))
        kh = float(np.exp(np.nanmedian(np.log(oh / h))))
        out.append(
            (
                "box_size",
                {"sw": kw, "sh": kh},
                np.stack([cx - kw * w / 2, cy - kh * h / 2, cx + kw * w / 2, cy + kh * h / 2], axis=1),
            )
        )
    out += [
        ("xywh_as_xyxy", {}, np.stack([ref[:, 0], ref[:, 1], w, h], axis=1)),
        ("xyxy_as_xywh", {}, np.stack([ref[:, 0], ref[:, 1], ref[:, 0] + ref[:, 2], ref[:, 1] + ref[:, 3]], axis=1)),
        ("yxyx_as_xyxy", {}, ref[:, [1, 0, 3, 2]]),
        ("cxcywh_as_xyxy", {}, np.stack([cx, cy, w, h], axis=1)),
    ]
    if sizes is not None:
        hh, ww = sizes[:, 0], sizes[:, 1]
        out.append(("swapped_sides", {}, ref * np.stack([hh / ww, ww / hh, hh / ww, ww / hh], axis=1)))
        out += [_letterbox(ref, obs, hh, ww, position, input_size) for position in ("centre", "top_left")]
        side = np.maximum(hh, ww)  # a centred letterbox's padding in source pixels, whatever the input size
        for rounding, fn in (("exact", lambda v: v), ("floor", np.floor)):  # implementations truncate it too
            px, py = fn((side - ww) / 2), fn((side - hh) / 2)
            out.append(("letterbox_padding_kept", {"padding": rounding}, ref + np.stack([px, py, px, py], axis=1)))
    return out


def _letterbox(
    ref: np.ndarray, obs: np.ndarray, hh: np.ndarray, ww: np.ndarray, position: str, input_size: tuple[int, int] | None
) -> tuple[str, dict[str, float | str], np.ndarray]:
    """Boxes in a letterboxed S_h x S_w input: ``r * s + pad``; a square S is fitted when not given."""

    def mapped(s_h: float, s_w: float) -> np.ndarray:
        s = np.minimum(s_h / hh, s_w / ww)
        pad_x = (s_w - ww * s) / 2 if position == "centre" else np.zeros_like(s)
        pad_y = (s_h - hh * s) / 2 if position == "centre" else np.zeros_like(s)
        return ref * s[:, None] + np.stack([pad_x, pad_y, pad_x, pad_y], axis=1)

    if input_size is not None:
        return (
            "letterbox_not_undone",
            {"position": position, "input_h": float(input_size[0]), "input_w": float(input_size[1])},
            mapped(*input_size),
        )
    unit = mapped(1.0, 1.0)  # linear in a square S: observed = S * unit
    size = float((obs * unit).sum() / max((unit * unit).sum(), 1e-12))
    return "letterbox_not_undone", {"position": position, "input_h": size, "input_w": size}, mapped(size, size)


def diagnose(pairs: Sequence[Pair], *, input_size: tuple[int, int] | None = None, pairing: str = "given") -> Diagnosis:
    """Score every candidate on ``pairs`` (observed ``box`` vs ``ref_box``); the image sizes come from the
    pairs' ``size_hw`` (the size-dependent candidates are skipped when one is missing)."""
    if not pairs:
        return Diagnosis(
            pairing=pairing,
            n_pairs=0,
            candidates=[],
            box=None,
            box_explains=0.0,
            classes=None,
            summary=["no paired detections: nothing to diagnose"],
        )
    ref = np.array([p.ref_box for p in pairs], float)
    obs = np.array([p.box for p in pairs], float)
    sizes = np.array([p.size_hw for p in pairs], float) if all(p.size_hw for p in pairs) else None
    cands = []
    for name, params, mapped in _box_candidates(ref, obs, sizes, input_size):
        res = _residuals(obs, mapped, ref)
        res = np.where(np.isfinite(res), res, np.inf)
        cands.append(
            Candidate(
                name=name, kind="box", params=params, residual=float(np.median(res)), exact=float(np.mean(res <= EXACT))
            )
        )
    best_by_name: dict[str, Candidate] = {}
    for c in cands:  # one letterbox position / padding rounding: the better one
        if c.name not in best_by_name or c.residual < best_by_name[c.name].residual:
            best_by_name[c.name] = c
    cands = sorted(best_by_name.values(), key=lambda c: (c.residual, -c.exact))
    none = best_by_name["none"]
    # near-complete explanations (residual within NEAR of none's) are told apart by how many pairs they reproduce:
    # a fitted shift can match a per-image padding's median while the padding reproduces more pairs
    near = [c for c in cands if c.name != "none" and c.residual <= NEAR * none.residual]
    top = max(near, key=lambda c: (c.exact, -c.residual)) if near and none.residual > 0 else cands[0]
    improves = none.residual > 0 and top.name != "none" and top.residual <= (1 - MIN_IMPROVEMENT) * none.residual
    explains = 1 - top.residual / none.residual if improves else 0.0
    diffs = Counter(p.class_id - p.ref_class for p in pairs)
    same = diffs.get(0, 0)
    k, count = max(((d, c) for d, c in diffs.items() if d != 0), key=lambda t: (t[1], -abs(t[0])), default=(0, 0))
    class_cand = Candidate(
        name="class_offset",
        kind="class",
        params={"k": float(k)},
        residual=1 - count / len(pairs),
        exact=count / len(pairs),
    )
    summary = []
    if improves:
        shown = ", ".join(f"{n}={v:.4g}" if isinstance(v, float) else f"{n}={v}" for n, v in top.params.items())
        summary.append(
            f"boxes: {top.name}{f' ({shown})' if shown else ''} explains {explains:.0%} of the "
            f"box error (residual {top.residual:.4f} vs {none.residual:.4f} unexplained; "
            f"{top.exact:.0%} of {len(pairs)} pairs reproduced within 1 %)"
        )
    elif none.exact == 1:
        summary.append(f"boxes: nothing to explain (all {len(pairs)} pairs agree within 1 % of the box size)")
    else:
        summary.append(
            f"boxes: no simple transform explains the differences (residual {none.residual:.4f}; "
            f"best {top.name} {top.residual:.4f})"
        )
    class_wins = count > same
    if class_wins:
        summary.append(
            f"classes: predicted = reference {k:+d} for {count} of {len(pairs)} pairs "
            f"({count / len(pairs):.0%}; {same} equal)"
        )
    else:
        summary.append(
            f"classes: {same} of {len(pairs)} pairs agree"
            + (f"; the most frequent offset {k:+d} covers {count}" if count else "")
        )
    return Diagnosis(
        pairing=pairing,
        n_pairs=len(pairs),
        candidates=[*cands, class_cand],
        box=top if improves else None,
        box_explains=explains,
        classes=class_cand if class_wins else None,
        summary=summary,
    )
