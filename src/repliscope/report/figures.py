"""Report figures as PNG bytes (matplotlib, object-oriented API on the Agg canvas: no display needed).

matplotlib is imported inside the functions, so importing repliscope (or this module) does not import it.
"""

from __future__ import annotations

import base64
import binascii
import io
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from repliscope.number_text import PERCENT_DIGITS, unit_interval_text, unit_value_text

if TYPE_CHECKING:
    from matplotlib.figure import Figure

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
SIGNIFICANCE_LEVEL = 0.05
_SIGNIFICANT = "#c0392b"
_NOT_SIGNIFICANT = "#7f8c8d"
_LINE = "#2c6fbb"
_MAX_LABEL = 40  # longer variant names are shortened on the chart's axis (the table has them in full)


@dataclass(frozen=True)
class DeltaBar:
    """One bar of the deltas chart: ``value`` in percentage points; ``p`` the McNemar p-value (None: unknown)."""

    name: str
    value: float
    p: float | None = None

    @property
    def significant(self) -> bool:
        return self.p is not None and self.p < SIGNIFICANCE_LEVEL


def png_data_uri(png: bytes) -> str:
    """``data:image/png;base64,...`` for PNG bytes."""
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def decode_png_b64(text: str) -> bytes:
    """PNG bytes from base64 text (a ``data:image/png;base64,`` prefix is accepted); ValueError if not a PNG."""
    payload = text.split(",", 1)[1] if text.startswith("data:") else text
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"not valid base64 PNG data: {exc}") from exc
    if not data.startswith(PNG_SIGNATURE):
        raise ValueError("base64 data does not hold a PNG image")
    return data


def _figure(width: float, height: float, constrained: bool = True) -> Figure:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=110, layout="constrained" if constrained else None)
    FigureCanvasAgg(fig)
    return fig


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def delta_chart(bars: Sequence[DeltaBar], xlabel: str) -> bytes:
    """Horizontal bar chart, one bar per variant, coloured by significance (McNemar p < 0.05), p annotated."""
    from matplotlib.patches import Patch

    fig = _figure(7.5, 1.2 + 0.42 * max(len(bars), 1))
    ax = fig.add_subplot()
    names = [b.name if len(b.name) <= _MAX_LABEL else b.name[: _MAX_LABEL - 1] + "…" for b in bars]
    values = [b.value for b in bars]
    positions = list(range(len(bars)))
    ax.barh(positions, values, color=[_SIGNIFICANT if b.significant else _NOT_SIGNIFICANT for b in bars], height=0.6)
    ax.set_yticks(positions, names)
    ax.invert_yaxis()
    ax.axvline(0.0, color="black", linewidth=0.8)
    ax.set_xlabel(xlabel)
    ax.grid(axis="x", alpha=0.3)
    span = max((abs(v) for v in values), default=1.0) or 1.0
    ax.set_xlim(min(min(values, default=0.0), 0.0) - 0.35 * span, max(max(values, default=0.0), 0.0) + 0.35 * span)
    for pos, bar in zip(positions, bars, strict=True):
        p_text = "" if bar.p is None else f"  p={bar.p:.2g}"
        label = f"{bar.value:+.{PERCENT_DIGITS}f}" + p_text + ("*" if bar.significant else "")
        ax.annotate(
            label,
            (bar.value, pos),
            xytext=(4 if bar.value >= 0 else -4, 0),
            textcoords="offset points",
            ha="left" if bar.value >= 0 else "right",
            va="center",
            fontsize=8,
        )
    ax.legend(
        handles=[
            Patch(color=_SIGNIFICANT, label="McNemar p < 0.05 (*)"),
            Patch(color=_NOT_SIGNIFICANT, label="not significant / no test"),
        ],
        loc="lower left",
        bbox_to_anchor=(0.0, 1.0),
        ncols=2,
        fontsize=8,
        frameon=False,
    )
    return _png(fig)


