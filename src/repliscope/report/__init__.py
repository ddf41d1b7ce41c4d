"""Self-contained reproducibility reports (HTML and Markdown) of an evaluation run or a pitfall sweep.

Public API::

    render_run_html(record, extra_figures=None) -> str
    render_sweep_html(sweep, records=None, extra_figures=None) -> str
    render_run_markdown(record, extra_figures=None, sink=embed_sink) -> str
    render_sweep_markdown(sweep, records=None, extra_figures=None, sink=embed_sink) -> str
    write_report(obj, fmt, out_path, records=None, extra_figures=None, images="embed") -> Path

``extra_figures`` is a list of ``(title, png_bytes)`` shown in a ``layer-diff`` section. Names are imported
lazily: importing this package imports neither jinja2 nor matplotlib.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from repliscope.report.html import render_run_html, render_sweep_html
    from repliscope.report.markdown import render_run_markdown, render_sweep_markdown
    from repliscope.report.write import write_report

_EXPORTS = {
    "render_run_html": "repliscope.report.html",
    "render_sweep_html": "repliscope.report.html",
    "render_run_markdown": "repliscope.report.markdown",
    "render_sweep_markdown": "repliscope.report.markdown",
    "write_report": "repliscope.report.write",
}

__all__ = ["render_run_html", "render_run_markdown", "render_sweep_html", "render_sweep_markdown", "write_report"]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'repliscope.report' has no attribute {name!r}")
