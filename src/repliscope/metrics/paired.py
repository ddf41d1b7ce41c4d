"""Paired statistics of two runs on the same samples (a variant against the reference): agreement, flips,
McNemar's exact test on the discordant pairs, paired top-1 / top-5 deltas and the KL of the output
distributions. The classification task's ``paired`` and the pitfall sweep share them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict

from repliscope.metrics.intervals import mcnemar_exact_p
from repliscope.records.evaluation import SamplePrediction

_EPS = 1e-12


class PairedStats(BaseModel):
    """A variant against the reference on the samples BOTH evaluated successfully (``n``, the paired n).

    Every number here is over those ``n`` samples only: a sample that failed in one of the two is in
    ``failed_only_reference`` / ``failed_only_variant`` and in no statistic, so the paired delta can differ from
    the difference of the two top-1 values (each over its own evaluated samples).
    ``b``: reference correct, variant wrong; ``c``: reference wrong, variant correct (McNemar's discordant
    pairs); ``mcnemar_p``: exact two-sided binomial test on b vs c (None without labels).
    ``agreement``: fraction of samples with the same top-1; ``flipped``: how many differ.
    ``mean_kl``: mean KL(reference || variant) of the output distributions, in nats.
    ``n_labelled``: labelled paired samples, the denominator of ``ref_top1`` / ``var_top1`` (top-1 of each on
    them) and of ``delta_top1 = var_top1 - ref_top1`` (likewise top-5).
    Sweeps stored before these counts existed read them as 0 / None.
    """

    model_config = ConfigDict(extra="forbid")

    n: int
    agreement: float
    flipped: int
    mean_kl: float
    max_abs_prob_diff: float
    b: int | None = None
    c: int | None = None
    mcnemar_p: float | None = None
    delta_top1: float | None = None
    delta_top5: float | None = None
    n_labelled: int | None = None
    ref_top1: float | None = None
    var_top1: float | None = None
    failed_only_reference: int = 0
    failed_only_variant: int = 0

    @property
    def same_samples(self) -> bool:
        """Did the reference and the variant evaluate exactly the same samples?"""
        return self.failed_only_reference == 0 and self.failed_only_variant == 0

    def pairing_note(self) -> str:
        """Why the paired numbers can be over fewer samples than each side's own top-1."""
        return (
            f"paired on the {self.n} samples both evaluated ({self.failed_only_variant} failed only in the "
            f"variant, {self.failed_only_reference} only in the reference)"
        )


def kl_divergence(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """KL(p || q) per row in nats, >= 0; p, q: (N, C) probabilities. Rows are clipped at 1e-12 (zeros stay
    finite) and renormalised in float64, so float32 rounding cannot make the divergence negative."""
    p64 = np.clip(p.astype(np.float64), _EPS, None)
    q64 = np.clip(q.astype(np.float64), _EPS, None)
    p64 /= p64.sum(axis=1, keepdims=True)
    q64 /= q64.sum(axis=1, keepdims=True)
    return np.maximum(np.sum(p64 * (np.log(p64) - np.log(q64)), axis=1), 0.0)


def paired_stats(
    ref_top1: np.ndarray,
    var_top1: np.ndarray,
    labels: np.ndarray | None,
    kl: np.ndarray,
    max_abs_prob_diff: float,
    ref_top5_hits: np.ndarray | None = None,
    var_top5_hits: np.ndarray | None = None,
) -> PairedStats:
    """``ref_top1`` / ``var_top1``: (n,) int predictions on the samples both evaluated; ``labels``: (n,) with
    -1 for unlabelled, or None; ``kl``: (n,) per-sample KL(reference || variant)."""
    n = int(ref_top1.shape[0])
    same = ref_top1 == var_top1
    stats = PairedStats(
        n=n,
        agreement=float(same.mean()) if n else 0.0,
        flipped=int((~same).sum()),
        mean_kl=float(kl.mean()) if n else 0.0,
        max_abs_prob_diff=max_abs_prob_diff,
    )
    if labels is not None and n:
        known = labels >= 0
        if known.any():
            ref_ok = (ref_top1 == labels) & known
            var_ok = (var_top1 == labels) & known
            b = int((ref_ok & ~var_ok).sum())
            c = int((~ref_ok & var_ok & known).sum())
            m = int(known.sum())
            stats.b, stats.c, stats.mcnemar_p = b, c, mcnemar_exact_p(b, c)
            stats.n_labelled = m
            stats.ref_top1, stats.var_top1 = int(ref_ok.sum()) / m, int(var_ok.sum()) / m
            stats.delta_top1 = (int(var_ok.sum()) - int(ref_ok.sum())) / m
            if ref_top5_hits is not None and var_top5_hits is not None:
                stats.delta_top5 = (int((var_top5_hits & known).sum()) - int((ref_top5_hits & known).sum())) / m
    return stats


def paired_predictions(
    ref: Sequence[SamplePrediction],
    var: Sequence[SamplePrediction],
    kl: Sequence[float] | np.ndarray,
    max_abs_prob_diff: float,
) -> PairedStats | None:
    """Paired statistics of ``var`` against ``ref`` (same samples, same order) on the samples BOTH evaluated.

    ``kl``: per-sample KL(reference || variant) of exactly those samples, in order. Samples that failed in one
    of the two are counted in ``failed_only_*`` and left out of every statistic. None when no sample was
    evaluated by both.
    """
    if len(ref) != len(var) or any(a.sample_id != b.sample_id for a, b in zip(ref, var, strict=True)):
        raise ValueError("paired statistics need the same samples in the same order")
    both = [(a, b) for a, b in zip(ref, var, strict=True) if a.error is None and b.error is None]
    kl_arr = np.asarray(kl, dtype=np.float64)
    if kl_arr.shape != (len(both),):
        raise ValueError(f"{kl_arr.shape[0] if kl_arr.ndim else 0} KL values for {len(both)} paired samples")
    if not both:
        return None
    ref_top1 = np.array([a.topk_indices[0] for a, _ in both])
    var_top1 = np.array([b.topk_indices[0] for _, b in both])
    labels = np.array([a.label if a.label is not None else -1 for a, _ in both])
    top5_a = np.array([a.label in a.topk_indices[:5] for a, _ in both])
    top5_b = np.array([b.label in b.topk_indices[:5] for _, b in both])
    stats = paired_stats(
        ref_top1, var_top1, labels if (labels >= 0).any() else None, kl_arr, max_abs_prob_diff, top5_a, top5_b
    )
    stats.failed_only_reference = sum(1 for a, b in zip(ref, var, strict=True) if a.error and b.error is None)
    stats.failed_only_variant = sum(1 for a, b in zip(ref, var, strict=True) if b.error and a.error is None)
    return stats
