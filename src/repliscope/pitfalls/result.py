"""What a pitfall sweep produces: one outcome per variant, paired against the reference, plus visuals.

Every variant that ran is also a stored EvaluationRecord (``run_id``) linked to the sweep by ``sweep_id``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from repliscope.evaluation.record import ManifestInfo, MetricValue


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PairedStats(_Model):
    """A variant against the reference on the same samples (both evaluated successfully).

    ``b``: reference correct, variant wrong; ``c``: reference wrong, variant correct (McNemar's discordant
    pairs); ``mcnemar_p``: exact two-sided binomial test on b vs c (None without labels).
    ``agreement``: fraction of samples with the same top-1; ``flipped``: how many differ.
    ``mean_kl``: mean KL(reference || variant) of the output distributions, in nats.
    """

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


class VariantOutcome(_Model):
    name: str
    description: str
    change: str
    status: Literal["ok", "not applicable", "failed"]
    reason: str | None = None
    run_id: str | None = None
    metrics: list[MetricValue] = []
    paired: PairedStats | None = None
    failed_samples: int = 0
    pipeline: dict[str, list[dict[str, Any]]] | None = None
    settings: dict[str, Any] = {}
    inference_seconds: float = 0.0
    inference_reused: dict[str, int] = {}
    """Batches whose model inputs were bit-identical to an earlier plan's (same runner, same batch size), so
    that plan's outputs were reused instead of running the model again: {plan name: number of batches}."""

    def metric(self, name: str) -> MetricValue | None:
        return next((m for m in self.metrics if m.name == name), None)


class VisualEntry(_Model):
    """One variant's pre-processed input of one image, as PNG (base64), and its difference to the reference.

    ``image_png``: the model input shown as an 8-bit RGB image (channel axis last, min-max scaled);
    ``diff_png``: heatmap of mean |variant - reference| over channels (None for the reference or when the
    shapes differ); ``max_abs_diff`` / ``mean_abs_diff`` in model-input units.
    """

    variant: str
    image_png: str
    diff_png: str | None = None
    max_abs_diff: float | None = None
    mean_abs_diff: float | None = None
    note: str | None = None


class VisualPanel(_Model):
    sample_id: str
    label: int | None
    entries: list[VisualEntry]


class SweepResult(_Model):
    sweep_id: str
    created_at: datetime
    repliscope_version: str
    manifest: ManifestInfo
    runtime: dict[str, Any]
    dataset: dict[str, Any]
    software: dict[str, Any]
    hardware: dict[str, Any]
    options: dict[str, Any]
    reference: VariantOutcome
    variants: list[VariantOutcome]
    claims: list[dict[str, Any]]
    visual: list[VisualPanel]
    timings: dict[str, float]

    def outcome(self, name: str) -> VariantOutcome:
        if name == "reference":
            return self.reference
        return next(v for v in self.variants if v.name == name)
