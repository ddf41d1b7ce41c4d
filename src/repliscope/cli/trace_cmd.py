"""``repliscope trace``: summarise and compare leveled traces."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add the ``trace`` command group to ``app``."""
