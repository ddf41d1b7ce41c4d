"""Which software stack a record was made in (every record's ``software["stack"]``): the stack this process runs
in, read from the marker a provisioned stack's venv carries (:mod:`repliscope.stacks` writes it).

The bottom layer: the evaluation's provenance reads it without importing the stacks package, which sits above
the core.
"""

from __future__ import annotations

import functools
import hashlib
import json
import platform
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

CURRENT = "current"
"""The spec (and key) of the environment this process runs in: no venv of its own."""

MARKER = "repliscope-stack.json"
"""Written by :func:`repliscope.stacks.store.create_stack` at the root (``sys.prefix``) of a stack's venv."""


def installed_lock() -> str:
    """``name==version`` of every installed distribution, sorted, one a line (what :func:`current_stack`
    hashes for the environment that is not a stack: cheaper than running ``pip freeze``)."""
    seen = {f"{(d.metadata['Name'] or '').lower()}=={d.version}" for d in metadata.distributions()}
    return "\n".join(sorted(seen)) + "\n"


@functools.cache
def current_stack() -> dict[str, Any]:
    """{"key", "spec", "python", "prefix", "lock_sha256"} of this process's environment: a stack's venv says
    its key, canonical spec and the sha256 of its ``lock.txt`` (``pip freeze``); any other environment is key
    ``current`` with the sha256 of :func:`installed_lock`."""
    marker = Path(sys.prefix) / MARKER
    if marker.is_file():
        info = json.loads(marker.read_text(encoding="utf-8"))
        return {
            "key": info["key"],
            "spec": info["spec"],
            "python": platform.python_version(),
            "prefix": sys.prefix,
            "lock_sha256": info["lock_sha256"],
        }
    return {
        "key": CURRENT,
        "spec": CURRENT,
        "python": platform.python_version(),
        "prefix": sys.prefix,
        "lock_sha256": hashlib.sha256(installed_lock().encode()).hexdigest(),
    }
