"""Markdown reports. Images are embedded as ``data:`` URIs by default (one self-contained file); pass an
:data:`~repliscope.report.view.ImageSink` (e.g. :func:`files_sink`) to write PNGs beside the ``.md`` instead -
some viewers (GitHub among them) do not display data URIs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from repliscope.evaluation.record import EvaluationRecord
from repliscope.pitfalls.result import SweepResult
from repliscope.report.build import build_run_view, build_sweep_view
from repliscope.report.sections import embed_sink
from repliscope.report.templating import markdown_environment
from repliscope.report.view import ExtraFigure, ImageSink, ReportView


def files_sink(directory: Path, link_prefix: str) -> ImageSink:
    """An ImageSink writing ``<directory>/<name>.png`` and linking ``<link_prefix>/<name>.png``."""

    def sink(name: str, png: bytes) -> str:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"{name}.png").write_bytes(png)
        return f"{link_prefix}/{name}.png"

    return sink


def squeeze_blank_lines(text: str) -> str:
    """Runs of blank lines as one, except inside fenced code blocks (the manifest text stays verbatim)."""
    out: list[str] = []
    fence: str | None = None
    for line in text.splitlines():
        stripped = line.strip()
        if fence is None and stripped.startswith("```"):
            fence = stripped[: len(stripped) - len(stripped.lstrip("`"))]
        elif fence is not None and stripped == fence:
            fence = None
        elif fence is None and not stripped and (not out or not out[-1].strip()):
            continue
        out.append(line)
    return "\n".join(out).strip() + "\n"


def render_view_markdown(view: ReportView) -> str:
    """Lay out a built view with the Markdown template."""
    return squeeze_blank_lines(str(markdown_environment().get_template("report.md.j2").render(view=view)))


def render_run_markdown(
    record: EvaluationRecord, extra_figures: Sequence[ExtraFigure] | None = None, sink: ImageSink = embed_sink
) -> str:
    """Markdown report of one evaluation run (same sections as the HTML one)."""
    return render_view_markdown(build_run_view(record, extra_figures, sink))


def render_sweep_markdown(
    sweep: SweepResult,
    records: Mapping[str, EvaluationRecord] | None = None,
    extra_figures: Sequence[ExtraFigure] | None = None,
    sink: ImageSink = embed_sink,
) -> str:
    """Markdown report of a pitfall sweep (same sections as the HTML one)."""
    return render_view_markdown(build_sweep_view(sweep, records, extra_figures, sink))
