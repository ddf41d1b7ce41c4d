"""The augmentation diff (``repliscope diff MANIFEST --augment CANDIDATE``): a training augmentation re-implemented
by a candidate, compared op by op with the original's own code.

Shared draws (default): per (image, seed) the pipeline draws every random parameter once (Darknet: replayed from
glibc's ``rand()`` after ``srand(seed)``, exactly what libdarknet's ``load_data_detection`` reads); each candidate
op gets the ORIGINAL's input of that op and the same parameters (golden mode), so an error is attributed to the op
that makes it; the first op over tolerance is named. Own draws (``--draws own``): the candidate draws its own
randomness (``augment(image, boxes, seed)``); over every (image, seed) what each op did to its own input (the
placed rectangle; the saturation and value scales; mirrored or not; the boxes' mean centre, size and count: one
value per augmentation, free of the earlier ops' draws) are compared with the original's by two-sample
Kolmogorov-Smirnov tests (Bonferroni-corrected); the first op whose distribution differs is named.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from repliscope.diff.augment.contract import AugmentCandidate, AugmentOp, AugmentPipeline, Drawn, checked_output
from repliscope.errors import RepliscopeError

ALPHA = 0.001
"""Family-wise significance of the own-draws comparison (after Bonferroni over every op and statistic)."""


PAD_GREYS = ((0.5, 0.5), (113 / 255, 114 / 255))
"""The canvas greys of the registered originals (lowest, highest): Darknet's 0.5; the Model Garden's 114, which
its bilinear resize of the padded image truncates to 113 in places (uint8 / 255)."""


def _pad(image: np.ndarray) -> np.ndarray:
    """(H, W) True where every channel is one of :data:`PAD_GREYS` (the same grey on all three)."""
    r, g, b = image[..., 0], image[..., 1], image[..., 2]
    grey = (r == g) & (g == b)
    return grey & np.any([(r >= np.float32(lo) - 1e-6) & (r <= np.float32(hi) + 1e-6) for lo, hi in PAD_GREYS], axis=0)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class WorstCase(_Model):
    sample: str
    seed: int
    max_abs_err: float
    params: dict[str, Any]


class OpResult(_Model):
    """One op over every (image, seed): how many outputs differ beyond ``tolerance`` and the worst ones."""

    name: str
    kind: str
    origin: str
    compared: int
    differing: int
    max_abs_err: float
    tolerance: float
    worst: list[WorstCase] = Field(default_factory=list)
    hint: str | None = None


class DistributionTest(_Model):
    op: str
    statistic: str
    original_mean: float
    candidate_mean: float
    ks: float
    p_value: float
    p_adjusted: float
    differs: bool


class AugmentDiffResult(_Model):
    """What ``--augment`` prints with ``--json`` (under ``augmentation_diff``) and stores (kind
    ``augmentation_diff``)."""

    kind: Literal["augmentation_diff"] = "augmentation_diff"
    manifest: str
    pipeline: dict[str, Any]
    candidate: str
    draws: Literal["shared", "own"]
    dataset: str
    samples: int
    seeds: list[int]
    ops: list[OpResult] = Field(default_factory=list)
    first_divergent: str | None = None
    distribution: list[DistributionTest] = Field(default_factory=list)
    alpha: float | None = None
    failed_samples: list[dict[str, str]] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    elapsed_s: float = 0.0

    @property
    def passed(self) -> bool:
        return self.first_divergent is None


@dataclass
class _Acc:
    n: int = 0
    bad: int = 0
    max: float = 0.0
    tol: float = 0.0
    worst: list[WorstCase] = field(default_factory=list)
    hint_err: float = -1.0
    hint: str | None = None


@dataclass
class Item:
    """A decoded sample: its id, the image (float32 (H, W, 3) RGB [0, 1]) and its label rows ((K, 5))."""

    sample: str
    image: np.ndarray
    boxes: np.ndarray


def _error(ref: np.ndarray, cand: np.ndarray) -> float:
    if ref.shape != cand.shape:
        return float("inf")
    return float(np.max(np.abs(ref.astype(np.float64) - cand.astype(np.float64)), initial=0.0))


def _hint(op: AugmentOp, ref: np.ndarray, cand: np.ndarray, inp: np.ndarray, params: dict[str, Any]) -> str | None:
    """A short cause for the worst differing output, when a simple one fits."""
    if op.kind == "boxes":
        if ref.shape != cand.shape:
            return f"{len(cand)} boxes where the original keeps {len(ref)} (the tiny-box filter or the 90 cap)"
        if len(ref) and np.allclose(np.sort(ref, axis=0), np.sort(cand, axis=0), atol=1e-6):
            return "the same boxes in another order (the drawn box_order was not applied)"
        if len(ref) and np.allclose(ref[:, 0], 1 - cand[:, 0], atol=1e-6):
            return "x mirrored relative to the original (the flip draw applied the other way)"
        return None
    if ref.shape == cand.shape:
        if np.allclose(ref, cand[:, ::-1], atol=1e-6):
            return "the output is the original's mirrored left-right"
        if op.name != "flip" and cand.shape == inp.shape and np.allclose(cand, inp, atol=1e-6):
            return "the candidate returned its input unchanged (the op was not applied)"
        diff = cand.astype(np.float64) - ref.astype(np.float64)
        frac = float(np.mean(np.abs(diff) > 1e-3))
        return f"{frac:.1%} of values differ by more than 1e-3 (mean difference {float(np.mean(diff)):+.4f})"
    return None


def diff_shared(
    pipeline: AugmentPipeline,
    candidate: AugmentCandidate,
    items: Sequence[Item],
    seeds: Sequence[int],
    on_step: Callable[[], None] | None = None,
) -> list[OpResult]:
    """Golden mode on shared draws: every candidate op on the original's input of that op."""
    missing = [op.name for op in pipeline.ops if op.name not in candidate.ops]
    if missing:
        raise RepliscopeError(
            f"--augment {candidate.spec}: --draws shared needs a callable per op; missing: {', '.join(missing)}"
        )
    stats = {op.name: _Acc() for op in pipeline.ops}
    for item in items:
        for seed in seeds:
            drawn: Drawn = pipeline.draw(item.image, item.boxes, seed, item.sample)
            image, boxes = drawn.image, drawn.boxes
            for op in pipeline.ops:
                params = dict(drawn.params[op.name])
                inp = image if op.kind == "image" else boxes
                ref = pipeline.reference_output(drawn, op, inp)
                try:
                    raw = candidate.ops[op.name](inp.copy(), **params)
                except Exception as exc:  # user code: one line naming the op
                    first = str(exc).splitlines()[0] if str(exc) else ""
                    raise RepliscopeError(
                        f"--augment {candidate.spec}: op '{op.name}' raised {type(exc).__name__}: {first}"
                    ) from None
                cand = checked_output(candidate.spec, op, raw, ref if op.kind == "image" else inp)
                err = _error(ref, cand)
                tol = pipeline.tolerance(op, item.image)
                s = stats[op.name]
                s.n += 1
                s.tol = max(s.tol, tol)
                s.max = max(s.max, err)
                if err > tol:
                    s.bad += 1
                    s.worst.append(WorstCase(sample=item.sample, seed=seed, max_abs_err=err, params=params))
                    if err > s.hint_err:
                        s.hint_err, s.hint = err, _hint(op, ref, cand, inp, params)
                if op.kind == "image":
                    image = ref
                else:
                    boxes = ref
            if on_step is not None:
                on_step()
    out = []
    for op in pipeline.ops:
        s = stats[op.name]
        out.append(
            OpResult(
                name=op.name,
                kind=op.kind,
                origin=op.origin,
                compared=s.n,
                differing=s.bad,
                max_abs_err=s.max,
                tolerance=s.tol,
                worst=sorted(s.worst, key=lambda w: -w.max_abs_err)[:5],
                hint=s.hint,
            )
        )
    return out


