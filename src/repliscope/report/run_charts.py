"""Charts across stored runs as accessible SVG: a metric across runs grouped by runtime, stack, framework version,
variant, dataset or model (:func:`metric_chart_svg`, from :func:`repliscope.store.run_charts.chart_data`), and the
parallel coordinates of a pitfall sweep (:func:`sweep_parallel`, :func:`parallel_svg`).

Drawn here from computed coordinates rather than by matplotlib: every point and line is an ``<a>`` to its run with
an ``aria-label`` saying what it is, the SVG has a ``<title>`` and ``<desc>``, text stays text (crisp at any zoom,
searchable, copyable), and a chart of 500 runs is a few dozen kilobytes drawn in milliseconds. The layout
(:func:`metric_layout`, :func:`parallel_layout`) is plain data so the tests check coordinates, not pixels. No
script: hovering or focusing a line thickens it through the SVG's own ``<style>``; the chosen run is drawn
highlighted by the server.
"""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from repliscope.tasks.metric_text import unit_interval_text, unit_value_text

if TYPE_CHECKING:
    from repliscope.pitfalls.result import SweepResult
    from repliscope.store.run_charts import ChartData

SVG_NS = "http://www.w3.org/2000/svg"
INK = "#1f2933"
GRID = "#d5dbe1"
POINT = "#1d4ed8"
CLAIM = "#b45309"
BASELINE = "#b91c1c"
CHOSEN = "#047857"
LINE = "#64748b"
FONT = "system-ui, -apple-system, 'Segoe UI', sans-serif"
MAX_LABEL_CHARS = 22
"""Axis labels longer than this are cut with an ellipsis (the point's own label and the table keep the whole)."""
DEFAULT = "default"
"""A parallel-coordinates parameter value of a variant run at its default degree (or not having the parameter)."""

