"""The report's view model: plain, pre-formatted values the HTML and Markdown templates only lay out.

Builders in :mod:`repliscope.report.sections` fill these from an EvaluationRecord or a SweepResult; all text is
raw (unescaped) - the templates escape it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

ImageSink = Callable[[str, bytes], str]
"""Receives a file-name stem and PNG bytes, returns what goes into ``src`` (a data URI, or a relative path)."""

ExtraFigure = tuple[str, bytes]
"""``(title, png_bytes)``: a figure contributed by another component (e.g. the layer-diff plot)."""


@dataclass(frozen=True)
class Image:
    src: str
    alt: str


@dataclass(frozen=True)
class FigureView:
    title: str
    image: Image
    caption: str = ""


@dataclass(frozen=True)
class ClaimRow:
    metric: str
    claimed: str
    measured: str
    interval: str
    claim_dataset: str
    evaluated_dataset: str
    verdict: str
    css: str
    reason: str
    source: str
    source_url: str | None
    warning: str | None = None
    """Set when the measured 95 % interval is too wide to judge the claim."""
    direction: str | None = None
    """``beats``, ``falls short`` or ``within`` (the claim against the measured interval); None when not judged."""
    sampling: str | None = None
    """How the judged samples were chosen: ``whole split``, ``random sample`` or ``selection`` (None: not judged
    or an older record)."""

    @property
    def direction_text(self) -> str | None:
        """:data:`repliscope.evaluation.claims.DIRECTION_TEXT`'s words (``beats its claim``...)."""
        from repliscope.evaluation.claims import DIRECTION_TEXT

        return DIRECTION_TEXT.get(self.direction) if self.direction else None


@dataclass(frozen=True)
class MetricRow:
    name: str
    value: str
    interval: str
    count: str


@dataclass(frozen=True)
class PipelineRow:
    stage: str
    index: int
    op: str
    parameters: str
    library: str
    version: str


@dataclass
class Provenance:
    manifest_name: str
    manifest_version: str
    manifest_path: str
    manifest_sha256: str
    manifest_text: str
    pipeline: list[PipelineRow]
    runtime: list[tuple[str, str]]
    export_note: str | None
    software: list[tuple[str, str]]
    threadpools: list[list[str]]
    hardware: list[tuple[str, str]]
    dataset: list[tuple[str, str]]
    options: list[tuple[str, str]]
    timings: list[tuple[str, str]]
    shards: list[list[str]] = field(default_factory=list)
    """A merged sharded evaluation's shards: shard, agent, host, samples, stack key, result hash, seconds."""


@dataclass(frozen=True)
class PerClassRow:
    """Object detection: one category's COCO AP (.50:.95) and AR@100, formatted."""

    category: str
    ap: str
    ar: str
    objects: str
    detections: str


@dataclass(frozen=True)
class FailureRow:
    sample_id: str
    label: str
    predicted: str
    probability: str
    error: str | None


@dataclass(frozen=True)
class PitfallRow:
    name: str
    change: str
    description: str
    evaluated: str
    """``evaluated / failed`` samples of this variant (its top-1 is over its own evaluated samples)."""
    top1: str
    top1_interval: str
    top5: str
    paired_n: str
    """Samples both the reference and this variant evaluated: the n of Δ, p, agreement, flips and KL."""
    delta_top1: str
    p: str
    significant: bool
    agreement: str
    flips: str
    mean_kl: str
    status: str
    reason: str
    css: str
    is_reference: bool = False


@dataclass(frozen=True)
class FlipList:
    variant: str
    lines: list[str]
    more: int


@dataclass(frozen=True)
class VisualCard:
    variant: str
    image: Image | None
    diff: Image | None
    caption: str
    identical: bool = False
    prediction: str = ""
    """The variant's top-1 for this image: ``"243 (bull_mastiff), 70.0%"``, or why there is none."""


@dataclass(frozen=True)
class VisualPanelView:
    sample_id: str
    label: str
    cards: list[VisualCard]
    colorbar: Image | None = None
    """The colour scale of this panel's difference heatmaps (they share one scale)."""


@dataclass(frozen=True)
class Section:
    id: str
    title: str


@dataclass
class ReportView:
    """Everything a template needs. ``sections`` lists, in order, the sections the report contains."""

    kind: str
    title: str
    object_id: str
    created_at: str
    repliscope_version: str
    description: str | None
    sections: list[Section]
    claims: list[ClaimRow]
    claim_figure: FigureView | None
    metrics: list[MetricRow]
    metrics_note: str
    provenance: Provenance
    failures: list[FailureRow] = field(default_factory=list)
    failures_more: int = 0
    failures_summary: str = ""
    latency: FigureView | None = None
    latency_stats: list[tuple[str, str]] = field(default_factory=list)
    pitfalls: list[PitfallRow] = field(default_factory=list)
    pitfalls_caption: str = ""
    flips: list[FlipList] = field(default_factory=list)
    deltas: FigureView | None = None
    deltas_note: str = ""
    visual: list[VisualPanelView] = field(default_factory=list)
    extra_figures: list[FigureView] = field(default_factory=list)
    no_claims: str = "The manifest makes no claim."
    """What the claim section says when ``claims`` is empty."""
    metrics_count_header: str = "correct / n"
    """The metric table's count column: ``correct / n`` (proportions) or ``n`` (detection: n images)."""
    pitfall_headers: list[str] = field(default_factory=list)
    """The pitfall table's nine metric column headers when they are not classification's (detection sweeps:
    :data:`repliscope.report.detection_sections.HEADERS`); empty = top-1 ... mean KL."""
    per_class: list[PerClassRow] = field(default_factory=list)
    """Object detection runs: AP / AR per category (the ``per-class`` section)."""