def _hsv_means(image: np.ndarray) -> tuple[float, float]:
    """Mean saturation and value (HSV) of an RGB image."""
    r, g, b = image[..., 0], image[..., 1], image[..., 2]
    mx = np.maximum(np.maximum(r, g), b)
    mn = np.minimum(np.minimum(r, g), b)
    with np.errstate(divide="ignore", invalid="ignore"):
        sat = np.where(mx > 0, (mx - mn) / mx, np.float32(0))
    return float(sat.mean(dtype=np.float64)), float(mx.mean(dtype=np.float64))


def _statistics(op: AugmentOp, value: np.ndarray, before: np.ndarray) -> dict[str, float]:
    """What ``op`` did to its input ``before``, as numbers with one value per augmentation (the op's own random
    effect, free of what the earlier ops drew): the placed rectangle and its aspect change (``place``), the
    saturation and value scales (``distort``), whether the image was mirrored (``flip``), the boxes' mean centre,
    size and count (box ops)."""
    if op.kind == "boxes":
        boxes = value.reshape(-1, 5).astype(np.float64)
        if not len(boxes):
            return {"count": 0.0}
        return {
            "mean_cx": float(boxes[:, 0].mean()),
            "mean_cy": float(boxes[:, 1].mean()),
            "mean_w": float(boxes[:, 2].mean()),
            "mean_h": float(boxes[:, 3].mean()),
            "count": float(len(boxes)),
        }
    if value.shape != before.shape:  # a placement: where the image landed on the canvas (off the pad's grey)
        placed = ~_pad(value)
        rows, cols = np.flatnonzero(placed.any(axis=1)), np.flatnonzero(placed.any(axis=0))
        h, w = placed.shape
        if not len(rows):
            return {"aspect_change": 0.0, "placed_w": 0.0, "placed_h": 0.0, "placed_cx": 0.5, "placed_cy": 0.5}
        pw, ph = (cols[-1] - cols[0] + 1) / w, (rows[-1] - rows[0] + 1) / h
        return {
            "aspect_change": float(np.log((pw * w / (ph * h)) / (before.shape[1] / before.shape[0]))),
            "placed_w": (cols[-1] - cols[0] + 1) / w,
            "placed_h": (rows[-1] - rows[0] + 1) / h,
            "placed_cx": (cols[0] + cols[-1] + 1) / 2 / w,
            "placed_cy": (rows[0] + rows[-1] + 1) / 2 / h,
        }
    diff_same = float(np.abs(value - before).mean(dtype=np.float64))
    diff_mirror = float(np.abs(value - before[:, ::-1]).mean(dtype=np.float64))
    s0, v0 = _hsv_means(before)
    s1, v1 = _hsv_means(value)
    return {
        "mirrored": float(diff_mirror < diff_same),
        "saturation_scale": s1 / s0 if s0 > 0 else 1.0,
        "value_scale": v1 / v0 if v0 > 0 else 1.0,
    }


