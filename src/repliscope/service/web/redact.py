"""Server paths off the pages of non-admin viewers: a stored run names the ONNX export in the server's model
cache, the dataset's folder, the interpreter's prefix, ... A viewer sees each absolute path relative to a named
root (``<model cache>/onnx/x.onnx``, ``<python prefix>/lib/...``, ``~/...``) or, outside every root, as
``…/<last two parts>``; an admin sees the paths as stored."""

from __future__ import annotations

import dataclasses
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

_ABS_PATH = re.compile(r"(?<![\w.:/~<>-])(?:/[\w.+@%=-]+)+/?")
"""An absolute POSIX path inside a text (not the path part of a URL: ``://`` precedes those)."""


def named_roots(cache_dir: Path | None) -> list[tuple[str, str]]:
    """``(name, absolute folder)`` of the roots a viewer's paths are shown relative to, longest folder first."""
    from repliscope.evaluation.artifacts import default_cache_dir as default_cache

    roots = [
        ("<model cache>", cache_dir or default_cache()),
        ("<python prefix>", Path(sys.prefix)),
        ("<python base>", Path(sys.base_prefix)),
        ("~", Path.home()),
    ]
    pairs = [(name, str(Path(folder).expanduser().resolve())) for name, folder in roots]
    return sorted({p for p in pairs if p[1] != "/"}, key=lambda p: -len(p[1]))


def hide_paths(text: str, roots: Sequence[tuple[str, str]]) -> str:
    """``text`` with every absolute path shown relative to the first root holding it, else as ``…/a/b``."""

    def shorten(match: re.Match[str]) -> str:
        path = match.group(0)
        for name, folder in roots:
            if path == folder or path.startswith(folder.rstrip("/") + "/"):
                return name + path[len(folder.rstrip("/")) :]
        parts = [p for p in path.split("/") if p]
        return "…/" + "/".join(parts[-2:])

    return _ABS_PATH.sub(shorten, text)


def _pairs(pairs: list[tuple[str, str]], roots: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    return [(key, hide_paths(str(value), roots)) for key, value in pairs]


def redact_view(view: Any, roots: Sequence[tuple[str, str]]) -> Any:
    """A copy of a report view (:class:`repliscope.report.view.ReportView` or one with the same ``provenance``
    and ``failures``) whose provenance, failure messages and export note show no absolute server path."""
    prov = view.provenance
    hidden = dataclasses.replace(
        prov,
        manifest_path=hide_paths(prov.manifest_path, roots),
        manifest_text=hide_paths(prov.manifest_text, roots),
        pipeline=[dataclasses.replace(r, parameters=hide_paths(r.parameters, roots)) for r in prov.pipeline],
        runtime=_pairs(prov.runtime, roots),
        software=_pairs(prov.software, roots),
        hardware=_pairs(prov.hardware, roots),
        dataset=_pairs(prov.dataset, roots),
        options=_pairs(prov.options, roots),
        timings=_pairs(prov.timings, roots),
        export_note=hide_paths(prov.export_note, roots) if prov.export_note else prov.export_note,
        threadpools=[[hide_paths(str(c), roots) for c in row] for row in prov.threadpools],
    )
    changes: dict[str, Any] = {"provenance": hidden}
    failures = getattr(view, "failures", None)
    if failures and dataclasses.is_dataclass(failures[0]) and hasattr(failures[0], "error"):
        changes["failures"] = [
            dataclasses.replace(f, error=hide_paths(f.error, roots) if f.error else f.error) for f in failures
        ]
    return dataclasses.replace(view, **changes)


def redact_compare(page: Any, roots: Sequence[tuple[str, str]]) -> Any:
    """A copy of a compare page (:class:`repliscope.service.web.views.ComparePage`) whose pipeline and stack rows
    and reasons show no absolute server path."""

    def lines(rows: list[Any]) -> list[Any]:
        return [dataclasses.replace(d, a=hide_paths(d.a, roots), b=hide_paths(d.b, roots)) for d in rows]

    return dataclasses.replace(
        page, pipeline=lines(page.pipeline), stack=lines(page.stack), why=[hide_paths(w, roots) for w in page.why]
    )
