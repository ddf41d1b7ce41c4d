"""Bounds of every walk of a dataset folder: a walk never leaves the folder (a symlink whose target resolves
outside it is not followed), and it stops with a :class:`WalkLimitError` naming the bound at a number of entries,
a depth or a time, or when it is cancelled (:data:`STOP`, set when ``repliscope serve`` stops, or the bounds' own
event). The bounds in force are the context's (:func:`bounded`): the CLI's are wide (a user walks their own
folders and can press Ctrl-C); the service registers a dataset under tighter ones
(:func:`repliscope.service.routers.datasets.register_bounded`)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path

from repliscope.errors import DatasetError

STOP = threading.Event()
"""Set when the process stops (``repliscope serve`` on SIGTERM / SIGINT): every walk ends at its next entry."""


@dataclass(frozen=True)
class WalkBounds:
    """At most ``max_entries`` files and folders, ``max_depth`` levels below the root, ``max_seconds`` seconds
    (None: no time bound); ``cancel``: an event that stops the walk (beside :data:`STOP`)."""

    max_entries: int
    max_depth: int
    max_seconds: float | None
    cancel: threading.Event | None = None


CLI_BOUNDS = WalkBounds(max_entries=10_000_000, max_depth=64, max_seconds=None)
"""The default: wide (ImageNet's training set is 1.3 million files), but never endless."""

_BOUNDS: ContextVar[WalkBounds] = ContextVar("repliscope_walk_bounds", default=CLI_BOUNDS)


class WalkLimitError(DatasetError):
    """A walk went over one of its bounds (``limit``: ``entries``, ``depth``, ``seconds``) or was cancelled
    (``limit`` = ``cancelled``)."""

    def __init__(self, message: str, limit: str) -> None:
        super().__init__(message)
        self.limit = limit


@contextmanager
def bounded(bounds: WalkBounds) -> Iterator[WalkBounds]:
    """Walks in this context (this thread, or this task) obey ``bounds``."""
    token = _BOUNDS.set(bounds)
    try:
        yield bounds
    finally:
        _BOUNDS.reset(token)


def current_bounds() -> WalkBounds:
    """The bounds walks obey here (:func:`bounded`, else :data:`CLI_BOUNDS`)."""
    return _BOUNDS.get()


def inside(real: str, root_real: str) -> bool:
    """True when the resolved path ``real`` is ``root_real`` or below it (both from ``os.path.realpath``)."""
    return real == root_real or real.startswith(root_real.rstrip(os.sep) + os.sep)


class Walk:
    """One walk of ``root``: its budget (:meth:`step`) and the confinement check (:meth:`leaves`)."""

    def __init__(self, root: Path | str, bounds: WalkBounds | None = None) -> None:
        self.root = Path(root)
        self.root_real = os.path.realpath(root)
        self.bounds = bounds or current_bounds()
        self.entries = 0
        self.deadline = None if self.bounds.max_seconds is None else time.monotonic() + self.bounds.max_seconds

    def leaves(self, path: str | os.PathLike[str]) -> bool:
        """True when ``path`` (a symlink, typically) resolves outside the walked folder."""
        return not inside(os.path.realpath(path), self.root_real)

    def step(self, entries: int, depth: int) -> None:
        """Count ``entries`` more, listed at ``depth`` levels below the root; WalkLimitError past a bound or when
        cancelled."""
        b = self.bounds
        if STOP.is_set() or (b.cancel is not None and b.cancel.is_set()):
            raise WalkLimitError(f"listing {self.root} was stopped (the server is stopping)", "cancelled")
        self.entries += entries
        if depth > b.max_depth:
            raise WalkLimitError(
                f"{self.root} is deeper than {b.max_depth} levels: not a dataset folder (walk bound max_depth)",
                "depth",
            )
        if self.entries > b.max_entries:
            raise WalkLimitError(
                f"{self.root} holds more than {b.max_entries:,} files and folders (walk bound max_entries)", "entries"
            )
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise WalkLimitError(
                f"listing {self.root} took longer than {b.max_seconds:g} s (walk bound max_seconds)", "seconds"
            )
