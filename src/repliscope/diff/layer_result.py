"""The result of a layer-level diff (pure data, JSON-serialisable)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from repliscope.diff.tolerance import ErrorStats, TolerancePolicy

Mode = Literal["golden", "carried"]
MODES: tuple[Mode, ...] = ("golden", "carried")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LayerRow(_Model):
    """One compared layer. ``path`` is the reference path the candidate maps; ``covers`` the reference layers
    its counterpart computes (several for a fused ONNX Conv + BatchNorm). ``kind`` joins their classes;
    ``source`` is the file:line of the class doing the main computation (the covered layer with the largest
    reduction). ``ref_shape`` is the reference output shape (reference layout, batch first)."""

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

    def describe(self) -> str:
        fused = f" (fused: {' + '.join(self.covers)})" if self.covers != [self.path] else ""
        return (f"{self.path}{fused}: {self.kind} at {self.source}, max |err| {self.max_abs:.3g} > "
                f"tolerance {self.tolerance:.3g} ({self.ratio:.1f}x)")


class ModeSummary(_Model):
    compared: int
    passed: int
    failed: int
    max_ratio: float
    """Largest ``max_abs / tolerance`` over the compared layers."""


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
    not_compared: list[str]
    """Reference layers neither mapped nor covered by a mapped layer."""
    first_divergent: dict[str, Divergence | None]
    summary: dict[str, ModeSummary]
    seconds: float
    notes: list[str] = Field(default_factory=list)

    @property
    def passed(self) -> bool:
        """True when no mode has a divergent layer."""
        return all(d is None for d in self.first_divergent.values())
