"""``repliscope bench``: performance scenarios (LoadGen semantics) on a manifest."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add the ``bench`` command to ``app``."""
