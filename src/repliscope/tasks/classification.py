"""``image_classification``: post ops softmax / topk / labels, per-sample top-k records, top-1 / top-5 with
Wilson intervals, and paired statistics (agreement, McNemar) of two runs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from repliscope.datasets.base import Dataset, Sample
from repliscope.errors import DatasetError, RepliscopeError
from repliscope.evaluation.record import MetricValue, SamplePrediction
from repliscope.manifest.schema import CLASSIFICATION_OUTPUT_KINDS, PERCENT_METRICS
from repliscope.metrics.classification import compute_metrics
from repliscope.ops.base import Predictions
from repliscope.tasks.base import Task


class ImageClassification(Task):
    """One label per image; the postprocess must end with ``topk`` (best first)."""

    name = "image_classification"
    truth = "labels"
    post_ops: ClassVar[tuple[str, ...]] = ("softmax", "topk", "labels")
    claim_metrics: ClassVar[tuple[str, ...]] = PERCENT_METRICS
    output_kinds: ClassVar[tuple[str, ...]] = CLASSIFICATION_OUTPUT_KINDS

    def check_dataset(self, dataset: Dataset, num_classes: int, class_names: Sequence[str] | None = None) -> None:
        """A label the model cannot predict would silently count as a miss: refuse, naming the samples."""
        bad = [s for s in dataset.samples if s.label is not None and not 0 <= s.label < num_classes]
        if bad:
            names = ", ".join(f"{s.id} (label {s.label})" for s in bad[:10])
            raise DatasetError(
                f"{len(bad)} samples of '{dataset.name}' have labels outside the model's "
                f"{num_classes} classes: {names}{' ...' if len(bad) > 10 else ''}"
            )

    def to_samples(self, preds: Predictions, batch: Sequence[Sample], rows: Sequence[int]) -> list[SamplePrediction]:
        """Row ``j``'s top-k indices and scores (``topk`` output) for ``batch[rows[j]]``."""
        if preds.topk_indices is None or preds.topk_scores is None:
            raise RepliscopeError("postprocess must contain a 'topk' op so predictions can be recorded")
        indices, scores = preds.topk_indices.tolist(), preds.topk_scores.tolist()
        return [
            SamplePrediction(
                sample_id=batch[i].id, label=batch[i].label, topk_indices=indices[row], topk_probs=scores[row]
            )
            for row, i in enumerate(rows)
        ]

    def metrics(self, samples: Sequence[SamplePrediction], dataset: Dataset | None = None) -> list[MetricValue]:
        """top1 / top5 (Wilson 95 % intervals) over the labelled, evaluated samples."""
        return compute_metrics(samples)

    def paired(
        self, reference: Sequence[SamplePrediction], variant: Sequence[SamplePrediction], dataset: Dataset | None = None
    ) -> dict[str, Any] | None:
        """:func:`repliscope.pitfalls.stats.paired_predictions` on records (same samples, same order) as a dict:
        ``n``, ``agreement``, ``flipped``, McNemar ``b``/``c``/``mcnemar_p``, ``ref_top1``/``var_top1``/
        ``delta_top1``/``delta_top5`` over ``n_labelled``, ``failed_only_*``. Records keep only the top-k, so
        the distribution statistics of a sweep are replaced by ``max_abs_top1_prob_diff`` (|p_ref - p_var| of
        the reference's top-1 class when both kept it) and ``mean_kl`` / ``max_abs_prob_diff`` are left out."""
        from repliscope.pitfalls.stats import paired_predictions

        both = [(a, b) for a, b in zip(reference, variant, strict=True) if a.error is None and b.error is None]
        stats = paired_predictions(reference, variant, np.zeros(len(both)), 0.0)
        if stats is None:
            return None
        diffs = []
        for a, b in both:  # a position lookup per sample, no dict: 50,000 pairs in ~20 ms
            if a.topk_indices and a.topk_indices[0] in b.topk_indices:
                diffs.append(abs(a.topk_probs[0] - b.topk_probs[b.topk_indices.index(a.topk_indices[0])]))
        out = stats.model_dump(exclude={"mean_kl", "max_abs_prob_diff"})
        out["max_abs_top1_prob_diff"] = max(diffs) if diffs else None
        return out
