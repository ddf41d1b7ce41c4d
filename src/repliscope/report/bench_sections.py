"""The report of benchmark records (one configuration, or a runtime x threads matrix): performance claim verdicts,
a table of configurations with ratios to the fastest, latency ECDFs per configuration, provenance.

matplotlib is imported inside :func:`ecdf_chart` only.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from repliscope.bench.matrix import ratio_rows
from repliscope.bench.record import BenchmarkRecord
from repliscope.report import sections as sec
from repliscope.report.view import (
    ClaimRow,
    ExtraFigure,
    FigureView,
    Image,
    ImageSink,
    MetricRow,
    ReportView,
    Section,
)

_VERDICT_CSS = {"consistent": "ok", "inconsistent": "bad", "not comparable": "neutral"}


def config_label(rec: BenchmarkRecord) -> str:
    return f"{rec.runtime['runtime']} · {rec.threads} thread{'s' if rec.threads != 1 else ''}"


def ecdf_chart(records: Sequence[BenchmarkRecord]) -> bytes:
    """One empirical CDF of the per-query latency (ms; a log axis when they span more than 8x) per configuration,
    p50 / p90 / p99 marked."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.5, 3.4), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for rec in records:
        ms = np.sort(rec.latencies_ms())
        ax.step(
            ms,
            np.arange(1, len(ms) + 1) / len(ms),
            where="post",
            linewidth=1.2,
            label=f"{config_label(rec)} (n={len(ms)})",
        )
    for p in (0.5, 0.9, 0.99):
        ax.axhline(p, color="#7f8c8d", linewidth=0.6, linestyle=":")
    low = min(float(r.latencies_ms().min()) for r in records)
    high = max(float(r.latencies_ms().max()) for r in records)
    log = low > 0 and high / low > 8  # a log axis only when the latencies span an order of magnitude
    if log:
        ax.set_xscale("log")
    what = "latency" if records[0].scenario != "offline" else "sample completion since the query was issued"
    ax.set_xlabel(f"{what} (ms{', log scale' if log else ''})")
    ax.set_ylabel("fraction of queries ≤ x")
    ax.set_ylim(0, 1.005)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def claim_rows(records: Sequence[BenchmarkRecord]) -> list[ClaimRow]:
    """Every configuration's performance claim verdicts (values in the claim's unit: ms or samples/s)."""
    rows = []
    for rec in records:
        for c in rec.claims:
            unit = "samples/s" if c.metric == "throughput" else "ms"
            interval = "" if c.ci_low is None or c.ci_high is None else f"[{c.ci_low:.4g}, {c.ci_high:.4g}] {unit}"
            source = c.source
            rows.append(
                ClaimRow(
                    metric=c.metric,
                    claimed=f"{c.claimed:.4g} {unit}",
                    measured="-" if c.measured is None else f"{c.measured:.4g} {unit}",
                    interval=interval,
                    claim_dataset=c.claim_dataset,
                    evaluated_dataset=c.evaluated_dataset,
                    verdict=c.verdict,
                    css=_VERDICT_CSS.get(c.verdict, "neutral"),
                    reason=c.reason,
                    source=source,
                    source_url=source.split()[0] if source.startswith(("https://", "http://")) else None,
                    direction=c.direction,
                )
            )
    return rows


def config_rows(records: Sequence[BenchmarkRecord]) -> list[MetricRow]:
    """One row per configuration: the scenario metric with its interval, ratio to the fastest, throughput."""
    out = []
    for rec, row in zip(records, ratio_rows(records), strict=True):
        key = row["metric"].split()[0]
        q = rec.latency.percentiles.get(key)
        interval = "" if q is None or q.low is None or q.high is None else f"[{q.low:.3f}, {q.high:.3f}]"
        out.append(
            MetricRow(
                name=config_label(rec),
                value=f"{row['metric']}: {row['value']:.3f}",
                interval=interval,
                count=(
                    f"{row['ratio_to_fastest']:.2f}× · {rec.throughput_samples_per_second:.1f} "
                    f"samples/s · {rec.queries} queries{'' if rec.valid else ' · not valid'}"
                ),
            )
        )
    return out


