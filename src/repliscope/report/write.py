"""Write a run's or a sweep's report to a file."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

from repliscope.errors import RepliscopeError
from repliscope.evaluation.record import EvaluationRecord
from repliscope.pitfalls.result import SweepResult
from repliscope.report.sections import embed_sink
from repliscope.report.view import ExtraFigure, ImageSink

ReportFormat = Literal["html", "md"]
ImageMode = Literal["auto", "embed", "files"]
IMAGE_MODES: tuple[str, ...] = ("auto", "embed", "files")
FORMATS: tuple[str, ...] = ("html", "md")


def images_dir(out_path: Path) -> Path:
    """Where ``images="files"`` puts a Markdown report's PNGs: ``<stem>_files/`` beside it."""
    return out_path.with_name(f"{out_path.stem}_files")


def write_report(
    obj: EvaluationRecord | SweepResult,
    fmt: str,
    out_path: Path | str,
    records: Mapping[str, EvaluationRecord] | None = None,
    extra_figures: Sequence[ExtraFigure] | None = None,
    images: ImageMode = "auto",
) -> Path:
    """Render ``obj`` as ``fmt`` (``html`` or ``md``) into ``out_path`` (parents created); returns the path.

    HTML always embeds its images (one self-contained file). Markdown: ``images="files"`` writes the PNGs to
    ``<stem>_files/`` next to the ``.md`` and links them relatively; ``"embed"`` puts them in the text as data
    URIs; ``"auto"`` (the default) means files for a sweep (dozens of images: megabytes of base64 otherwise)
    and embed for a run (two small charts). ``records`` is used for sweeps only (variant records, for the
    flipped samples).
    """
    from repliscope.report.html import render_run_html, render_sweep_html
    from repliscope.report.markdown import files_sink, render_run_markdown, render_sweep_markdown

    if fmt not in FORMATS:
        raise RepliscopeError(f"unknown report format '{fmt}' (allowed: {', '.join(FORMATS)})")
    if images not in IMAGE_MODES:
        raise RepliscopeError(f"unknown image mode '{images}' (allowed: {', '.join(IMAGE_MODES)})")
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "html":
        if isinstance(obj, SweepResult):
            text = render_sweep_html(obj, records, extra_figures)
        else:
            text = render_run_html(obj, extra_figures)
    else:
        target = images_dir(out)
        as_files = images == "files" or (images == "auto" and isinstance(obj, SweepResult))
        sink: ImageSink = files_sink(target, target.name) if as_files else embed_sink
        if isinstance(obj, SweepResult):
            text = render_sweep_markdown(obj, records, extra_figures, sink)
        else:
            text = render_run_markdown(obj, extra_figures, sink)
    out.write_text(text, encoding="utf-8")
    return out
