"""Paired statistics of a variant against the reference on the same samples."""

from __future__ import annotations

import numpy as np

from repliscope.metrics.intervals import mcnemar_exact_p
from repliscope.pitfalls.result import PairedStats

_EPS = 1e-12


def kl_divergence(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """KL(p || q) per row in nats, >= 0; p, q: (N, C) probabilities. Rows are clipped at 1e-12 (zeros stay
    finite) and renormalised in float64, so float32 rounding cannot make the divergence negative."""
    p64 = np.clip(p.astype(np.float64), _EPS, None)
    q64 = np.clip(q.astype(np.float64), _EPS, None)
    p64 /= p64.sum(axis=1, keepdims=True)
    q64 /= q64.sum(axis=1, keepdims=True)
    return np.maximum(np.sum(p64 * (np.log(p64) - np.log(q64)), axis=1), 0.0)




def paired_stats(ref_top1: np.ndarray, var_top1: np.ndarray, labels: np.ndarray | None, kl: np.ndarray,
                 max_abs_prob_diff: float, ref_top5_hits: np.ndarray | None = None,
                 var_top5_hits: np.ndarray | None = None) -> PairedStats:
    """``ref_top1`` / ``var_top1``: (n,) int predictions on the samples both evaluated; ``labels``: (n,) with
    -1 for unlabelled, or None; ``kl``: (n,) per-sample KL(reference || variant)."""
    n = int(ref_top1.shape[0])
    same = ref_top1 == var_top1
    stats = PairedStats(n=n, agreement=float(same.mean()) if n else 0.0, flipped=int((~same).sum()),
                        mean_kl=float(kl.mean()) if n else 0.0, max_abs_prob_diff=max_abs_prob_diff)
    if labels is not None and n:
        known = labels >= 0
        if known.any():
            ref_ok = (ref_top1 == labels) & known
            var_ok = (var_top1 == labels) & known
            b = int((ref_ok & ~var_ok).sum())
            c = int((~ref_ok & var_ok & known).sum())
            m = int(known.sum())
            stats.b, stats.c, stats.mcnemar_p = b, c, mcnemar_exact_p(b, c)
            stats.delta_top1 = (int(var_ok.sum()) - int(ref_ok.sum())) / m
            if ref_top5_hits is not None and var_top5_hits is not None:
                stats.delta_top5 = (int((var_top5_hits & known).sum()) - int((ref_top5_hits & known).sum())) / m
    return stats
