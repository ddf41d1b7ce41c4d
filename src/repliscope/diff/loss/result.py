"""What a loss diff produces (:func:`repliscope.diff.loss.driver.run_loss_diff`): the rows of values, gradients and
matchings, the worst images, and the diagnosis over the loss pitfalls (:mod:`repliscope.diff.loss.pitfalls`), as
``repliscope diff --loss --json`` prints them and the store keeps them (kind ``loss_diff``). Types only: the driver
and the pitfalls both build on them."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class ValueRow(BaseModel):
    """One compared value: the total or a component."""

    model_config = ConfigDict(extra="forbid")
    name: str
    original: float | None
    candidate: float | None
    abs_error: float | None
    tolerance: float
    passed: bool
    note: str = ""


class GradientRow(BaseModel):
    """d total / d one output, candidate against original."""

    model_config = ConfigDict(extra="forbid")
    output: str
    shape: list[int]
    max_abs: float
    mean_abs: float
    max_rel: float
    ulp: float
    tolerance: float
    passed: bool
    nonfinite: int = 0
    worst_at: list[int] = Field(default_factory=list)
    """Index of the largest error (N, C, H, W)."""
    worst_entry: str = ""
    """That index in the loss's words (yolo: image, anchor, entry x/y/w/h/objectness/class k, cell)."""
    by_entry: dict[str, float] = Field(default_factory=dict)
    """yolo: max |error| per entry kind (x, y, w, h, objectness, class) over every anchor, cell and image."""
    entries_over: list[str] = Field(default_factory=list)
    """The entry kinds whose max |error| exceeds the tolerance (yolo), in channel order."""
    original_value: float = 0.0
    candidate_value: float = 0.0


class MatchingRow(BaseModel):
    """One image's matching: the (prediction, target) pairs each side made and their costs."""

    model_config = ConfigDict(extra="forbid")
    image: str
    pairs: int
    only_original: list[tuple[int, int, float]] = Field(default_factory=list)
    only_candidate: list[tuple[int, int, float]] = Field(default_factory=list)
    cost_max_abs: float = 0.0
    tolerance: float = 0.0
    passed: bool


class ImageRow(BaseModel):
    model_config = ConfigDict(extra="forbid")
    image: str
    original: float | None
    candidate: float | None
    abs_error: float | None
    gradient_max_abs: float


class LossFit(BaseModel):
    """How close one loss pitfall comes to the candidate."""

    model_config = ConfigDict(extra="forbid")
    pitfall: str
    change: str
    max_rel_error: float | None
    """max over the compared values of |variant - candidate| / max(|candidate|, 1); None when it failed."""


class LossDiagnosis(BaseModel):
    model_config = ConfigDict(extra="forbid")
    verdict: str
    """``match`` | ``explained`` | ``unexplained`` | ``not_available``."""
    pitfall: str | None = None
    change: str | None = None
    residual: float | None = None
    candidates: list[LossFit] = Field(default_factory=list)
    message: str = ""


class LossDiffResult(BaseModel):
    """``repliscope diff MANIFEST --loss CANDIDATE`` (stored as kind ``loss_diff``)."""

    model_config = ConfigDict(extra="forbid")
    kind: str = "loss_diff"
    reference: str
    """The original loss's registered name."""
    candidate: str
    origin: str
    family: str
    manifest: str = ""
    dataset: str = ""
    source: str
    """``dataset`` (the model's real outputs) or ``random seed N`` (seeded random outputs)."""
    samples: int
    passed: bool
    first_divergent: str | None = None
    k: float
    total: ValueRow
    components: list[ValueRow]
    gradients: list[GradientRow]
    matching: list[MatchingRow] | None = None
    matching_note: str = ""
    worst_images: list[ImageRow]
    diagnosis: LossDiagnosis | None = None
    differences: list[str] = Field(default_factory=list)
    """The original's documented differences from what it wraps (its LossSpec)."""
    original_notes: list[str] = Field(default_factory=list)
    candidate_notes: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    seconds: dict[str, float] = Field(default_factory=dict)
