"""Safe YAML loading that remembers where every value came from, so errors can name file:line.

Refused, each as a :class:`ManifestError` naming the file and line (nothing here ever raises anything else):

- any tag outside the plain-data set (:data:`SAFE_TAGS`), e.g. ``!!python/object/apply:os.system`` or ``!foo``;
- duplicate mapping keys (PyYAML would silently keep the last one), non-scalar keys and ``<<`` merge keys;
- documents with more than :data:`MAX_NODES` written values, checked on libyaml's event stream BEFORE any
  tree is built (a 600 KB file is refused in milliseconds, naming the count, not aliases);
- documents whose aliases expand past :data:`MAX_EXPANDED_NODES` nodes ("billion laughs", recursive
  aliases) or that nest deeper than :data:`MAX_DEPTH` levels. The tree is walked once with a node counter,
  so such a document is refused after at most ``MAX_EXPANDED_NODES`` steps, with bounded memory;

Numbers that are not finite (``.nan``, ``.inf``, ``1e400``) or integers outside 64 bits (``10**400``) are
refused by the manifest loader with :func:`repliscope.manifest.limits.check_numbers`, next to the schema errors.

libyaml (``CSafeLoader``) parses when PyYAML has it (every wheel does); the pure-Python parser otherwise.
"""

from __future__ import annotations

from typing import Any

import yaml

from repliscope.errors import ManifestError, raise_collected
from repliscope.limits import YAML_DEPTH, YAML_EXPANDED_NODES, YAML_NODES

Path_ = tuple[str | int, ...]

MAX_NODES = YAML_NODES.default
"""Values written in the document (scalars, lists, mappings, alias uses; a real manifest has a few hundred)."""
MAX_EXPANDED_NODES = YAML_EXPANDED_NODES.default
"""Nodes of the document with every alias expanded (a real manifest has a few hundred)."""
MAX_DEPTH = YAML_DEPTH.default
"""Nesting levels of mappings and sequences."""

_CORE = "tag:yaml.org,2002:"
SAFE_TAGS = frozenset(_CORE + t for t in ("str", "int", "float", "bool", "null", "map", "seq", "timestamp"))
"""Plain data only: no binary, set, omap/pairs, no python/* or application (``!foo``) tags."""


_Loader: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_NODE_EVENTS = (yaml.ScalarEvent, yaml.AliasEvent, yaml.SequenceStartEvent, yaml.MappingStartEvent)
_START_EVENTS = (yaml.SequenceStartEvent, yaml.MappingStartEvent)
_END_EVENTS = (yaml.SequenceEndEvent, yaml.MappingEndEvent)


class _Limit(Exception):
    """Internal: the walk hit a hard limit; carries the finished ManifestError."""

    def __init__(self, error: ManifestError) -> None:
        self.error = error


def load_with_lines(text: str, file: str) -> tuple[Any, dict[Path_, int]]:
    """Parse ``text``; return (plain Python data, {field path: 1-based line of that key or item}).

    Raises :class:`ManifestError` (:class:`ManifestErrors` listing every tag/key problem of the file).
    """
    _check_events(text, file)
    try:
        loader = _Loader(text)
    except yaml.reader.ReaderError as exc:  # a control character: checked when the reader is created
        line = text[: exc.position].count("\n") + 1
        raise ManifestError(
            f"malformed YAML: control character U+{int(exc.character):04X} is not allowed", file=file, line=line
        ) from None
    try:
        node = loader.get_single_node()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        position = getattr(exc, "position", None)  # a ReaderError has a position, no mark
        line = (
            mark.line + 1 if mark is not None else (text[:position].count("\n") + 1 if isinstance(position, int) else 1)
        )
        problem = ", ".join(p for p in (getattr(exc, "context", None), getattr(exc, "problem", None)) if p)
        raise ManifestError(f"malformed YAML: {problem or exc}", file=file, line=line) from None
    except RecursionError:
        raise ManifestError(
            f"malformed YAML: nested more than {MAX_DEPTH} levels deep", file=file, line=_first_deep_line(text)
        ) from None
    finally:
        loader.dispose()
    if node is None:
        raise ManifestError("the manifest is empty", file=file, line=1)
    walker = _Walker(file)
    try:
        walker.walk(node, (), 0)
    except _Limit as limit:
        raise limit.error from None
    raise_collected(walker.errors)
    try:
        data = loader.construct_document(node)
    except (yaml.YAMLError, ValueError, TypeError, OverflowError) as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else node.start_mark.line + 1
        problem = getattr(exc, "problem", None) or str(exc)
        raise ManifestError(f"invalid YAML value: {problem}", file=file, line=line) from None
    return data, walker.lines


def _line(event: yaml.Event) -> int:
    return event.start_mark.line + 1 if event.start_mark is not None else 1


