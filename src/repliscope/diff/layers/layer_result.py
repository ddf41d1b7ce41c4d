"""The result of a layer-level diff (pure data, JSON-serialisable)."""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, computed_field, model_validator

from repliscope.diff.tolerance import ErrorStats, TolerancePolicy

Mode = Literal["golden", "carried"]
MODES: tuple[Mode, ...] = ("golden", "carried")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LayerRow(_Model):
    """One compared unit. ``path`` is the reference path the candidate maps (a module layer, or a functional
    op ``layer1.0/add``); ``covers`` the reference units its counterpart computes (several for a fused ONNX
    Conv + BatchNorm). ``kind`` joins their classes / op names; ``source`` is the file:line of the class doing
    the main computation (the covered unit with the largest reduction), or of the op's call in ``forward``.
    ``ref_shape`` is the reference output shape (reference layout, batch first). ``op``: the op name for a
    functional op unit, "" for a module layer (or the reference runtime's layer type: a Darknet cfg section,
    ``convolutional``). ``missing``: set (to the reason) when the candidate has no
    counterpart at all for this reference op: the row has no errors and counts as a divergence in every
    mode."""

    index: int
    path: str
    covers: list[str]
    kind: str
    source: str
    reduction: int
    dtype: str
    ref_shape: list[int]
    ref_max_abs: float
    candidate_layout: str = "reference"
    golden: ErrorStats | None = None
    carried: ErrorStats | None = None
    notes: list[str] = Field(default_factory=list)
    op: str = ""
    missing: str = ""
    made_by: str = ""
    """Golden mode: the candidate sub-layer that makes this unit's error (``convolutional_13 (LeakyReLU)``), when
    the candidate runs its unit sub-layer by sub-layer and the reference tells the values in between; "" else."""


class Divergence(_Model):
    """The first layer (in execution order) over tolerance in one mode."""

    mode: Mode
    index: int
    path: str
    covers: list[str]
    kind: str
    source: str
    max_abs: float
    tolerance: float
    ratio: float
    missing: str = ""
    """Set (the reason) when the divergence is a reference op the candidate has no counterpart for."""
    made_by: str = ""
    """The candidate sub-layer that makes the error (golden mode; see :attr:`LayerRow.made_by`)."""

    def describe(self) -> str:
        fused = f" (fused: {' + '.join(self.covers)})" if self.covers != [self.path] else ""
        if self.missing:
            return f"{self.path}: {self.kind} at {self.source} is missing in the candidate: {self.missing}"
        if not math.isfinite(self.ratio):
            return (
                f"{self.path}{fused}: {self.kind} at {self.source}: the candidate's unit cannot be compared "
                "with the reference's (see the notes for why)"
            )
        by = f", made by the candidate's {self.made_by}" if self.made_by else ""
        return (
            f"{self.path}{fused}: {self.kind} at {self.source}{by}, max |err| {self.max_abs:.3g} > "
            f"tolerance {self.tolerance:.3g} ({self.ratio:.1f}x)"
        )


class Cause(_Model):
    """A named cause that explains a diverging unit (:meth:`repliscope.diff.base.Reference.explain`): ``cause``
    its word (``batch_norm_convention``), ``convention`` the one that explains it, ``explanation`` in words,
    ``error`` the max |candidate - reference| it explains and ``residual`` what is left under that cause (same
    units), ``residuals`` the residual under each convention tried. ``mode``: where it was found."""

    path: str
    mode: Mode = "golden"
    cause: str
    convention: str
    explanation: str
    error: float
    residual: float
    residuals: dict[str, float] = Field(default_factory=dict)


class ModeSummary(_Model):
    compared: int
    passed: int
    failed: int
    max_ratio: float
    """Largest ``max_abs / tolerance`` over the compared layers."""
    ops: int = 0
    """Compared units that are functional ops (``compared - ops`` are module layers)."""
    reference_units: int = 0
    """Reference units (module layers + functional ops) covered by the compared units."""
    missing: int = 0
    """Reference ops the candidate has no counterpart for (each a divergence, not in ``failed``)."""


class NotCompared(_Model):
    """A reference unit (module layer or functional op) that no compared unit covers, and why."""

    path: str
    kind: str
    source: str
    reason: str
    op: str = ""
    """The op name for a functional op unit (``add``), "" for a module layer (or a graph node)."""


class LayerDiffResult(_Model):
    """Golden and/or carried per-layer errors of a candidate against the torch reference.

    ``input_shape`` / ``input_dtype``: the batch both sides ran (reference layout, e.g. float32 NCHW
    (8, 3, 224, 224)); ``samples``: the ids of the real samples in that batch.
    """

    kind: str = "layer_diff"
    reference: dict[str, Any]
    candidate: dict[str, Any]
    modes: list[Mode]
    input_shape: list[int]
    input_dtype: str
    samples: list[str] = Field(default_factory=list)
    tolerance: TolerancePolicy
    formula: str
    layers: list[LayerRow]
    reference_layers: int
    first_divergent: dict[str, Divergence | None]
    summary: dict[str, ModeSummary]
    seconds: float
    notes: list[str] = Field(default_factory=list)
    reference_ops: int = 0
    """Functional ops in the reference ``forward`` (units besides the ``reference_layers`` module layers)."""
    uncompared: list[NotCompared] = Field(default_factory=list)
    """Every reference unit (module layer or functional op) not compared, with the reason (``not_compared``:
    the module layers among them, by path)."""
    output: ErrorStats | None = None
    """The candidate's whole-model output against the reference output (tolerance: the carried one,
    accumulated over every compared unit); None when not compared (see ``output_note``)."""
    output_note: str = ""
    causes: list[Cause] = Field(default_factory=list)
    """Named causes that explain diverging units (e.g. a batch-norm convention), one per unit and mode."""

    @model_validator(mode="before")
    @classmethod
    def _derived_fields(cls, data: Any) -> Any:
        """``not_compared`` is derived from ``uncompared``: given (a dump, an older record), it is dropped."""
        if isinstance(data, dict) and "not_compared" in data:
            data = {k: v for k, v in data.items() if k != "not_compared"}
        return data

    @computed_field  # type: ignore[prop-decorator]
    @property
    def not_compared(self) -> list[str]:
        """The reference MODULE layers neither mapped nor covered by a mapped unit, in reference order: the paths
        of the ``uncompared`` units that are no functional op."""
        return [u.path for u in self.uncompared if not u.op]

    @property
    def passed(self) -> bool:
        """True when no mode has a divergent unit (a missing op counts) and the final output, when
        compared, is within tolerance."""
        diverged = any(d is not None for d in self.first_divergent.values())
        return not diverged and (self.output is None or self.output.passed)
