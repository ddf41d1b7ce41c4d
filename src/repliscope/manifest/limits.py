"""The loader's limits as public functions, for the manifest loader and for importers of foreign configs.

- :func:`read_limited`: the bytes of a config file, refused (ManifestError) past :data:`repliscope.limits.
  MANIFEST_BYTES` by ``stat`` BEFORE reading, and by a bounded read (a file that grows).
- :func:`load_yaml_limited`: safe YAML with every structural limit (values, alias expansion, depth, tags) and
  the number checks; returns (data, {field path: line}).
- :func:`check_data`: the same limits on data parsed by another parser (``json.loads``): depth, value count
  and numbers, walked iteratively (a 100 000-deep list cannot overflow the stack here).
- :func:`check_numbers`: a float must be finite (``.nan``, ``.inf``, ``1e400`` are refused), an integer must fit
  64 bits (``10**400`` is refused); every problem names the file, line and field.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from repliscope.errors import ManifestError, raise_collected
from repliscope.limits import MANIFEST_BYTES, MAX_INT, YAML_DEPTH, YAML_NODES
from repliscope.manifest.yaml_lines import Path_, format_path, line_of, load_with_lines


def read_limited(path: str | Path, max_bytes: int | None = None) -> bytes:
    """The bytes of ``path``; a file over ``max_bytes`` (default :data:`MANIFEST_BYTES`) is refused before it is
    read. Raises ManifestError naming the file, its size and the limit."""
    p = Path(path)
    limit = MANIFEST_BYTES.value if max_bytes is None else max_bytes
    try:
        with p.open("rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size > limit:
                raise ManifestError(
                    f"the file is {size:,} bytes, more than the {limit:,}-byte limit "
                    f"({MANIFEST_BYTES.name}); refused before reading it",
                    file=str(p),
                )
            data = fh.read(limit + 1)
    except OSError as exc:
        raise ManifestError(f"cannot read: {exc.strerror or exc}", file=str(p)) from exc
    if len(data) > limit:
        raise ManifestError(f"the file has more than the {limit:,}-byte limit ({MANIFEST_BYTES.name})", file=str(p))
    return data


def load_yaml_limited(text: str, file: str) -> tuple[Any, dict[Path_, int]]:
    """Safe YAML under every loader limit; see :func:`repliscope.manifest.yaml_lines.load_with_lines`."""
    return load_with_lines(text, file)


def check_numbers(data: Any, file: str, lines: dict[Path_, int] | None = None) -> list[ManifestError]:
    """One error per non-finite float or integer beyond 64 bits in ``data`` (plain lists/dicts/scalars)."""
    errors: list[ManifestError] = []
    bound = MAX_INT.value
    stack: list[tuple[Any, Path_]] = [(data, ())]
    while stack:
        value, at = stack.pop()
        if isinstance(value, bool):
            continue
        if isinstance(value, float) and not math.isfinite(value):
            errors.append(
                ManifestError(
                    f"{value} is not a finite number; every number of a manifest must be "
                    "finite (NaN and infinity, or a value like 1e400 that overflows to it, "
                    "are refused)",
                    file=file,
                    line=line_of(at, lines or {}),
                    field=format_path(at) or None,
                )
            )
        elif isinstance(value, int) and abs(value) > bound:
            digits = len(str(abs(value))) if abs(value) < 10**4000 else 4000
            errors.append(
                ManifestError(
                    f"an integer of {digits} digits is out of range (at most {bound:,} in "
                    f"absolute value, {MAX_INT.name}; if it is text, e.g. a hash, quote it)",
                    file=file,
                    line=line_of(at, lines or {}),
                    field=format_path(at) or None,
                )
            )
        elif isinstance(value, dict):
            stack.extend((item, (*at, str(key))) for key, item in value.items())
        elif isinstance(value, list | tuple):
            stack.extend((item, (*at, i)) for i, item in enumerate(value))
    return sorted(errors, key=lambda e: e.line or 0)


def check_data(data: Any, file: str, lines: dict[Path_, int] | None = None) -> None:
    """Refuse (ManifestError) data nested deeper than :data:`YAML_DEPTH`, holding more than :data:`YAML_NODES`
    values, or with a number :func:`check_numbers` refuses. For data from any parser (JSON, YAML, TOML)."""
    depth_limit, node_limit = YAML_DEPTH.value, YAML_NODES.value
    count = 0
    stack: list[tuple[Any, Path_, int]] = [(data, (), 0)]
    while stack:
        value, at, depth = stack.pop()
        count += 1
        if count > node_limit:
            raise ManifestError(
                f"the document has more than {node_limit:,} values ({YAML_NODES.name}); a model "
                "config has a few hundred",
                file=file,
                line=line_of(at, lines or {}),
                field=format_path(at) or None,
            )
        if isinstance(value, dict | list | tuple):
            if depth >= depth_limit:
                raise ManifestError(
                    f"nested more than {depth_limit} levels deep ({YAML_DEPTH.name})",
                    file=file,
                    line=line_of(at, lines or {}),
                    field=format_path(at) or None,
                )
            items = value.items() if isinstance(value, dict) else enumerate(value)
            stack.extend((item, (*at, key if isinstance(key, int) else str(key)), depth + 1) for key, item in items)
    raise_collected(check_numbers(data, file, lines))
