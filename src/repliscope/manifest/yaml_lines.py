"""YAML loading that remembers where every value came from, so errors can name file:line.

Also rejects duplicate mapping keys, which PyYAML would otherwise silently resolve to the last one.
"""

from __future__ import annotations

from typing import Any

import yaml

from repliscope.errors import ManifestError

Path_ = tuple[str | int, ...]


def load_with_lines(text: str, file: str) -> tuple[Any, dict[Path_, int]]:
    """Parse ``text``; return (plain Python data, {field path: 1-based line of that key or item})."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc)
        raise ManifestError(f"malformed YAML: {problem}", file=file, line=line) from exc
    if node is None:
        raise ManifestError("the manifest is empty", file=file, line=1)
    lines: dict[Path_, int] = {}
    _walk(node, (), lines, file)
    data = yaml.safe_load(text)
    return data, lines


def _walk(node: yaml.Node, path: Path_, lines: dict[Path_, int], file: str) -> None:
    lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            key = str(key_node.value)
            line = key_node.start_mark.line + 1
            if key in seen:
                raise ManifestError(
                    f"duplicate key '{key}' (first defined on line {seen[key]})",
                    file=file, line=line, field=format_path((*path, key)),
                )
            seen[key] = line
            lines[(*path, key)] = line
            _walk(value_node, (*path, key), lines, file)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            lines[(*path, i)] = item.start_mark.line + 1
            _walk(item, (*path, i), lines, file)


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
