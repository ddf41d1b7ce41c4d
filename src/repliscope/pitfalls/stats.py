"""Paired statistics of a variant against the reference on the samples both evaluated.

Defined in :mod:`repliscope.metrics.paired` (the classification task computes them too); handed on here for the
sweep.
"""

from repliscope.metrics.paired import kl_divergence, paired_predictions, paired_stats

__all__ = ["kl_divergence", "paired_predictions", "paired_stats"]
