"""The two jinja2 environments: HTML (autoescape on) and Markdown (every ``{{ }}`` escaped for Markdown).

Templates are package data under ``repliscope/report/templates/``. The Markdown environment cannot use
HTML autoescaping (it would litter the text with ``&#39;``), so its ``finalize`` hook escapes, in every
expression, each ``<`` that could open raw HTML - Markdown renderers pass raw HTML through, so that is what
neutralises injected markup; :class:`markupsafe.Markup` values (fenced code blocks) are left alone.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

from markupsafe import Markup

_WS = re.compile(r"\s+")
_TAG_START = re.compile(r"<(?=[A-Za-z/!?])")


def md_escape(value: Any) -> Any:
    """Escape every ``<`` that could open raw HTML (a tag, ``</``, ``<!``, ``<?``, an autolink) in an
    expression's text; ``p < 0.05`` and ``->`` stay readable. Markup passes through unchanged."""
    if isinstance(value, Markup) or value is None:
        return "" if value is None else value
    return _TAG_START.sub("&lt;", str(value))


def oneline(value: Any) -> str:
    """All whitespace runs (newlines included) as one space."""
    return _WS.sub(" ", str(value)).strip()


def md_cell(value: Any) -> str:
    """Text safe inside a Markdown table cell: one line, ``|`` escaped."""
    return oneline(value).replace("|", "\\|")


def md_alt(value: Any) -> str:
    """Image alt text without the brackets that would end it."""
    return oneline(value).replace("[", "(").replace("]", ")")


def md_fenced(text: str, lang: str = "") -> Markup:
    """A fenced code block longer than any backtick run in ``text`` (so the text cannot close it)."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return Markup(f"{fence}{lang}\n{text.rstrip()}\n{fence}")


def _loader() -> Any:
    from jinja2 import PackageLoader

    return PackageLoader("repliscope.report", "templates")


@cache
def html_environment() -> Any:
    """HTML templates, autoescape on for every template."""
    from jinja2 import Environment, StrictUndefined

    return Environment(
        loader=_loader(),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )


@cache
def markdown_environment() -> Any:
    """Markdown templates: expressions escaped by :func:`md_escape`; filters ``cell``, ``alt``, ``oneline``,
    ``fenced``."""
    from jinja2 import Environment, StrictUndefined

    env = Environment(
        loader=_loader(),
        autoescape=False,
        finalize=md_escape,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters.update(cell=md_cell, alt=md_alt, oneline=oneline, fenced=md_fenced)
    return env
