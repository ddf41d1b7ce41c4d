"""Server paths off the pages of non-admin viewers (the rule and the text rewrite:
:mod:`repliscope.service.redaction`, shared with the API): a stored run names the ONNX export in the server's model
cache, the dataset's folder, the interpreter's prefix, ... A viewer sees each absolute path relative to a named
root (``<model cache>/onnx/x.onnx``, ``<python prefix>/lib/...``, ``~/...``) or, outside every root, as
``…/<last two parts>``; an admin sees the paths as stored."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from repliscope.service.redaction import hide_paths, named_roots, redact_view

__all__ = ["hide_paths", "named_roots", "redact_compare", "redact_view"]


def redact_compare(page: Any, roots: Sequence[tuple[str, str]]) -> Any:
    """A copy of a compare page (:class:`repliscope.service.web.views.ComparePage`) whose pipeline and stack rows
    and reasons show no absolute server path."""

    def lines(rows: list[Any]) -> list[Any]:
        return [dataclasses.replace(d, a=hide_paths(d.a, roots), b=hide_paths(d.b, roots)) for d in rows]

    return dataclasses.replace(
        page, pipeline=lines(page.pipeline), stack=lines(page.stack), why=[hide_paths(w, roots) for w in page.why]
    )
