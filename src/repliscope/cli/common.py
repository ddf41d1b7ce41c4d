"""Option types and helpers shared by every command module (the CLI layer only)."""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any, NoReturn

import typer

DbOption = Annotated[str | None, typer.Option("--db", help="SQLAlchemy URL (default: SQLite in the user data "
                                                          "directory, or $REPLISCOPE_DB)")]
JsonOption = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]


def fail(exc: Exception) -> NoReturn:
    """Print ``error: <exc>`` to stderr and exit 2 (bad input: the message says what is wrong and allowed)."""
    print(f"error: {exc}", file=sys.stderr)
    raise typer.Exit(code=2)


def emit_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")
