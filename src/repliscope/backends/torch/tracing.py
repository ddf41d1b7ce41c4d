"""torch: one ``framework`` span per module call (forward pre/post hooks) and, at ``library`` level, the
aten / oneDNN ops torch.profiler records, converted onto the tracer's clock.

Module spans are named by the module path (``_blocks.3._depthwise_conv``; the model itself is ``""`` and its
span is named ``<model>``), with ``layer`` (the path, ``#n`` for the n-th call in one forward), ``op_type`` (the
module class) and ``leaf`` (no child modules). Kineto's events carry epoch nanoseconds; they are moved onto the
perf_counter_ns clock with the tracer's epoch offset and put on the thread of the innermost span containing them.
"""

from __future__ import annotations

import bisect
import contextlib
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

from repliscope.errors import RepliscopeError
from repliscope.tracing.levels import RANK
from repliscope.tracing.spans import SpanRecord


class _ModuleHooks:
    """Pre/post forward hooks on every submodule: a per-thread stack of start times and call counters; each call
    is kept raw (module index, n-th call, start, end, thread) and becomes a span after the traced block."""

    def __init__(self) -> None:
        self.local = threading.local()
        self.calls: list[tuple[int, int, int, int, int]] = []

    def pre(self) -> Any:
        local = self.local

        def hook(module: Any, args: Any) -> None:
            try:
                stack = local.stack
            except AttributeError:
                stack = local.stack = []
                local.counts, local.tid = {}, threading.get_native_id()
            if not stack:
                local.counts.clear()  # a new forward of the model: call counters restart
            stack.append(time.perf_counter_ns())

        return hook

    def post(self, index: int) -> Any:
        local, calls = self.local, self.calls

        def hook(module: Any, args: Any, output: Any) -> None:
            end = time.perf_counter_ns()
            counts = local.counts
            n = counts[index] = counts.get(index, 0) + 1
            calls.append((index, n, local.stack.pop(), end, local.tid))

        return hook


@contextlib.contextmanager
def instrument(tracer: Any, runner: Any) -> Iterator[None]:
    """The torch runtime's instrument: module hooks (framework); torch.profiler ops too at ``library``."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(torch_module_hooks(tracer, runner.module))
        if tracer.rank >= RANK["library"]:
            stack.enter_context(torch_profiler_ops(tracer))
        yield


@contextlib.contextmanager
def torch_module_hooks(tracer: Any, module: Any) -> Iterator[None]:
    """Hooks on ``module`` and all its submodules for the duration (removed on exit), then one ``framework``
    span per module call."""
    hooks = _ModuleHooks()
    handles = []
    modules: list[tuple[str, str, bool]] = []
    for path, sub in module.named_modules():
        handles.append(sub.register_forward_pre_hook(hooks.pre()))
        handles.append(sub.register_forward_hook(hooks.post(len(modules))))
        modules.append((path, type(sub).__name__, next(iter(sub.children()), None) is None))
    try:
        yield
    finally:
        for h in handles:
            h.remove()
    for index, n, start, end, tid in hooks.calls:
        path, op_type, leaf = modules[index]
        tracer.record(
            path or "<model>",
            "framework",
            start,
            end,
            tid,
            {"layer": path if n == 1 else f"{path}#{n}", "op_type": op_type, "leaf": leaf, "source": "torch"},
        )


@contextlib.contextmanager
def torch_profiler_ops(tracer: Any) -> Iterator[None]:
    """torch.profiler (CPU activities) for the duration; its ops become ``library`` spans on exit.

    torch.profiler records the ops of the thread that starts it only, and one profiler runs at a time: a second
    torch runner instrumented meanwhile (a ``data_parallel`` replica, inferring on its own thread) is an error,
    and ``model`` spans of other threads in the profiled period are listed in the trace's notes (their ops are
    missing). Each Kineto thread's ops go to the OS thread whose ``model`` spans contain most of them."""
    if "torch.profiler" in tracer.active:
        raise RepliscopeError(
            "library-level tracing of torch records the ops of one thread (torch.profiler "
            "sees only the thread that starts it): run one torch runner (evaluate: --schedule "
            "pipelined; pitfalls: --schedule pipelined and only variants that keep the runner, "
            "i.e. not threads_changed or float16_inference), or use --trace-level framework"
        )
    from torch.profiler import ProfilerActivity, profile

    first = len(tracer.spans)
    tracer.active.add("torch.profiler")
    try:
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            yield
    finally:
        tracer.active.discard("torch.profiler")
    live = sorted((s for s in tracer.spans[first:] if s.level == "model"), key=lambda s: s.start_ns)
    starts = [s.start_ns for s in live]
    caller = threading.get_native_id()
    ops: list[tuple[str, int, int, int]] = []
    votes: dict[int, Counter[int]] = {}
    for event in prof.profiler.kineto_results.events():
        start = int(event.start_ns()) - tracer.epoch_offset_ns
        end = int(event.end_ns()) - tracer.epoch_offset_ns
        if end <= start:
            continue
        thread = int(event.start_thread_id())
        ops.append((str(event.name()), start, end, thread))
        votes.setdefault(thread, Counter())[_thread_of(live, starts, start, end, caller)] += 1
    tid_of = {thread: counter.most_common(1)[0][0] for thread, counter in votes.items()}
    for name, start, end, thread in ops:
        tracer.record(name, "library", start, end, tid_of[thread], {"source": "torch.profiler"})
    unseen = sorted({s.tid for s in live if s.name == "inference"} - {caller})
    tracer.notes.setdefault("torch_profiler", []).append(
        {
            "ops": len(ops),
            "thread": caller,
            "clock": "kineto epoch ns minus the tracer's epoch offset",
            **({"threads_without_ops": unseen} if unseen else {}),
        }
    )


def _thread_of(spans: list[SpanRecord], starts: list[int], start: int, end: int, default: int) -> int:
    """The thread of the latest-starting ``model`` span (sorted by start) containing [start, end], else
    ``default`` (the thread that entered the profiler)."""
    for i in range(bisect.bisect_right(starts, start) - 1, max(-1, bisect.bisect_right(starts, start) - 17), -1):
        if end <= spans[i].end_ns:
            return spans[i].tid
    return default