def _check_events(text: str, file: str) -> None:
    """Count the written values and the nesting on the event stream (no tree is built): more than
    :data:`MAX_NODES` values or :data:`MAX_DEPTH` levels is refused at the line where the limit is passed.
    Syntax errors are left to the composer, which reports them with their context."""
    try:
        events = _Loader(text)
    except yaml.YAMLError:
        return
    count = depth = 0
    try:
        while events.check_event():
            event = events.get_event()
            if isinstance(event, _NODE_EVENTS):
                count += 1
                if count > MAX_NODES:
                    raise ManifestError(
                        f"the document has more than {MAX_NODES} values (lists, mappings and "
                        "scalars; a manifest has a few hundred): refused before parsing it further",
                        file=file,
                        line=_line(event),
                    )
            if isinstance(event, _START_EVENTS):
                depth += 1
                if depth > MAX_DEPTH:
                    raise ManifestError(
                        f"malformed YAML: nested more than {MAX_DEPTH} levels deep", file=file, line=_line(event)
                    )
            elif isinstance(event, _END_EVENTS):
                depth -= 1
    except yaml.YAMLError as exc:  # libyaml's own nesting bound (1000 flow levels) can fire first
        if "nesting depth" in str(exc):
            mark = getattr(exc, "problem_mark", None)
            raise ManifestError(
                f"malformed YAML: nested more than {MAX_DEPTH} levels deep",
                file=file,
                line=mark.line + 1 if mark is not None else 1,
            ) from None
        return
    finally:
        events.dispose()


def _first_deep_line(text: str) -> int:
    """1-based line where flow brackets first nest deeper than MAX_DEPTH (1 if they never do)."""
    depth = 0
    for number, line in enumerate(text.splitlines(), 1):
        for ch in line:
            depth += 1 if ch in "[{" else -1 if ch in "]}" else 0
            if depth > MAX_DEPTH:
                return number
    return 1


class _Walker:
    """One pass over the composed node graph: lines, tag/key checks and the expansion budget."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.lines: dict[Path_, int] = {}
        self.errors: list[ManifestError] = []
        self.visited = 0

    def _error(self, message: str, node: yaml.Node, path: Path_) -> ManifestError:
        return ManifestError(message, file=self.file, line=node.start_mark.line + 1, field=format_path(path) or None)

    def walk(self, node: yaml.Node, path: Path_, depth: int) -> None:
        self.visited += 1
        if self.visited > MAX_EXPANDED_NODES:
            raise _Limit(
                self._error(
                    f"the document expands to more than {MAX_EXPANDED_NODES} nodes (aliases "
                    "re-used recursively or many times, e.g. a 'billion laughs' document); "
                    "write the values out",
                    node,
                    path,
                )
            )
        if depth > MAX_DEPTH:
            raise _Limit(self._error(f"nested more than {MAX_DEPTH} levels deep (a recursive alias?)", node, path))
        self.lines.setdefault(path, node.start_mark.line + 1)
        if node.tag not in SAFE_TAGS:
            self.errors.append(
                self._error(
                    f"YAML tag '{node.tag}' is not allowed: a manifest holds plain data "
                    "(strings, numbers, booleans, null, lists, mappings)",
                    node,
                    path,
                )
            )
            return
        if isinstance(node, yaml.MappingNode):
            self._mapping(node, path, depth)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                self.lines.setdefault((*path, i), item.start_mark.line + 1)
                self.walk(item, (*path, i), depth + 1)

    def _mapping(self, node: yaml.MappingNode, path: Path_, depth: int) -> None:
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            line = key_node.start_mark.line + 1
            if key_node.tag == _CORE + "merge":
                self.errors.append(
                    self._error("'<<' merge keys are not supported: write the fields out", key_node, path)
                )
                continue
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag != _CORE + "str":
                shown = key_node.value if isinstance(key_node, yaml.ScalarNode) else f"a {key_node.id}"
                self.errors.append(
                    self._error(f"a key must be a string, got {shown!r} (quote it in YAML)", key_node, path)
                )
                continue
            key = str(key_node.value)
            if key in seen:
                self.errors.append(
                    ManifestError(
                        f"duplicate key '{key}' (first defined on line {seen[key]})",
                        file=self.file,
                        line=line,
                        field=format_path((*path, key)),
                    )
                )
                continue
            seen[key] = line
            self.lines[(*path, key)] = line
            self.walk(value_node, (*path, key), depth + 1)


def format_path(path: Path_) -> str:
    """('preprocess', 2, 'method') -> 'preprocess[2].method'."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def line_of(path: Path_, lines: dict[Path_, int]) -> int | None:
    """Line of the longest prefix of ``path`` that exists in the document (a missing key -> its parent)."""
    for n in range(len(path), -1, -1):
        if path[:n] in lines:
            return lines[path[:n]]
    return None
