"""What every compare page shares (runs and benchmarks): the bound on the items compared, their letters and a
row of values across them."""

from __future__ import annotations

import string
from dataclasses import dataclass

MAX_RUNS = 12
"""The most runs (or benchmarks) one compare page takes (the chart and tables stay readable)."""


def letter(i: int) -> str:
    """The ``i``-th compared item's letter: A..Z, then R27, R28, ..."""
    return string.ascii_uppercase[i] if i < 26 else f"R{i + 1}"


@dataclass(frozen=True)
class RowAcross:
    """One compared item across the runs: ``same`` False (the runs differ) is highlighted."""

    what: str
    values: list[str]
    same: bool
