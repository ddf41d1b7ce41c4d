"""LoadGen's four scenarios as issue loops over an ``issue(indices)`` callable (the system under test).

``issue(indices)`` runs one query synchronously: batch the query samples ``indices`` (positions in the query
sample library), infer, hand over the response; it returns at the query's completion, the time its latency ends.
An issuer with a ``complete()`` method (:class:`repliscope.bench.sut.QueryIssuer`: the manifest's
post-processing of the responses) has it called after the completion was stamped, never inside a latency, as
LoadGen scores accuracy from the logged responses after a query completed: back-to-back scenarios after each
query, the server scenario one response at a time while no query is waiting (and the rest after the last),
offline after its one query. Every
scenario first issues ``warmup_queries`` untimed queries, then issues
until BOTH ``min_queries`` queries were issued and ``min_duration_s`` passed (LoadGen's minimums), picking sample
indices with a seeded RNG (``numpy.random.default_rng(seed)``), so two runs issue the same sample sequence.

- ``single-stream``: one sample per query, the next issued when the previous completes; metric: p90 latency.
- ``multi-stream``: ``samples_per_query`` samples per query (one batch), back to back; metric: p99 latency.
- ``server``: queries of one sample arrive as a Poisson process at ``target_qps`` (exponential gaps from the
  seeded RNG, the schedule fixed before the run); a dispatcher thread enqueues each query at its scheduled time and
  one worker (the calling thread) processes them in order; latency = completion - SCHEDULED arrival (LoadGen),
  so queueing delay counts. Metric: p99 latency against ``latency_bound_ms``.
- ``offline``: one query of ``samples_per_query`` samples, all available at once, processed in batches of
  ``batch_size``; a sample's latency is its batch's completion time since the query was issued; metric:
  throughput.
"""

from __future__ import annotations

import contextlib
import math
import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from repliscope.bench.clock import Clock
from repliscope.errors import RepliscopeError
from repliscope.manifest.schema import SCENARIOS
from repliscope.registry import Registry

IssueFn = Callable[[Sequence[int]], None]
"""Runs one query on the given query-sample-library positions, returns when it completed."""

METRIC_PERCENTILE = {"single-stream": 0.90, "multi-stream": 0.99, "server": 0.99, "offline": None}
"""The percentile each scenario is judged on (LoadGen); offline is judged on throughput."""


@dataclass(frozen=True)
class ScenarioSettings:
    """One scenario's load, all recorded. ``samples_per_query``: multi-stream's N, or offline's sample count;
    ``batch_size``: offline's inference batch; ``target_qps``: server arrivals per second."""

    scenario: str
    min_duration_s: float
    min_queries: int
    warmup_queries: int = 10
    samples_per_query: int = 1
    batch_size: int = 1
    target_qps: float | None = None
    latency_bound_ms: float | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if self.scenario not in SCENARIOS:
            raise RepliscopeError(f"unknown scenario '{self.scenario}' (allowed: {', '.join(SCENARIOS)})")
        if self.scenario == "server" and (self.target_qps is None or self.target_qps <= 0):
            raise RepliscopeError("the server scenario needs --target-qps above 0 (or --find-peak-qps)")
        if self.scenario == "offline" and self.batch_size > self.samples_per_query:
            raise RepliscopeError(
                f"offline: the batch ({self.batch_size}) is larger than the one query "
                f"({self.samples_per_query} samples): lower --batch-size or raise "
                "--samples-per-query (the record would name a batch never run)"
            )
        if self.min_queries < 1 or self.min_duration_s < 0 or self.warmup_queries < 0:
            raise RepliscopeError("--min-queries must be >= 1, --min-duration and warm-up queries >= 0")

    @property
    def batch_of_query(self) -> int:
        """Samples inferred together: 1 (single-stream, server), N (multi-stream), the batch (offline)."""
        return {"multi-stream": self.samples_per_query, "offline": self.batch_size}.get(self.scenario, 1)


@dataclass(frozen=True)
class ScenarioRun:
    """What an issue loop measured, in seconds on its clock.

    ``latencies_s``: per query in issue order (offline: per sample); ``starts_s``: each query's issue time
    (server: its scheduled arrival; offline: each batch's start) since the first; ``duration_s``: first issue to
    last completion; ``samples``: samples processed."""

    latencies_s: np.ndarray
    starts_s: np.ndarray
    duration_s: float
    samples: int

    @property
    def queries(self) -> int:
        return len(self.starts_s)


ScenarioFn = Callable[[IssueFn, int, ScenarioSettings, Clock], ScenarioRun]
SCENARIO_LOOPS: Registry[ScenarioFn] = Registry("scenario")


class _Picker:
    """Seeded sample positions, drawn in chunks (one RNG call per 4096 queries)."""

    def __init__(self, n: int, seed: int, stream: int) -> None:
        self._rng = np.random.default_rng([seed, stream])
        self._n = n
        self._chunk: list[int] = []
        self._next = 0

    def take(self, k: int) -> list[int]:
        if self._next + k > len(self._chunk):
            rest = self._chunk[self._next :]
            self._chunk = rest + self._rng.integers(0, self._n, size=max(4096, k)).tolist()
            self._next = 0
        out = self._chunk[self._next : self._next + k]
        self._next += k
        return out


Completer = Callable[..., int]
"""``complete(limit=None)``: the work after queries' completion (e.g. post-processing their responses), for at
most ``limit`` of them (None: all); returns how many it did."""


def _nothing(limit: int | None = None) -> int:
    return 0


def completer(issue: IssueFn) -> Completer:
    """``issue.complete`` (:data:`Completer`), or a no-op for an issuer without it."""
    done = getattr(issue, "complete", None)
    return done if callable(done) else _nothing