def latency_stats(records: Sequence[BenchmarkRecord]) -> list[tuple[str, str]]:
    stats = []
    for rec in records:
        p = {k: f"{q.value:.3f}" for k, q in rec.latency.percentiles.items()}
        o = rec.overhead
        stats.append(
            (
                config_label(rec),
                f"p50 {p['p50']} · p90 {p['p90']} · p99 {p['p99']} · p99.9 {p['p999']} ms; "
                f"no-op harness {o.latency_p50_us:.1f} µs/query",
            )
        )
    return stats


def layer_figures(records: Sequence[BenchmarkRecord], traces: Sequence[Mapping[str, Any] | None]) -> list[ExtraFigure]:
    """The per-layer bar chart of every configuration traced at the ``framework`` or ``library`` level
    (``traces[i]``: the Chrome trace of ``records[i]``, None when not traced); titled by configuration."""
    from repliscope.report.trace_sections import trace_figures

    return [
        (f"{title} · {config_label(rec)}", png)
        for rec, doc in zip(records, traces, strict=True)
        if doc is not None
        for title, png in trace_figures(doc)
    ]


def build_benchmark_view(
    records: Sequence[BenchmarkRecord],
    sink: ImageSink = sec.embed_sink,
    traces: Sequence[Mapping[str, Any] | None] | None = None,
) -> ReportView:
    """The report of one benchmark or of the records of one matrix run (same manifest and scenario);
    ``traces`` (one Chrome trace or None per record) adds a "Per-layer time" section for the traced ones."""
    if not records:
        raise ValueError("no benchmark record to report")
    first = records[0]
    s = first.settings
    extra = layer_figures(records, traces) if traces is not None else []
    sections = [
        Section("claim", "Claims"),
        Section("bench", "Configurations"),
        Section("latency", "Latency distribution"),
        Section("provenance", "Provenance"),
    ]
    if extra:
        sections.insert(3, Section("layer-diff", "Per-layer time"))  # the template of extra figures
    caption = (
        f"Empirical CDF of every measured query's latency, {first.scenario}, batch {s['batch_size']}"
        + (", decode + pre-processing timed" if s.get("timed_preprocess") else ", inputs pre-processed before timing")
        + ". Dotted lines: p50, p90, p99."
    )
    figure = FigureView(
        "Latency ECDF per configuration",
        Image(sink("latency-ecdf", ecdf_chart(records)), "latency ECDF per configuration"),
        caption,
    )
    options: dict[str, Any] = {k: v for k, v in s.items()}
    return ReportView(
        kind="benchmark",
        title=f"{first.manifest.name} {first.manifest.version}: {first.scenario} benchmark",
        object_id=first.matrix_id or first.benchmark_id,
        created_at=f"{first.created_at:%Y-%m-%d %H:%M:%S %Z}".strip(),
        repliscope_version=first.repliscope_version,
        description=sec.manifest_description(first.manifest),
        sections=sections,
        claims=claim_rows(records),
        claim_figure=None,
        metrics=config_rows(records),
        no_claims="The manifest makes no performance claim (latency_p90_ms, latency_p99_ms or throughput); its "
        "accuracy claims, if any, are judged by repliscope evaluate.",
        metrics_note=(
            "Percentiles are LoadGen's order statistic; intervals are distribution-free 95 % "
            "(order statistics); ratio against the fastest configuration."
        ),
        provenance=sec.provenance(
            first.manifest, first.pipeline, first.runtime, first.software, first.hardware, first.dataset, options
        ),
        latency=figure,
        latency_stats=latency_stats(records),
        extra_figures=sec.extra_figure_views(extra, sink),
    )
