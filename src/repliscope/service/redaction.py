"""Server paths off everything a non-admin reads, in the API and the web pages alike: a stored run names the ONNX
export in the server's model cache, the dataset's folder, the interpreter's prefix; a job's error and log name its
temporary folder; an agent advertises its stack's virtual environment. A caller below ``admin`` sees each absolute
path relative to a named root (``<model cache>/onnx/x.onnx``, ``<python prefix>/lib/...``, ``~/...``) or,
outside every root (a job's temporary folder, a dataset's), as ``…/<last two parts>``; an admin sees the values as
stored.

:func:`roots_for` is the one decision (None for an admin), :func:`hide_paths` the one rewrite of a text and
:func:`hide_paths_in` of a JSON-like value (dicts, lists, strings); the web's view redaction
(:mod:`repliscope.service.web.redact`) is built on them."""

from __future__ import annotations

import dataclasses
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel

_ABS_PATH = re.compile(r"(?<![\w.:/~<…+-])(?:/[\w.+@%=-]+){2,}/?")
"""An absolute POSIX path of two or more parts inside a text (not the path part of a URL: ``://`` precedes
those; nor a ``+/`` of base64 text; nor a lone ``/C`` of a command line; nor the ``…/a/b`` a path is shortened
to). A path right after ``>`` is one (``</script>/srv/x``) unless the ``>`` closes a root's name already put there
(``<model cache>/x``)."""

Roots = Sequence[tuple[str, str]]
"""``(name, absolute folder)`` pairs, longest folder first."""

OPAQUE_KEYS = frozenset({"segmentation"})
"""Keys of a JSON value whose subtree holds no text for people (a segmentation sample's counts and run-length
encodings): left as stored."""


def named_roots(cache_dir: Path | None) -> list[tuple[str, str]]:
    """``(name, absolute folder)`` of the roots a viewer's paths are shown relative to, longest folder first."""
    from repliscope.paths import default_cache_dir as default_cache

    roots = [
        ("<model cache>", cache_dir or default_cache()),
        ("<python prefix>", Path(sys.prefix)),
        ("<python base>", Path(sys.base_prefix)),
        ("~", Path.home()),
    ]
    pairs = [(name, str(Path(folder).expanduser().resolve())) for name, folder in roots]
    return sorted({p for p in pairs if p[1] != "/"}, key=lambda p: -len(p[1]))


def roots_for(principal: Any, cache_dir: Path | None) -> list[tuple[str, str]] | None:
    """The roots to hide ``principal``'s paths under, or None for an admin (who sees server paths as stored)."""
    if getattr(principal, "role", None) == "admin":
        return None
    return named_roots(cache_dir)


def request_roots(request: Any, principal: Any) -> list[tuple[str, str]] | None:
    """:func:`roots_for` of the app serving ``request`` (its model cache)."""
    return roots_for(principal, request.app.state.config.cache_dir)


def hide_paths(text: str, roots: Roots) -> str:
    """``text`` with every absolute path shown relative to the first root holding it, else as ``…/a/b``."""
    if "/" not in text:
        return text

    named = tuple(name for name, _ in roots if name.startswith("<"))

    def shorten(match: re.Match[str]) -> str:
        path = match.group(0)
        if named and text.endswith(named, 0, match.start()):
            return path  # already shown relative to a root: hidden once, hidden again the same
        for name, folder in roots:
            if path == folder or path.startswith(folder.rstrip("/") + "/"):
                return name + path[len(folder.rstrip("/")) :]
        parts = [p for p in path.split("/") if p]
        return "…/" + "/".join(parts[-2:])

    return _ABS_PATH.sub(shorten, text)


def hide_paths_in(value: Any, roots: Roots | None) -> Any:
    """A copy of ``value`` whose every string went through :func:`hide_paths`: JSON-like values (dict values, list
    and tuple items) and the fields of dataclasses (a page's rows) and pydantic models; ``value`` itself when
    ``roots`` is None (an admin). Dict keys, :data:`OPAQUE_KEYS`' subtrees and HTML already made safe
    (``__html__``: a template's markup) are kept as they are."""
    if roots is None or hasattr(value, "__html__"):
        return value
    if isinstance(value, str):
        return hide_paths(value, roots)
    if isinstance(value, dict):
        return {k: v if k in OPAQUE_KEYS else hide_paths_in(v, roots) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [hide_paths_in(v, roots) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {f.name: hide_paths_in(getattr(value, f.name), roots) for f in dataclasses.fields(value) if f.init}
        return dataclasses.replace(value, **changes)
    if isinstance(value, BaseModel):
        return value.model_copy(update={name: hide_paths_in(v, roots) for name, v in value})
    return value


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