RunHref = Callable[[str], str] | None
"""Run id -> the link of its point or line (None: no links, e.g. a file the CLI writes)."""


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """About ``count`` round ticks (steps of 1, 2, 2.5 or 5 times a power of ten) covering ``[low, high]``."""
    if not (math.isfinite(low) and math.isfinite(high)):
        raise ValueError(f"ticks of a non-finite range [{low}, {high}]")
    if high <= low:
        pad = abs(low) * 0.05 or 0.05
        low, high = low - pad, high + pad
    raw = (high - low) / max(1, count - 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    first = math.floor(low / step + 1e-9) * step
    ticks = []
    tick = first
    while tick < high + step * 0.999:
        ticks.append(round(tick, 12))
        tick += step
    return ticks


def _tick_text(unit: str, tick: float, step: float) -> str:
    scale = 100 if unit == "percent" else 1
    if step <= 0:
        return f"{tick * scale:g}"
    exponent = math.floor(math.log10(step * scale) + 1e-9)
    halves = abs(step * scale / 10**exponent - 2.5) < 1e-6  # a step of 2.5, 0.25, ... needs one more digit
    decimals = max(0, -exponent + (1 if halves else 0))
    return f"{tick * scale:.{decimals}f}"


def _cut(text: str, chars: int = MAX_LABEL_CHARS) -> str:
    return text if len(text) <= chars else text[: chars - 1] + "…"


# --- the metric chart -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PlacedPoint:
    """A run's point: centre ``(x, y)`` and its interval bar from ``y_low`` to ``y_high`` (None: no interval)."""

    run_id: str
    x: float
    y: float
    y_low: float | None
    y_high: float | None
    label: str


@dataclass(frozen=True)
class MetricLayout:
    """Where everything goes, in SVG user units: the plot box, the y ticks ``(y, text)``, each group's band
    ``(label, x_left, x_right)``, each point and each claim line ``(y, text)``."""

    width: float
    height: float
    left: float
    top: float
    right: float
    bottom: float
    y_ticks: tuple[tuple[float, str], ...]
    bands: tuple[tuple[str, float, float], ...]
    points: tuple[PlacedPoint, ...]
    claim_lines: tuple[tuple[float, str], ...]


BAND_MIN = 44.0
PLOT_WIDTH = 880.0
PLOT_HEIGHT = 300.0
MARGIN_LEFT, MARGIN_TOP, MARGIN_RIGHT, MARGIN_BOTTOM = 72.0, 24.0, 24.0, 120.0


def _unit_suffix(unit: str) -> str:
    return " (%)" if unit == "percent" else ""


def metric_layout(data: ChartData) -> MetricLayout:
    """The coordinates of ``data``'s chart: one band per group (at least :data:`BAND_MIN` wide), the group's runs
    spread evenly across it oldest first, y from the smallest to the largest value, interval end and claim."""
    unit = data.metric.unit
    n_groups = max(1, len(data.groups))
    plot_width = max(PLOT_WIDTH, n_groups * BAND_MIN)
    left, top = MARGIN_LEFT, MARGIN_TOP
    right, bottom = left + plot_width, top + PLOT_HEIGHT
    values = [v for p in data.points for v in (p.value, p.low, p.high) if v is not None]
    values += [c.value for c in data.claims]
    low, high = (min(values), max(values)) if values else (0.0, 1.0)
    ticks = nice_ticks(low, high)
    y_min, y_max = ticks[0], ticks[-1]

    def y_of(value: float) -> float:
        return bottom - (value - y_min) / (y_max - y_min) * (bottom - top)

    step = ticks[1] - ticks[0] if len(ticks) > 1 else 1.0
    band = plot_width / n_groups
    bands = tuple((g, left + i * band, left + (i + 1) * band) for i, g in enumerate(data.groups))
    members: dict[str, list[Any]] = {g: [] for g in data.groups}
    for p in data.points:
        members[p.group].append(p)
    placed = []
    for group, x0, x1 in bands:
        runs = members[group]
        for i, p in enumerate(runs):
            x = x0 + (x1 - x0) * (i + 1) / (len(runs) + 1)
            label = (
                f"run {p.run_id[:12]}, {group}: {data.metric.name} {unit_value_text(unit, p.value)}"
                f" {unit_interval_text(unit, p.low, p.high)}, {p.model} on {p.runtime}, {p.dataset}"
            )
            placed.append(
                PlacedPoint(
                    run_id=p.run_id,
                    x=round(x, 2),
                    y=round(y_of(p.value), 2),
                    y_low=None if p.low is None else round(y_of(p.low), 2),
                    y_high=None if p.high is None else round(y_of(p.high), 2),
                    label=label,
                )
            )
    claims = tuple((round(y_of(c.value), 2), f"claim {c.model} {unit_value_text(unit, c.value)}") for c in data.claims)
    return MetricLayout(
        width=right + MARGIN_RIGHT,
        height=bottom + MARGIN_BOTTOM,
        left=left,
        top=top,
        right=right,
        bottom=bottom,
        y_ticks=tuple((round(y_of(t), 2), _tick_text(unit, t, step)) for t in ticks),
        bands=bands,
        points=tuple(placed),
        claim_lines=claims,
    )


def _svg_root(width: float, height: float, css_class: str, title: str, desc: str, key: str) -> ET.Element:
    root = ET.Element(
        "svg",
        {
            "xmlns": SVG_NS,
            "class": css_class,
            "width": f"{width:g}",
            "height": f"{height:g}",
            "viewBox": f"0 0 {width:g} {height:g}",
            "font-family": FONT,
            "font-size": "12",
            "aria-labelledby": f"{key}-title {key}-desc",
        },
    )
    ET.SubElement(root, "title", {"id": f"{key}-title"}).text = title
    ET.SubElement(root, "desc", {"id": f"{key}-desc"}).text = desc
    return root


def _text(parent: ET.Element, x: float, y: float, text: str, **attrs: str) -> ET.Element:
    element = ET.SubElement(parent, "text", {"x": f"{x:g}", "y": f"{y:g}", "fill": INK, **attrs})
    element.text = text
    return element


def _line(parent: ET.Element, x1: float, y1: float, x2: float, y2: float, **attrs: str) -> ET.Element:
    return ET.SubElement(parent, "line", {"x1": f"{x1:g}", "y1": f"{y1:g}", "x2": f"{x2:g}", "y2": f"{y2:g}", **attrs})


def _link(parent: ET.Element, run_id: str, label: str, run_href: RunHref, **attrs: str) -> ET.Element:
    if run_href is None:
        group = ET.SubElement(parent, "g", attrs)
        ET.SubElement(group, "title").text = label
        return group
    link = ET.SubElement(parent, "a", {"href": run_href(run_id), "aria-label": label, **attrs})
    ET.SubElement(link, "title").text = label
    return link


def metric_chart_title(data: ChartData) -> str:
    """``top1 by runtime: 12 runs`` (the chart's title)."""
    from repliscope.store.run_charts import GROUPINGS

    n = len(data.points)
    return f"{data.metric.name} by {GROUPINGS[data.by].lower()}: {n} run{'s' if n != 1 else ''}"


def metric_chart_svg(data: ChartData, run_href: RunHref = None, key: str = "chart") -> str:
    """``data``'s chart as an SVG document: each run a point with its 95 % interval as an error bar, each claim a
    dashed reference line, each point a link (``run_href``) labelled with its run, group and value."""
    from repliscope.store.run_charts import GROUPINGS

    layout = metric_layout(data)
    unit = data.metric.unit
    desc = (
        f"Each point is a stored run of the {data.metric.task.replace('_', ' ')} task, its vertical bar the 95 % "
        f"interval of {data.metric.name}; runs are grouped along the x axis by {GROUPINGS[data.by].lower()}"
        + (f"; dashed lines are the claims ({len(data.claims)})." if data.claims else ".")
    )
    root = _svg_root(layout.width, layout.height, "run-chart", metric_chart_title(data), desc, key)
    ET.SubElement(
        root, "style"
    ).text = ".run-chart a:hover circle, .run-chart a:focus circle { r: 7px; fill: #0b3aa8; }"
    ET.SubElement(
        root,
        "rect",
        {
            "x": "0",
            "y": "0",
            "width": f"{layout.width:g}",
            "height": f"{layout.height:g}",
            "fill": "#fff",
            "pointer-events": "none",
        },
    )
    axes = ET.SubElement(root, "g", {"class": "axes"})
    for y, text in layout.y_ticks:
        _line(axes, layout.left, y, layout.right, y, stroke=GRID)
        _text(axes, layout.left - 8, y + 4, text, **{"text-anchor": "end"})
    for i, (_group, x0, _x1) in enumerate(layout.bands):
        if i:
            _line(axes, x0, layout.top, x0, layout.bottom, stroke=GRID, **{"stroke-dasharray": "2 3"})
    _line(axes, layout.left, layout.bottom, layout.right, layout.bottom, stroke=INK)
    _line(axes, layout.left, layout.top, layout.left, layout.bottom, stroke=INK)
    for group, x0, x1 in layout.bands:
        x, y = (x0 + x1) / 2, layout.bottom + 14
        label = _text(axes, x, y, _cut(group), transform=f"rotate(-35 {x:g} {y:g})", **{"text-anchor": "end"})
        if len(group) > MAX_LABEL_CHARS:
            ET.SubElement(label, "title").text = group
    mid_y = (layout.top + layout.bottom) / 2
    _text(
        axes,
        16,
        mid_y,
        f"{data.metric.name}{_unit_suffix(unit)}",
        transform=f"rotate(-90 16 {mid_y:g})",
        **{"text-anchor": "middle", "font-weight": "bold"},
    )
    _text(
        axes,
        (layout.left + layout.right) / 2,
        layout.height - 8,
        GROUPINGS[data.by],
        **{"text-anchor": "middle", "font-weight": "bold"},
    )
    claims = ET.SubElement(root, "g", {"class": "claims"})
    for y, text in layout.claim_lines:
        _line(
            claims, layout.left, y, layout.right, y, stroke=CLAIM, **{"stroke-dasharray": "6 4", "stroke-width": "1.5"}
        )
        _text(
            claims,
            layout.right - 4,
            y - 4,
            text,
            fill=CLAIM,
            **{"text-anchor": "end", "paint-order": "stroke", "stroke": "#fff", "stroke-width": "3"},
        )
    points = ET.SubElement(root, "g", {"class": "points", "fill": POINT, "stroke": POINT, "stroke-width": "1.5"})
    for p in layout.points:  # colours inherited from the group: a 500-run chart stays small
        link = _link(points, p.run_id, p.label, run_href, **{"class": "point"})
        if p.y_low is not None and p.y_high is not None:  # the interval bar and its two caps, one path
            bar = f"M{p.x:g} {p.y_low:g}V{p.y_high:g}M{p.x - 4:g} {p.y_low:g}h8M{p.x - 4:g} {p.y_high:g}h8"
            ET.SubElement(link, "path", {"class": "interval", "d": bar})
        ET.SubElement(link, "circle", {"cx": f"{p.x:g}", "cy": f"{p.y:g}", "r": "5", "stroke": "#fff"})
    return ET.tostring(root, encoding="unicode")


# --- parallel coordinates of a sweep --------------------------------------------------------------------------


@dataclass(frozen=True)
class ParallelAxis:
    """One axis: ``kind`` ``category`` (``values`` in axis order, bottom to top) or ``number`` (``low``/``high``;
    ``values`` then holds :data:`DEFAULT` when some runs have no value, drawn below the range)."""

    name: str
    kind: str
    values: tuple[str, ...] = ()
    low: float = 0.0
    high: float = 0.0


@dataclass(frozen=True)
class ParallelLine:
    """One run of the sweep: its variant, its value on each axis (by axis name: a category's text, a number, or
    :data:`DEFAULT`), the metric's value and interval."""

    run_id: str
    variant: str
    values: dict[str, Any]
    metric: float
    low: float | None
    high: float | None
    reference: bool


@dataclass(frozen=True)
class ParallelData:
    """A sweep's parallel coordinates: ``axes`` (the variant, each varied parameter, the metric), ``lines`` (one
    per variant run with a value, the reference first) and ``left_out`` (variant name, why) of the others."""

    sweep_id: str
    metric: str
    unit: str
    metrics: tuple[str, ...]
    axes: tuple[ParallelAxis, ...]
    lines: tuple[ParallelLine, ...]
    left_out: tuple[tuple[str, str], ...]


def _param_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def sweep_parallel(sweep: SweepResult, metric: str | None = None) -> ParallelData:
    """The parallel coordinates of ``sweep``: one axis for the variant (its registered pitfall), one per parameter
    whose value differs between the sweep's runs, one for ``metric`` (default: the reference's first metric, the
    task's headline); one line per variant run that has the metric. An unknown ``metric`` is an
    :class:`~repliscope.store.errors.InvalidInputError` (field ``metric``) naming the sweep's metrics."""
    from repliscope.store.errors import InvalidInputError
    from repliscope.store.run_charts import chart_metrics

    outcomes = [sweep.reference, *sweep.variants]
    names: list[str] = []
    for o in outcomes:
        names += [m.name for m in o.metrics if m.name not in names]
    metrics = chart_metrics()
    headline = next((n for n in names if n in metrics and metrics[n].headline), names[0] if names else "")
    chosen = metric or headline
    if chosen not in names:
        raise InvalidInputError(
            f"sweep {sweep.sweep_id[:12]} has no metric {chosen[:60]!r} (allowed: {', '.join(names) or 'none'})",
            "metric",
        )
    spec = metrics.get(chosen)
    drawn, left_out = [], []
    for o in outcomes:
        m = o.metric(chosen)
        if o.status != "ok" or o.run_id is None or m is None:
            left_out.append((o.name, o.reason or (o.status if o.status != "ok" else f"no {chosen} value")))
        else:
            drawn.append((o, m))
    params: list[str] = []
    for o, _m in drawn:
        params += [p for p in o.params if p not in params]
    axes = [ParallelAxis("variant", "category", tuple(dict.fromkeys(_variant_of(o) for o, _m in drawn)))]
    for p in params:
        raw = [o.params.get(p, DEFAULT) for o, _m in drawn]
        if len({_param_text(v) for v in raw}) < 2:
            continue  # not varied: every run has the same value
        numbers = [v for v in raw if v != DEFAULT]
        if numbers and all(_is_number(v) for v in numbers):
            missing = (DEFAULT,) if any(v == DEFAULT for v in raw) else ()
            axes.append(ParallelAxis(p, "number", missing, float(min(numbers)), float(max(numbers))))
        else:
            texts = sorted({_param_text(v) for v in numbers})
            axes.append(ParallelAxis(p, "category", (DEFAULT, *texts) if DEFAULT in raw else tuple(texts)))
    values = [m.value for _o, m in drawn] + [v for _o, m in drawn for v in (m.ci_low, m.ci_high) if v is not None]
    axes.append(ParallelAxis(chosen, "number", (), min(values, default=0.0), max(values, default=1.0)))
    lines = []
    for o, m in drawn:
        at: dict[str, Any] = {"variant": _variant_of(o)}
        for axis in axes[1:-1]:
            v = o.params.get(axis.name, DEFAULT)
            at[axis.name] = v if axis.kind == "number" or v == DEFAULT else _param_text(v)
        at[chosen] = m.value
        lines.append(ParallelLine(o.run_id or "", o.name, at, m.value, m.ci_low, m.ci_high, o is sweep.reference))
    return ParallelData(
        sweep_id=sweep.sweep_id,
        metric=chosen,
        unit=spec.unit if spec is not None else "fraction",
        metrics=tuple(names),
        axes=tuple(axes),
        lines=tuple(lines),
        left_out=tuple(left_out),
    )


def _variant_of(outcome: Any) -> str:
    """The variant axis' value: ``reference``, else the registered pitfall (its name without a degree)."""
    if outcome.name == "reference":
        return "reference"
    return str(outcome.pitfall or outcome.name.split("[", 1)[0])


@dataclass(frozen=True)
class PlacedLine:
    run_id: str
    points: tuple[tuple[float, float], ...]
    reference: bool
    chosen: bool
    label: str


@dataclass(frozen=True)
class ParallelLayout:
    """The axes ``(name, x, ticks)`` with ticks ``(y, text)``, and one polyline per run."""

    width: float
    height: float
    top: float
    bottom: float
    axes: tuple[tuple[str, float, tuple[tuple[float, str], ...]], ...]
    lines: tuple[PlacedLine, ...]


AXIS_GAP = 170.0
PC_LEFT, PC_TOP, PC_BOTTOM_MARGIN, PC_HEIGHT = 150.0, 40.0, 40.0, 320.0
DEFAULT_SLOT = 0.12
"""The share of a number axis below its range where runs without a value (:data:`DEFAULT`) sit."""


def _axis_scale(
    axis: ParallelAxis, unit: str, is_metric: bool, top: float, bottom: float
) -> tuple[Callable[[Any], float], tuple[tuple[float, str], ...]]:
    if axis.kind == "category":
        n = len(axis.values)
        spots = {v: bottom - (bottom - top) * ((i + 0.5) / n) for i, v in enumerate(axis.values)}
        return (lambda v: spots[v]), tuple((round(y, 2), _cut(v, 20)) for v, y in spots.items())
    range_bottom = bottom - (bottom - top) * DEFAULT_SLOT if axis.values else bottom
    ticks = nice_ticks(axis.low, axis.high)
    t0, t1 = ticks[0], ticks[-1]

    def y_of(v: Any) -> float:
        if v == DEFAULT:
            return bottom
        return range_bottom - (float(v) - t0) / (t1 - t0) * (range_bottom - top)

    step = ticks[1] - ticks[0] if len(ticks) > 1 else 1.0
    shown = tuple((round(y_of(t), 2), _tick_text(unit, t, step) if is_metric else f"{t:g}") for t in ticks) + (
        ((round(bottom, 2), DEFAULT),) if axis.values else ()
    )
    return y_of, shown


def parallel_layout(data: ParallelData, chosen: str | None = None) -> ParallelLayout:
    """The coordinates of ``data``: the axes :data:`AXIS_GAP` apart, each run a polyline through its values;
    the reference and the ``chosen`` run id marked."""
    top, bottom = PC_TOP, PC_TOP + PC_HEIGHT
    scales = []
    axes = []
    for i, axis in enumerate(data.axes):
        is_metric = i == len(data.axes) - 1
        y_of, ticks = _axis_scale(axis, data.unit, is_metric, top, bottom)
        x = PC_LEFT + i * AXIS_GAP
        scales.append((axis.name, x, y_of))
        name = f"{axis.name}{_unit_suffix(data.unit)}" if is_metric else axis.name
        axes.append((name, x, ticks))
    lines = []
    for line in data.lines:
        points = tuple((x, round(y_of(line.values[name]), 2)) for name, x, y_of in scales)
        parts = [f"{k} {v if k != data.metric else unit_value_text(data.unit, v)}" for k, v in line.values.items()]
        label = (
            f"run {line.run_id[:12]}, {line.variant}"
            + (" (the reference)" if line.reference else "")
            + ": "
            + ", ".join(parts[1:])
            + f" {unit_interval_text(data.unit, line.low, line.high)}"
        )
        lines.append(PlacedLine(line.run_id, points, line.reference, line.run_id == chosen, label))
    width = PC_LEFT + (len(data.axes) - 1) * AXIS_GAP + 90
    return ParallelLayout(width, bottom + PC_BOTTOM_MARGIN, top, bottom, tuple(axes), tuple(lines))


def parallel_svg(data: ParallelData, run_href: RunHref = None, chosen: str | None = None, key: str = "pc") -> str:
    """``data`` as an SVG document: one vertical axis each, one polyline per run (a link to it), the reference
    drawn thick in red, the ``chosen`` run thick in green, any other line thickened while hovered or focused."""
    layout = parallel_layout(data, chosen)
    n = len(layout.lines)
    title = f"Parallel coordinates of sweep {data.sweep_id[:12]}: {n} run{'s' if n != 1 else ''}, {data.metric}"
    desc = (
        "One vertical axis for the variant, one per parameter the sweep varies and one for "
        f"{data.metric}; each line is a run of the sweep through its values. The reference is the thick red line"
        + ("; the chosen run the thick green one." if chosen and any(x.chosen for x in layout.lines) else ".")
    )
    root = _svg_root(layout.width, layout.height, "parallel-chart", title, desc, key)
    ET.SubElement(
        root, "style"
    ).text = (
        ".parallel-chart a:hover .pc-path, .parallel-chart a:focus .pc-path { stroke-width: 5px; stroke-opacity: 1; }"
    )
    ET.SubElement(
        root,
        "rect",
        {
            "x": "0",
            "y": "0",
            "width": f"{layout.width:g}",
            "height": f"{layout.height:g}",
            "fill": "#fff",
            "pointer-events": "none",
        },
    )
    drawn = ET.SubElement(root, "g", {"class": "lines"})
    ordered = sorted(layout.lines, key=lambda x: (x.reference or x.chosen, x.chosen))  # highlighted on top
    for line in ordered:
        colour, width, cls = (
            (CHOSEN, "4", "chosen")
            if line.chosen
            else (BASELINE, "4", "reference")
            if line.reference
            else (LINE, "1.8", "run")
        )
        link = _link(drawn, line.run_id, line.label, run_href, **{"class": f"pc-line {cls}"})
        points = " ".join(f"{x:g},{y:g}" for x, y in line.points)
        hit = {"class": "pc-hit", "points": points, "fill": "none", "stroke": "#fff", "stroke-opacity": "0"}
        ET.SubElement(link, "polyline", {**hit, "stroke-width": "12", "pointer-events": "stroke"})  # easy to hover
        ET.SubElement(
            link,
            "polyline",
            {
                "class": "pc-path",
                "points": points,
                "fill": "none",
                "stroke": colour,
                "stroke-width": width,
                "stroke-opacity": "1" if cls != "run" else "0.75",
                "stroke-linejoin": "round",
            },
        )
    axes = ET.SubElement(root, "g", {"class": "axes", "pointer-events": "none"})  # a line is clickable on an axis
    for name, x, ticks in layout.axes:
        _line(axes, x, layout.top, x, layout.bottom, stroke=INK, **{"stroke-width": "1.5"})
        _text(axes, x, layout.top - 14, _cut(name, 24), **{"text-anchor": "middle", "font-weight": "bold"})
        for y, text in ticks:
            _line(axes, x - 4, y, x, y, stroke=INK)
            _text(
                axes,
                x - 7,
                y + 4,
                text,
                **{"text-anchor": "end", "paint-order": "stroke", "stroke": "#fff", "stroke-width": "3"},
            )
    return ET.tostring(root, encoding="unicode")


def table_rows(data: ParallelData) -> list[list[str]]:
    """The parallel coordinates as table cells per run (axis order; the metric with its interval)."""
    rows = []
    for line in data.lines:
        cells = []
        for axis in data.axes[:-1]:
            v = line.values[axis.name]
            cells.append(v if isinstance(v, str) else f"{v:g}")
        cells.append(f"{unit_value_text(data.unit, line.metric)} {unit_interval_text(data.unit, line.low, line.high)}")
        rows.append(cells)
    return rows
