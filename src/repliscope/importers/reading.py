"""Reading a foreign config under the manifest loader's limits (:mod:`repliscope.manifest.limits`).

An importer reads files written by others: the same bounds as for a manifest apply, and every breach is a
:class:`ConfigImportError` with ``reason="limits"`` (exit 2), never a crash:

- only a regular file is read: a FIFO, socket or device is refused from its ``fstat``, after an ``open`` with
  ``O_NONBLOCK`` (opening a FIFO without it waits for a writer forever);
- the file size (``manifest_bytes``), checked with ``fstat`` BEFORE reading (a 40 MB file is refused in
  microseconds);
- nesting depth (``yaml_depth``), value count (``yaml_nodes``) and alias expansion, on the YAML event stream
  before any tree is built, or on the parsed JSON, walked iteratively;
- numbers: an integer beyond 64 bits (``10**400``, a 300-digit size) or a non-finite float (``1e400``);
- image sizes: ``height x width`` above ``max_pixels`` (a 1e9 x 1e9 input), see :func:`check_image_size`.
"""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path
from typing import Any

from repliscope.errors import ManifestError
from repliscope.importers.base import ConfigImportError
from repliscope.limits import MANIFEST_BYTES, MAX_PIXELS

_LIMIT_WORDS = ("more than", "nested", "out of range", "not a finite number", "limit")
"""Words of the loader's limit errors (as opposed to syntax errors, which the importer words itself)."""


def _is_limit(exc: ManifestError) -> bool:
    return any(word in str(exc) for word in _LIMIT_WORDS)


def file_kind(mode: int) -> str:
    """What a ``st_mode`` that is not a regular file is, in words (for "not a regular file (a FIFO)")."""
    kinds = (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    )
    return next((word for test, word in kinds if test(mode)), "not a file")


def read_bytes(path: Path) -> bytes:
    """The bytes of a regular file, refused past the manifest size limit before it is read; anything else (a FIFO,
    a socket, a device) is refused without blocking: opened with ``O_NONBLOCK``, checked with ``fstat``."""
    limit = MANIFEST_BYTES.value
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError:
        raise ConfigImportError(f"{path}: no such file") from None
    except OSError as exc:  # a FIFO opens at once with O_NONBLOCK; ENXIO is a socket, EACCES a mode
        raise ConfigImportError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ConfigImportError(
                f"{path}: not a regular file ({file_kind(info.st_mode)}); give the foreign config file itself"
            )
        if info.st_size > limit:
            raise ConfigImportError(
                f"{path}: the file is {info.st_size:,} bytes, more than the {limit:,}-byte limit "
                f"({MANIFEST_BYTES.name}); refused before reading it",
                "limits",
            )
        os.set_blocking(fd, True)
        with os.fdopen(os.dup(fd), "rb") as fh:
            raw = fh.read(limit + 1)
    except OSError as exc:
        raise ConfigImportError(f"{path}: cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if len(raw) > limit:
        raise ConfigImportError(
            f"{path}: the file has more than the {limit:,}-byte limit ({MANIFEST_BYTES.name})", "limits"
        )
    return raw


def read_text(path: Path) -> str:
    """The file as UTF-8 text: a regular file (:func:`read_bytes`), refused past the manifest size limit before it
    is read."""
    raw = read_bytes(path)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigImportError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def check_yaml_limits(text: str, path: Path) -> None:
    """Refuse YAML past the loader's structural and number limits. Syntax problems are left to the importer's
    own YAML reading (which names them in its terms)."""
    from repliscope.manifest.limits import check_data, load_yaml_limited

    try:
        data, lines = load_yaml_limited(text, str(path))
    except ManifestError as exc:
        if _is_limit(exc):
            raise ConfigImportError(str(exc).splitlines()[-1].strip(), "limits") from None
        return
    except RecursionError:
        raise ConfigImportError(f"{path}: nested too deeply to read", "limits") from None
    try:
        check_data(data, str(path), lines)
    except ManifestError as exc:
        raise ConfigImportError(_first(exc), "limits") from None


def load_json(text: str, path: Path) -> Any:
    """JSON under the loader's limits (depth, value count, numbers)."""
    from repliscope.manifest.limits import check_data

    try:
        data = json.loads(text)
    except RecursionError:
        raise ConfigImportError(
            f"{path}: nested too deeply to read (the limit is the loader's yaml_depth)", "limits"
        ) from None
    except json.JSONDecodeError as exc:
        raise ConfigImportError(f"{path}: not valid JSON: {exc}") from None
    except ValueError as exc:  # Python's int digit limit (sys.set_int_max_str_digits)
        raise ConfigImportError(f"{path}: a number is too large to read ({exc})", "limits") from None
    try:
        check_data(data, str(path))
    except ManifestError as exc:
        raise ConfigImportError(_first(exc), "limits") from None
    return data


def check_image_size(height: int, width: int, where: str) -> None:
    """Refuse an image size above the ``max_pixels`` limit (what a resize or crop op may produce)."""
    if height * width > MAX_PIXELS.value:
        raise ConfigImportError(
            f"{where}: {height} x {width} = {height * width:,} pixels, more than the "
            f"{MAX_PIXELS.value:,}-pixel limit ({MAX_PIXELS.name}) an op may produce",
            "limits",
        )


def finite(value: float, where: str) -> float:
    """``value`` when finite; a float that overflowed (``1e400`` written as text) is refused."""
    if not math.isfinite(value):
        raise ConfigImportError(
            f"{where}: {value} is not a finite number (NaN, infinity, or a value like 1e400 that overflows to it)",
            "limits",
        )
    return value


def _first(exc: ManifestError) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return lines[1] if len(lines) > 1 and "problems in the manifest" in lines[0] else lines[0]
