"""The stacks of runs compared on normalised values: what a compare page calls a difference of the stacks.

A record's runtime, software and hardware sections are flattened to ``section.key.subkey`` items
(:func:`stack_items`). Two runs made in the same stack must compare equal item by item, so each item is
normalised before it is compared (:func:`normalised_items`):

- a missing item and an item recorded as ``null`` are the same (both read ``—``);
- the items of :data:`UNORDERED` are sets recorded as lists in an incidental order (``software.threadpools``:
  the BLAS / OpenMP libraries in the order the process happened to load them): they are compared sorted;
- the items of :data:`INCIDENTAL` describe how the run got its inputs, not what ran (``runtime.<...>.cached``:
  the conversion was reused from the verified cache or made for this run; the file and its sha256 are compared
  as items of their own): they are shown, never a difference.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

MISSING = "—"
UNORDERED = frozenset({"software.threadpools"})
"""Items recorded as lists whose order carries no meaning."""
INCIDENTAL_NOTE = "cache state only"
"""What a compare page writes beside an :func:`incidental` item whose values differ."""


def incidental(what: str) -> bool:
    """True for an item that says how the run was prepared, not what ran: a conversion's ``cached`` flag."""
    return what.startswith("runtime.") and what.endswith(".cached")


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def _flatten(prefix: str, value: Any, out: dict[str, str]) -> None:
    if isinstance(value, Mapping):
        for k, v in value.items():
            _flatten(f"{prefix}.{k}" if prefix else str(k), v, out)
        return
    if prefix in UNORDERED and isinstance(value, Sequence) and not isinstance(value, str):
        value = sorted(value, key=_canonical)
    out[prefix] = MISSING if value is None else str(value)


def stack_items(record: Any) -> dict[str, str]:
    """The record's runtime, software and hardware as ``{item: shown value}`` (nested keys joined by ``.``;
    ``null`` shown as ``—``; the :data:`UNORDERED` lists sorted)."""
    out: dict[str, str] = {}
    for section in ("runtime", "software", "hardware"):
        _flatten(section, getattr(record, section) or {}, out)
    return out


def same_values(what: str, values: Sequence[str]) -> bool:
    """True when the shown values of item ``what`` across the runs make no difference of the stacks."""
    return incidental(what) or len(set(values)) == 1


def compared_items(records: Sequence[Any]) -> list[tuple[str, list[str], bool]]:
    """``(item, value per run, same)`` for every item any of ``records`` has (a missing item reads ``—``), in
    first-seen order."""
    flats = [stack_items(r) for r in records]
    keys: dict[str, None] = {}
    for f in flats:
        keys.update(dict.fromkeys(f))
    rows = []
    for k in keys:
        values = [f.get(k, MISSING) for f in flats]
        rows.append((k, values, same_values(k, values)))
    return rows


def differing_items(records: Sequence[Any]) -> list[str]:
    """The items whose normalised values differ between ``records`` (what "the stacks differ in" names)."""
    return [what for what, _values, same in compared_items(records) if not same]