def _op_statistics(
    pipeline: AugmentPipeline, outputs: Mapping[str, np.ndarray], item: Item
) -> dict[tuple[str, str], float]:
    image, boxes = item.image, item.boxes
    out: dict[tuple[str, str], float] = {}
    for op in pipeline.ops:
        before = image if op.kind == "image" else boxes
        for stat, value in _statistics(op, outputs[op.name], before).items():
            out[(op.name, stat)] = value
        if op.kind == "image":
            image = outputs[op.name]
        else:
            boxes = outputs[op.name]
    return out


def diff_own(
    pipeline: AugmentPipeline,
    candidate: AugmentCandidate,
    items: Sequence[Item],
    seeds: Sequence[int],
    alpha: float = ALPHA,
    on_step: Callable[[], None] | None = None,
) -> list[DistributionTest]:
    """Own draws: each op's output statistics over every (image, seed), original vs candidate, KS-tested."""
    from scipy.stats import ks_2samp

    if candidate.augment is None:
        raise RepliscopeError(
            f"--augment {candidate.spec}: --draws own needs augment(image, boxes, seed) -> {{op: output}}"
        )
    ref_stats: dict[tuple[str, str], list[float]] = {}
    cand_stats: dict[tuple[str, str], list[float]] = {}
    for item in items:
        for seed in seeds:
            ref = pipeline.original_sample(item.image, item.boxes, seed, item.sample)
            try:
                got = candidate.augment(item.image.copy(), item.boxes.copy(), seed)
            except Exception as exc:  # user code
                first = str(exc).splitlines()[0] if str(exc) else ""
                raise RepliscopeError(
                    f"--augment {candidate.spec}: augment() raised {type(exc).__name__}: {first}"
                ) from None
            if not isinstance(got, dict) or any(op.name not in got for op in pipeline.ops):
                raise RepliscopeError(
                    f"--augment {candidate.spec}: augment() must return a dict with every op's output "
                    f"({', '.join(op.name for op in pipeline.ops)})"
                )
            cand = {
                op.name: checked_output(
                    candidate.spec, op, got[op.name], ref[op.name] if op.kind == "image" else item.boxes
                )
                for op in pipeline.ops
            }
            for key, value in _op_statistics(pipeline, ref, item).items():
                ref_stats.setdefault(key, []).append(value)
            for key, value in _op_statistics(pipeline, cand, item).items():
                cand_stats.setdefault(key, []).append(value)
            if on_step is not None:
                on_step()
    keys = [k for k in ref_stats if len(ref_stats[k]) >= 2 and len(cand_stats.get(k, [])) >= 2]
    tests = []
    for op_name, stat in keys:
        a, b = np.asarray(ref_stats[(op_name, stat)]), np.asarray(cand_stats[(op_name, stat)])
        if np.ptp(a) == 0 and np.ptp(b) == 0:
            ks, p = (0.0, 1.0) if a[0] == b[0] else (1.0, 0.0)
        else:
            res = ks_2samp(a, b)
            ks, p = float(res.statistic), float(res.pvalue)
        adjusted = min(1.0, p * len(keys))
        tests.append(
            DistributionTest(
                op=op_name,
                statistic=stat,
                original_mean=float(a.mean()),
                candidate_mean=float(b.mean()),
                ks=ks,
                p_value=p,
                p_adjusted=adjusted,
                differs=adjusted < alpha,
            )
        )
    return tests


