"""The files an original's task and its caller exchange across a stack (:mod:`repliscope.stacks.call` ``task``):
one ``.npz`` of plain arrays plus one JSON document, read with ``allow_pickle=False``. No framework imported."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from repliscope.errors import RepliscopeError

META = "__meta__"
"""The npz entry holding the JSON document (uint8 bytes) beside the arrays."""


def write_npz(path: Path, meta: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> None:
    """``arrays`` and ``meta`` (JSON, stored as uint8 bytes under :data:`META`) to ``path``."""
    blob = np.frombuffer(json.dumps(meta).encode("utf-8"), dtype=np.uint8)
    entries: dict[str, Any] = {META: blob, **arrays}
    with path.open("wb") as handle:
        np.savez(handle, **entries)


def read_npz(
    path: Path,
    fmt: str,
    *,
    what: str = "",
    error: type[RepliscopeError] = RepliscopeError,
    with_arrays: bool = True,
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """(meta, arrays) of a file :func:`write_npz` wrote with ``meta["format"] == fmt``; ``error`` naming the file
    (after ``what``) otherwise; pickled objects are refused by ``allow_pickle=False``. ``with_arrays=False`` reads
    only the JSON document (the arrays dict is empty)."""
    where = f"{what} {path}" if what else str(path)
    try:
        with np.load(path, allow_pickle=False) as data:
            keys = data.files if with_arrays else [k for k in data.files if k == META]
            arrays = {key: data[key] for key in keys}
    except (OSError, ValueError) as exc:
        raise error(f"{where}: not a readable .npz without pickled objects ({exc})") from None
    blob = arrays.pop(META, None)
    if blob is None or blob.dtype != np.uint8:
        raise error(f"{where}: no '{META}' document")
    try:
        meta = json.loads(blob.tobytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise error(f"{where}: its '{META}' document is not JSON ({exc})") from None
    if not isinstance(meta, dict) or meta.get("format") != fmt:
        raise error(f"{where}: format is not {fmt}")
    return meta, arrays


def read_meta(path: Path, fmt: str) -> dict[str, Any]:
    """Only the JSON document of a file :func:`write_npz` wrote (the arrays stay unread)."""
    return read_npz(path, fmt, with_arrays=False)[0]