def _warm_up(issue: IssueFn, n: int, s: ScenarioSettings) -> None:
    """The untimed queries, each completed; inside ``issue.warmup(count)`` when the issuer has it (a ``warmup``
    span, so a trace tells the warm-up queries from the measured ones)."""
    if s.warmup_queries == 0:
        return
    picker = _Picker(n, s.seed, 1)
    marker = getattr(issue, "warmup", None)
    complete = completer(issue)
    with marker(s.warmup_queries) if marker is not None else contextlib.nullcontext():
        for _ in range(s.warmup_queries):
            issue(picker.take(s.batch_of_query))
            complete()


def _back_to_back(issue: IssueFn, n: int, s: ScenarioSettings, clock: Clock, per_query: int) -> ScenarioRun:
    _warm_up(issue, n, s)
    picker = _Picker(n, s.seed, 0)
    starts: list[float] = []
    ends: list[float] = []
    now = clock.now
    complete = completer(issue)
    origin = now()
    while len(starts) < s.min_queries or ends[-1] - origin < s.min_duration_s:
        indices = picker.take(per_query)
        t0 = now()
        issue(indices)
        t1 = now()
        complete()
        starts.append(t0)
        ends.append(t1)
    first = starts[0]
    st, en = np.asarray(starts), np.asarray(ends)
    return ScenarioRun(
        latencies_s=en - st, starts_s=st - first, duration_s=float(en[-1] - first), samples=len(starts) * per_query
    )


@SCENARIO_LOOPS.register("single-stream")
def single_stream(issue: IssueFn, n: int, s: ScenarioSettings, clock: Clock) -> ScenarioRun:
    """One sample per query, the next issued on completion."""
    return _back_to_back(issue, n, s, clock, 1)


@SCENARIO_LOOPS.register("multi-stream")
def multi_stream(issue: IssueFn, n: int, s: ScenarioSettings, clock: Clock) -> ScenarioRun:
    """``samples_per_query`` samples per query, back to back."""
    return _back_to_back(issue, n, s, clock, s.samples_per_query)


def poisson_schedule(target_qps: float, min_queries: int, min_duration_s: float, seed: int) -> np.ndarray:
    """Scheduled arrival times (seconds since the start, increasing) of a Poisson process at ``target_qps``:
    cumulative exponential gaps of mean ``1 / target_qps``, at least ``min_queries`` arrivals and the last one at
    or after ``min_duration_s`` (LoadGen generates the server schedule this way, before the run)."""
    rng = np.random.default_rng([seed, 2])
    expected = max(min_queries, math.ceil(min_duration_s * target_qps)) + 16
    times = np.cumsum(rng.exponential(1.0 / target_qps, size=expected))
    while len(times) < min_queries or times[-1] < min_duration_s:
        more = np.cumsum(rng.exponential(1.0 / target_qps, size=expected)) + times[-1]
        times = np.concatenate([times, more])
    enough = max(min_queries, int(np.searchsorted(times, min_duration_s)) + 1)
    return times[:enough]


@SCENARIO_LOOPS.register("server")
def server(issue: IssueFn, n: int, s: ScenarioSettings, clock: Clock) -> ScenarioRun:
    """Poisson arrivals; a dispatcher thread enqueues queries at their scheduled times, this thread processes them
    in arrival order; latency = completion - scheduled arrival."""
    assert s.target_qps is not None
    _warm_up(issue, n, s)
    schedule = poisson_schedule(s.target_qps, s.min_queries, s.min_duration_s, s.seed)
    indices = _Picker(n, s.seed, 0).take(len(schedule))
    arrivals: queue.SimpleQueue[int | None] = queue.SimpleQueue()
    origin = clock.now()
    due = (schedule + origin).tolist()

    def dispatch() -> None:
        for k, t in enumerate(due):
            clock.dispatch_wait(t)
            arrivals.put(k)
        arrivals.put(None)

    dispatcher = threading.Thread(target=dispatch, name="repliscope-dispatcher", daemon=True)
    latencies = np.empty(len(due))
    complete = completer(issue)
    dispatcher.start()
    end = origin
    while (k := arrivals.get()) is not None:
        clock.sleep_until(due[k])  # real clock: already due (it was enqueued then); virtual clock: idle until due
        issue([indices[k]])
        end = clock.now()
        latencies[k] = end - due[k]
        while arrivals.empty() and complete(1):  # one response at a time while no query waits
            pass
    dispatcher.join()
    complete()
    return ScenarioRun(latencies_s=latencies, starts_s=schedule, duration_s=float(end - origin), samples=len(due))


@SCENARIO_LOOPS.register("offline")
def offline(issue: IssueFn, n: int, s: ScenarioSettings, clock: Clock) -> ScenarioRun:
    """One query of ``samples_per_query`` samples, inferred in batches of ``batch_size``."""
    _warm_up(issue, n, s)
    indices = _Picker(n, s.seed, 0).take(s.samples_per_query)
    origin = clock.now()
    latencies = np.empty(len(indices))
    starts = []
    for lo in range(0, len(indices), s.batch_size):
        starts.append(clock.now() - origin)
        issue(indices[lo : lo + s.batch_size])
        latencies[lo : lo + s.batch_size] = clock.now() - origin
    completer(issue)()
    return ScenarioRun(
        latencies_s=latencies, starts_s=np.asarray(starts), duration_s=float(latencies[-1]), samples=len(indices)
    )


def run_scenario(issue: IssueFn, n: int, s: ScenarioSettings, clock: Clock) -> ScenarioRun:
    """Issue the load of ``s.scenario`` on a library of ``n`` samples."""
    if n < 1:
        raise RepliscopeError("the query sample library is empty")
    return SCENARIO_LOOPS.get(s.scenario)(issue, n, s, clock)
