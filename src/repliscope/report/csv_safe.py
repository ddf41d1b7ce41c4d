"""CSV that a spreadsheet opens as data, never as formulas: the one writer of every CSV repliscope produces.

A cell whose text starts with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return is a formula (or starts one)
for Excel, LibreOffice and Google Sheets: a sample id or model name ``=HYPERLINK("https://evil.example",
"click")`` would run in the spreadsheet of whoever opens the download. As OWASP recommends ("CSV Injection"):
such a text cell gets a leading single quote (the spreadsheet shows the text as typed) and every text cell is
quoted (embedded quotes doubled). Only text is escaped: an ``int`` or ``float`` (a negative metric, a count) is
written unquoted as the number it is, and ``None`` as an empty quoted cell.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence
from typing import Any

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
"""The first characters that make a spreadsheet read a cell as a formula (OWASP's list)."""


def escape_cell(value: Any) -> Any:
    """``value`` as a CSV cell: text starting with one of :data:`FORMULA_STARTS` prefixed with ``'``; numbers as
    they are; ``None`` as ``""``; anything else (a bool) as its text."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int | float):
        return value
    text = value if isinstance(value, str) else str(value)
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def csv_lines(rows: Iterable[Sequence[Any]]) -> str:
    """``rows`` as CSV text (``\\n`` line ends): every cell through :func:`escape_cell`, text quoted, numbers
    not."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n", quoting=csv.QUOTE_NONNUMERIC)
    writer.writerows([escape_cell(v) for v in row] for row in rows)
    return buf.getvalue()
