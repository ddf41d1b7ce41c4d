"""What a pitfall sweep produces: one outcome per variant, paired against the reference, plus visuals.

Every variant that ran is also a stored EvaluationRecord (``run_id``) linked to the sweep by ``sweep_id``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from repliscope.evaluation.record import ManifestInfo, MetricValue
from repliscope.metrics.paired import PairedStats


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class VariantOutcome(_Model):
    name: str
    """The variant as requested, in the pipeline diff's notation: the registered name, with the degree when one
    was given (``center_crop_offset[offset=[1, 0]]``); ``reference`` for the manifest as written."""
    pitfall: str | None = None
    """The registered variant (None: the reference, or a sweep stored before degrees were recorded)."""
    params: dict[str, Any] = {}
    """The degree the variant ran at, as given (each parameter's value); empty: the variant's default degree."""
    description: str
    change: str
    status: Literal["ok", "not applicable", "failed"]
    reason: str | None = None
    run_id: str | None = None
    metrics: list[MetricValue] = []
    paired: PairedStats | None = None
    """Classification: paired statistics against the reference (with the output distributions' KL)."""
    paired_task: dict[str, Any] | None = None
    """Other tasks: the task's paired statistics against the reference (:meth:`Task.paired`; object detection:
    :func:`repliscope.units.detection_paired`: matched fraction, IoU, delta AP with its paired interval)."""
    failed_samples: int = 0
    evaluated_samples: int | None = None
    """Samples this variant evaluated successfully (its top-1 is over the labelled ones among them); None in
    sweeps stored before it was recorded."""
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
    shapes differ); ``max_abs_diff`` / ``mean_abs_diff`` in model-input units; ``diff_scale``: the difference
    drawn at full colour (yellow) in ``diff_png`` (black is 0), for the colour scale.
    ``top1`` / ``top1_prob``: this variant's prediction for the image (None when the sample failed).
    Sweeps stored before ``diff_scale`` / ``top1`` existed read them as None.
    """

    variant: str
    image_png: str
    diff_png: str | None = None
    max_abs_diff: float | None = None
    mean_abs_diff: float | None = None
    note: str | None = None
    diff_scale: float | None = None
    top1: int | None = None
    top1_prob: float | None = None


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
