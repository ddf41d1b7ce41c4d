"""Load the model while the first samples are read: the seconds before the first inference, overlapped.

Before a run's first inference its runners load: building the model, an ONNX export (seconds: torch's import and
``torch.onnx.export``, run in a child process when this one has no torch, see
:mod:`repliscope.runtimes.onnx_export`), creating the sessions. :func:`warm_start` does that on a thread while a
reader thread reads and pre-processes samples of the run (decoders and numpy release the GIL; the export's
Python runs in its own process), so the loop then finds them ready (:class:`Prefetched`, taken by
:func:`repliscope.evaluation.engine.run_loop`). The reader runs at a lower priority than the load: on an idle
machine each has a core, on a busy one the reading takes only what the load leaves.

What is kept of a sample is bounded: each is held at the smallest stage of its pre-processing after the decode
(Lite0: the 224 x 224 x 3 uint8 crop, 150 KB, not the 600 KB float32 input; the loop applies the remaining ops),
and reading stops once the held items reach ``budget`` bytes (:data:`PREFETCH_BYTES`), or as soon as the runners
are loaded. Results do not change: every op runs once on the same item, in order, whichever thread runs it; the
sample's bytes are read once and fingerprinted as in the loop.

The samples read ahead are the ones no measurement depends on: the caller starts after the calibration trials
and the online check (:mod:`repliscope.evaluation.adaptive`), whose rates must be those of whole samples.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from repliscope.datasets.base import Sample, read_sample
from repliscope.evaluation.engine import Held, PreparedItem, Stage, apply_op, encoded_item, finish_item
from repliscope.ops.base import Item
from repliscope.ops.pipeline import Pipeline
from repliscope.runtimes.base import Runner
from repliscope.tracing.tracer import NO_TRACER

PREFETCH_BYTES = 256 * 2**20
"""At most this many bytes of samples held ahead of the loop (plus one sample): 1,700 Lite0 crops."""
READ_AHEAD_NICE = 10
"""How much lower the reader thread's priority is than the loading's (its nice value, added)."""

Event = Callable[[str], None]
"""Told ``"load started"``, ``"read <sample id>"``, ``"stopped: <why>"`` (``loaded``, ``budget``, ``every sample
read``) and ``"load finished"`` as they happen (tests)."""


@dataclass
class Prefetched:
    """Samples read and pre-processed ahead of the loop, each taken once (:meth:`take`)."""

    held: dict[int, tuple[Sample, PreparedItem | Stage, str, float]] = field(default_factory=dict)
    """id(sample) -> (the sample, its state, its fingerprint, the CPU seconds its reading and ops took here)."""
    nbytes: int = 0
    """Bytes of the held items' arrays when they were stored (not reduced by :meth:`take`)."""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def put(self, sample: Sample, state: PreparedItem | Stage, fingerprint: str, seconds: float) -> None:
        data = state.data if isinstance(state, PreparedItem) else state[0].data
        with self._lock:
            self.held[id(sample)] = (sample, state, fingerprint, seconds)
            self.nbytes += 0 if data is None else int(data.nbytes)

    def take(self, sample: Sample) -> Held | None:
        with self._lock:
            entry = self.held.get(id(sample))
            if entry is None or entry[0] is not sample:  # another object (a lazy sequence): read it again
                return None
            del self.held[id(sample)]
        return entry[1], entry[2], entry[3]

    def __len__(self) -> int:
        return len(self.held)


