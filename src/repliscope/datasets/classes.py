"""The 1000 ILSVRC-2012 classes in the standard order (sorted wnids), shipped as package data.

``data/imagenet_classes.txt`` holds one ``wnid<TAB>name`` per line; class index = line number (0-based).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from importlib import resources
from types import MappingProxyType

from repliscope.errors import DatasetError

_CLASSES_FILE = "imagenet_classes.txt"


@cache
def _load() -> tuple[tuple[str, str], ...]:
    text = resources.files("repliscope.datasets").joinpath("data", _CLASSES_FILE).read_text(encoding="utf-8")
    pairs: list[tuple[str, str]] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        wnid, sep, name = line.partition("\t")
        if not sep or not wnid or not name:
            raise DatasetError(f"{_CLASSES_FILE}:{lineno}: expected 'wnid<TAB>name', got {line!r}")
        pairs.append((wnid, name))
    return tuple(pairs)


def imagenet_classes() -> list[tuple[str, str]]:
    """The 1000 ``(wnid, name)`` pairs; index in the list = ILSVRC-2012 class index."""
    return list(_load())


@cache
def imagenet_wnid_index() -> Mapping[str, int]:
    """Read-only ``wnid -> class index`` for the 1000 ILSVRC-2012 classes."""
    return MappingProxyType({wnid: i for i, (wnid, _) in enumerate(_load())})