def latency_chart(latencies_seconds: Sequence[float], batch_size: int | None) -> bytes | None:
    """Per-batch inference latency (ms) in run order - bars, or a line beyond 60 batches - with the median;
    None when there is no batch."""
    from matplotlib.ticker import MaxNLocator

    if not latencies_seconds:
        return None
    ms = [1000.0 * s for s in latencies_seconds]
    fig = _figure(7.5, 2.6)
    ax = fig.add_subplot()
    batches = list(range(1, len(ms) + 1))
    if len(ms) <= 60:
        ax.bar(batches, ms, color=_LINE, width=0.7)
    else:
        ax.plot(batches, ms, color=_LINE, linewidth=1)
    median = statistics.median(ms)
    ax.axhline(median, color=_SIGNIFICANT, linestyle="--", linewidth=1, label=f"median {median:.1f} ms")
    ax.set_xlabel("batch (run order)" + (f"; batch size {batch_size}" if batch_size else ""))
    ax.set_ylabel("latency (ms)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(axis="y", alpha=0.3)
    ax.legend(loc="lower left", bbox_to_anchor=(0.0, 1.0), fontsize=8, frameon=False)
    return _png(fig)


def heat_colorbar(scale: float, label: str) -> bytes:
    """A horizontal colour scale for the difference heatmaps: the heatmaps' own ramp (black -> red -> yellow,
    :func:`repliscope.pitfalls.visual.heat_rgb`) from 0 to ``scale`` (model-input units; "≥" at the end, since
    larger differences are drawn at full colour)."""
    import numpy as np
    from matplotlib.colorbar import Colorbar
    from matplotlib.colors import ListedColormap, Normalize

    from repliscope.pitfalls.visual import heat_rgb

    fig = _figure(3.4, 0.8, constrained=False)
    ax = fig.add_axes((0.05, 0.58, 0.84, 0.3))  # a thin bar, room below for the ticks and the label
    cmap = ListedColormap(heat_rgb(np.linspace(0.0, 1.0, 256)), name="repliscope-diff")
    bar = Colorbar(ax, cmap=cmap, norm=Normalize(0.0, scale), orientation="horizontal")
    ticks = [0.0, scale / 2, scale]
    bar.set_ticks(ticks, labels=["0", f"{scale / 2:.3g}", f"≥ {scale:.3g}"])
    bar.ax.tick_params(labelsize=7)
    bar.set_label(label, fontsize=7)
    return _png(fig)


@dataclass(frozen=True)
class ClaimPoint:
    """One claim against its measurement, as records store them (fractions): ``claimed``; ``measured`` with its
    95 % interval [``low``, ``high``]; ``wide``: the interval is too wide to judge the claim (drawn in the warning
    colour); ``unit``: how the metric reads (``percent``: top-1 drawn and labelled ``75.10 %``; ``fraction``: COCO AP
    labelled ``0.3310``, :mod:`repliscope.number_text`)."""

    label: str
    claimed: float
    measured: float
    low: float
    high: float
    wide: bool = False
    unit: str = "percent"


def claim_chart(points: Sequence[ClaimPoint]) -> bytes:
    """Per claim, one row: the claimed value as a diamond, the measured value as a dot with its 95 % interval
    as an error bar (the claim is consistent with the data where the diamond falls inside the bar)."""
    percent = all(p.unit == "percent" for p in points)
    scale = 100.0 if percent else 1.0  # drawn in percent, or as fractions when any claim is one (AP, mIoU)
    fig = _figure(7.5, 1.0 + 0.55 * max(len(points), 1))
    ax = fig.add_subplot()
    rows = list(range(len(points)))
    for row, p in zip(rows, points, strict=True):
        colour = _SIGNIFICANT if p.wide else _LINE
        claimed, measured, low, high = (scale * v for v in (p.claimed, p.measured, p.low, p.high))
        ax.errorbar(
            [measured],
            [row],
            xerr=[[measured - low], [high - measured]],
            fmt="o",
            color=colour,
            capsize=5,
            linewidth=2,
            markersize=6,
            label="measured, 95 % interval" if row == 0 else None,
        )
        ax.plot(
            [claimed],
            [row],
            marker="D",
            color="black",
            linestyle="none",
            markersize=7,
            label="claimed" if row == 0 else None,
        )
        ax.annotate(
            f"claimed {unit_value_text(p.unit, p.claimed)}",
            (claimed, row),
            xytext=(0, 9),
            textcoords="offset points",
            ha="center",
            fontsize=8,
        )
        ax.annotate(
            f"measured {unit_value_text(p.unit, p.measured)} {unit_interval_text(p.unit, p.low, p.high)}",
            (measured, row),
            xytext=(0, -14),
            textcoords="offset points",
            ha="center",
            fontsize=8,
            color=colour,
        )
    ax.set_yticks(rows, [p.label for p in points])
    ax.set_ylim(len(points) - 0.4, -0.6)
    lo = scale * min(min(p.low, p.claimed) for p in points) if points else 0.0
    hi = scale * max(max(p.high, p.claimed) for p in points) if points else scale
    pad = max(0.02 * scale, 0.15 * (hi - lo))
    ax.set_xlim(max(0.0, lo - pad), min(scale, hi + pad))
    ax.set_xlabel("%" if percent else "fraction")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(loc="lower left", bbox_to_anchor=(0.0, 1.0), ncols=2, fontsize=8, frameon=False)
    return _png(fig)
