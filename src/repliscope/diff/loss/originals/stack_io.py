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


def write_npz(path: Path, meta: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> None:
    """``arrays`` and ``meta`` (JSON, stored as uint8 bytes under :data:`META`) to ``path``."""
    blob = np.frombuffer(json.dumps(meta).encode("utf-8"), dtype=np.uint8)
    entries: dict[str, Any] = {META: blob, **arrays}
    with path.open("wb") as handle:
        np.savez(handle, **entries)


def read_npz(path: Path, fmt: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """(meta, arrays) of a file :func:`write_npz` wrote with ``meta["format"] == fmt``; RepliscopeError naming the
    file otherwise (pickled objects are refused by ``allow_pickle=False``)."""
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {key: data[key] for key in data.files}
    except (OSError, ValueError) as exc:
        raise RepliscopeError(f"{path}: not a readable .npz without pickled objects ({exc})") from None
    blob = arrays.pop(META, None)
    if blob is None or blob.dtype != np.uint8:
        raise RepliscopeError(f"{path}: no '{META}' document")
    try:
        meta = json.loads(blob.tobytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RepliscopeError(f"{path}: its '{META}' document is not JSON ({exc})") from None
    if not isinstance(meta, dict) or meta.get("format") != fmt:
        raise RepliscopeError(f"{path}: format is not {fmt}")
    return meta, arrays


def read_meta(path: Path, fmt: str) -> dict[str, Any]:
    """Only the JSON document of a file :func:`write_npz` wrote (the arrays stay unread)."""
    try:
        with np.load(path, allow_pickle=False) as data:
            blob = data[META] if META in data.files else None
    except (OSError, ValueError) as exc:
        raise RepliscopeError(f"{path}: not a readable .npz without pickled objects ({exc})") from None
    if blob is None or blob.dtype != np.uint8:
        raise RepliscopeError(f"{path}: no '{META}' document")
    try:
        meta = json.loads(blob.tobytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RepliscopeError(f"{path}: its '{META}' document is not JSON ({exc})") from None
    if not isinstance(meta, dict) or meta.get("format") != fmt:
        raise RepliscopeError(f"{path}: format is not {fmt}")
    return meta
