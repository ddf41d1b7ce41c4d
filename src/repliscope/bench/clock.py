"""Clocks of the load generator: the real monotonic clock, and a virtual one for tests.

The issuing thread waits with ``sleep_until``; the server scenario's dispatcher thread waits with
``dispatch_wait``. On the real clock both sleep; on :class:`VirtualClock` time only moves when the issuing
thread's work advances it, so a fake runtime gives exact, deterministic latencies.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    """Seconds on a monotonic clock."""

    def now(self) -> float: ...

    def sleep_until(self, t: float) -> None:
        """Block the issuing thread until ``now() >= t``."""

    def dispatch_wait(self, t: float) -> None:
        """Block the server dispatcher until ``now() >= t``."""


class RealClock:
    """``time.perf_counter``; sleeps with ``time.sleep`` (Linux oversleeps by ~50-100 µs: a server query's
    latency, measured from its scheduled arrival as in LoadGen, includes that lateness)."""

    def now(self) -> float:
        return time.perf_counter()

    def sleep_until(self, t: float) -> None:
        delay = t - time.perf_counter()
        if delay > 0:
            time.sleep(delay)

    dispatch_wait = sleep_until


class VirtualClock:
    """A clock that moves only when told: ``advance(seconds)`` (a fake runtime's work) or ``sleep_until``
    (the issuing thread idling until a scheduled arrival); the dispatcher never waits."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        self._lock = threading.Lock()

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds

    def sleep_until(self, t: float) -> None:
        with self._lock:
            self._now = max(self._now, t)

    def dispatch_wait(self, t: float) -> None:
        return None