def first_divergent(
    pipeline: AugmentPipeline, ops: Sequence[OpResult], tests: Sequence[DistributionTest]
) -> str | None:
    for op in pipeline.ops:
        if any(r.name == op.name and r.differing for r in ops):
            return op.name
        if any(t.op == op.name and t.differs for t in tests):
            return op.name
    return None


def run_diff(
    pipeline: AugmentPipeline,
    candidate: AugmentCandidate,
    items: Sequence[Item],
    seeds: Sequence[int],
    *,
    draws: Literal["shared", "own"],
    manifest: str,
    dataset: str,
    failed: Sequence[dict[str, str]] = (),
    alpha: float = ALPHA,
    on_step: Callable[[], None] | None = None,
) -> AugmentDiffResult:
    """The whole diff, as a result (nothing printed)."""
    start = time.perf_counter()
    ops: list[OpResult] = []
    tests: list[DistributionTest] = []
    notes = [f"original: {pipeline.origin}; {pipeline.pin}"]
    pipeline.prepare(items, seeds)
    if draws == "shared":
        ops = diff_shared(pipeline, candidate, items, seeds, on_step)
        notes.append("golden mode: each candidate op gets the original's input of that op and the same draws")
    else:
        tests = diff_own(pipeline, candidate, items, seeds, alpha, on_step)
        notes.append(
            f"own draws: {len(items) * len(seeds)} augmentations per side; two-sample KS per op and statistic, "
            f"Bonferroni over {len(tests)} tests, alpha {alpha}"
        )
    return AugmentDiffResult(
        manifest=manifest,
        pipeline=pipeline.describe(),
        candidate=candidate.spec,
        draws=draws,
        dataset=dataset,
        samples=len(items),
        seeds=list(seeds),
        ops=ops,
        distribution=tests,
        alpha=alpha if draws == "own" else None,
        first_divergent=first_divergent(pipeline, ops, tests),
        failed_samples=list(failed),
        notes=notes,
        elapsed_s=round(time.perf_counter() - start, 3),
    )