@dataclass
class StagedPrefetch:
    """Reads and pre-processes samples into a :class:`Prefetched`, each kept at the smallest stage after the
    decode: the stage is chosen on the first sample that pre-processes (the stage after which its array is
    smallest, the latest of equals) and used for the others."""

    pipeline: Pipeline
    expected_shape: tuple[int, ...] | None
    store: Prefetched = field(default_factory=Prefetched)
    keep: int | None = None
    """Ops applied before a sample is held; None until the first sample chose it."""

    def add(self, sample: Sample) -> None:
        """Read and pre-process ``sample`` and hold it with the CPU seconds that took on this thread (the loop
        charges them in its rate: :attr:`repliscope.evaluation.engine.LoopResult.ahead_share`). CPU, not wall: the
        reader runs at a lower priority, and on a busy machine its wall time is mostly waiting."""
        start = time.thread_time()
        state, fingerprint = self._staged(sample)
        self.store.put(sample, state, fingerprint, time.thread_time() - start)

    def _staged(self, sample: Sample) -> tuple[PreparedItem | Stage, str]:
        read = read_sample(sample)
        if read.data is None:
            return PreparedItem(None, read.error), read.fingerprint
        item: Item | str = encoded_item(read.data)
        ops = self.pipeline.pre_ops
        stop = len(ops) if self.keep is None else self.keep
        smallest: tuple[int, int] | None = None  # (nbytes, ops done)
        for done, op in enumerate(ops[:stop], start=1):
            item = apply_op(op, item, NO_TRACER)  # type: ignore[arg-type]
            if isinstance(item, str):
                return PreparedItem(None, item), read.fingerprint
            if self.keep is None and (smallest is None or item.data.nbytes <= smallest[0]):
                smallest = (int(item.data.nbytes), done)
        assert isinstance(item, Item)
        if self.keep is None:  # every op ran: hold the result, and hold the next samples at the smallest stage
            final = finish_item(self.pipeline, item, len(ops), self.expected_shape, NO_TRACER)
            if final.data is not None:  # (a failed shape check is no sample to choose the stage on)
                self.keep = smallest[1] if smallest is not None else 0
            return final, read.fingerprint
        return (item, self.keep), read.fingerprint


def lower_this_threads_priority(by: int) -> None:
    """Raise the nice value of the calling thread (Linux: a thread is a task with its own nice value) by ``by``;
    nothing where that is not possible. One-way: an unprivileged thread cannot lower it again, so it is only
    called on a thread that ends with its work."""
    if not sys.platform.startswith("linux"):
        return
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + by))
    except OSError:
        return


def warm_start(
    runners: Iterable[Runner],
    pipeline: Pipeline,
    samples: Sequence[Sample],
    expected_shape: tuple[int, ...] | None,
    *,
    budget: int = PREFETCH_BYTES,
    on_event: Event | None = None,
) -> Prefetched:
    """Load ``runners`` (in order, on a thread) while a reader thread reads and pre-processes ``samples`` in
    order, until the runners are loaded or the held samples reach ``budget`` bytes -> the samples read (empty when
    the runners were loaded already). The reader runs at a lower priority (nice +:data:`READ_AHEAD_NICE`): on a
    busy machine it takes the CPU the load leaves, and never slows the load, which the run waits for. A load
    error, or a reader's error (a pipeline mistake), is raised here once both threads ended."""
    todo = [r for r in runners if not r.loaded]
    staged = StagedPrefetch(pipeline, expected_shape)
    if not todo:
        return staged.store
    tell = on_event or (lambda _event: None)
    finished = threading.Event()
    failed: list[BaseException] = []

    def load() -> None:
        try:
            for runner in todo:
                runner.load()
        except BaseException as exc:  # handed to the calling thread
            failed.append(exc)
        finally:
            finished.set()
            tell("load finished")

    def read() -> None:
        lower_this_threads_priority(READ_AHEAD_NICE)
        why = "every sample read"
        try:
            for sample in samples:
                if finished.is_set() or staged.store.nbytes >= budget:
                    why = "loaded" if finished.is_set() else "budget"
                    break
                tell(f"read {sample.id}")
                staged.add(sample)
        except BaseException as exc:
            failed.append(exc)
            why = f"{type(exc).__name__}"
        tell(f"stopped: {why}")

    loader = threading.Thread(target=load, name="repliscope-load", daemon=True)
    reader = threading.Thread(target=read, name="repliscope-read-ahead", daemon=True)
    tell("load started")
    loader.start()
    reader.start()
    reader.join()
    loader.join()
    if failed:
        raise failed[0]
    return staged.store
