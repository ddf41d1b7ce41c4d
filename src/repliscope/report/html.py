"""Self-contained HTML reports: inline CSS, every image a ``data:`` URI, no script, nothing fetched."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from repliscope.evaluation.record import EvaluationRecord
from repliscope.pitfalls.result import SweepResult
from repliscope.report.build import build_run_view, build_sweep_view
from repliscope.report.templating import html_environment
from repliscope.report.view import ExtraFigure, ReportView


def render_view_html(view: ReportView) -> str:
    """Lay out a built view with the HTML template."""
    return str(html_environment().get_template("report.html.j2").render(view=view))


def render_run_html(record: EvaluationRecord, extra_figures: Sequence[ExtraFigure] | None = None) -> str:
    """HTML report of one evaluation run: claim, metrics, failures, latency, provenance (+ layer-diff)."""
    return render_view_html(build_run_view(record, extra_figures))


def render_sweep_html(
    sweep: SweepResult,
    records: Mapping[str, EvaluationRecord] | None = None,
    extra_figures: Sequence[ExtraFigure] | None = None,
) -> str:
    """HTML report of a pitfall sweep: claim, reference metrics, pitfall table, deltas chart, visual testing,
    provenance (+ layer-diff). ``records`` (by run id or variant name) adds the flipped samples per variant."""
    return render_view_html(build_sweep_view(sweep, records, extra_figures))
