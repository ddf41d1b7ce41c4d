"""Report figures of a leveled trace: per-layer time of one run, and per-layer time of two runs side by side.

Each figure is an :data:`~repliscope.report.view.ExtraFigure` ``(title, png)``, so it goes into a report through
the extra-figures hook: :func:`trace_figures` of a stored trace passed as ``extra_figures`` (the section is then
titled "Per-layer time"), or ``repliscope report RUN --figure layers.png`` after ``repliscope trace summary RUN
--plot layers.png``. matplotlib is imported inside the functions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from repliscope.report.figures import _figure, _png
from repliscope.report.view import ExtraFigure
from repliscope.tracing.compare import TraceComparison
from repliscope.tracing.summary import TraceSummary

FIGURE_PREFIX = "per-layer time"
"""Title prefix of every trace figure (a report whose extra figures all have it titles the section so)."""
_BAR = "#2c6fbb"
_OTHER = "#e67e22"
_MAX_LABEL = 48


def _short(name: str) -> str:
    return name if len(name) <= _MAX_LABEL else "…" + name[-(_MAX_LABEL - 1) :]


def layer_time_chart(summary: TraceSummary, top: int = 20) -> bytes:
    """Horizontal bars: the ``top`` layers by p50 self time (ms), slowest first, each with its share."""
    layers = summary.top(top)
    fig = _figure(7.5, 1.3 + 0.32 * max(len(layers), 1))
    ax = fig.add_subplot()
    positions = list(range(len(layers)))
    ax.barh(positions, [x.p50_ms for x in layers], color=_BAR, height=0.6)
    ax.set_yticks(positions, [_short(x.layer) for x in layers], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("p50 self time per inference (ms)")
    ax.set_title(
        f"{summary.source}: {len(layers)} slowest of {len(summary.layers)} layers "
        f"(model p50 {summary.model_p50_ms:.2f} ms, {summary.inferences} inferences)",
        fontsize=9,
    )
    ax.grid(axis="x", alpha=0.3)
    for pos, x in zip(positions, layers, strict=True):
        ax.annotate(
            f"{x.share:.1%}", (x.p50_ms, pos), xytext=(3, 0), textcoords="offset points", va="center", fontsize=7
        )
    ax.set_xlim(0, max((x.p50_ms for x in layers), default=1.0) * 1.18 or 1.0)
    return _png(fig)


def layer_compare_chart(c: TraceComparison, top: int = 20) -> bytes:
    """Paired horizontal bars (A, B) of the ``top`` aligned layers with the largest time difference, in
    execution order."""
    chosen = {id(x) for x in c.largest(top)}
    rows = [x for x in c.layers if id(x) in chosen]
    fig = _figure(7.5, 1.5 + 0.42 * max(len(rows), 1))
    ax = fig.add_subplot()
    pos = list(range(len(rows)))
    ax.barh([p - 0.2 for p in pos], [x.a_ms for x in rows], height=0.4, color=_BAR, label=f"A ({c.a_source})")
    ax.barh([p + 0.2 for p in pos], [x.b_ms for x in rows], height=0.4, color=_OTHER, label=f"B ({c.b_source})")
    ax.set_yticks(pos, [_short(x.label) for x in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("p50 time per inference (ms)")
    ax.grid(axis="x", alpha=0.3)
    for p, x in zip(pos, rows, strict=True):
        ax.annotate(
            f"B/A {x.ratio:.2f}",
            (max(x.a_ms, x.b_ms), p),
            xytext=(3, 0),
            textcoords="offset points",
            va="center",
            fontsize=7,
        )
    ax.set_xlim(0, max((max(x.a_ms, x.b_ms) for x in rows), default=1.0) * 1.25 or 1.0)
    ax.legend(loc="lower left", bbox_to_anchor=(0.0, 1.0), ncols=2, fontsize=8, frameon=False)
    return _png(fig)


def trace_figures(doc: Mapping[str, Any], top: int = 20) -> list[ExtraFigure]:
    """The per-layer bar chart of a stored / written Chrome trace, as an extra figure for a report; [] for a
    trace without layer spans (recorded below the ``framework`` level)."""
    from repliscope.tracing.chrome import from_chrome
    from repliscope.tracing.summary import summarize

    spans = from_chrome(doc)
    if not any(s.level == "framework" and "layer" in s.attributes for s in spans):
        return []
    s = summarize(spans)
    return [
        (
            f"{FIGURE_PREFIX} ({s.source}, trace level {doc.get('otherData', {}).get('repliscope_trace_level')})",
            layer_time_chart(s, top),
        )
    ]
