"""The cyclic garbage collector paused for one CLI command that builds a whole run in memory.

A 50,000-sample run read back from the store is about a million lists, dicts and models that form no reference
cycle; every collection of the old generation while they are built walks all of them again: 30 % of the CPU
time of ``runs compare`` of two such runs, 20 % of ``report`` (measured in ``docs/benchmarks.md``, Scale).
The collector is switched back on (if it was on) when the command returns or raises, so a process that runs
commands in-process (tests, the service) keeps collecting afterwards.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Context manager (also a decorator) that disables :mod:`gc` for its duration and restores its state."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
