"""Per-layer time of a trace: p50 self time of every layer over the inferences traced, its share of the model
time (total self time / total model time), the top layers and per-op-type totals.

A layer is a ``framework`` span with a ``layer`` attribute (torch module calls, ONNX Runtime / OpenCV DNN layers
grouped by torch module scope); its *self* time is its duration minus its direct ``framework`` children, so
nested torch modules are not counted twice and the self times of one inference add up to the model's time.
An inference is a top-level ``framework`` span (``onnxruntime.run``, ``opencv_dnn.forward``, torch's ``<model>``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from repliscope.errors import RepliscopeError
from repliscope.tracing.levels import LEVELS
from repliscope.tracing.spans import SpanRecord, nest


@dataclass(frozen=True)
class LayerStat:
    """One layer key (``path`` or ``path#n``): p50 self time (ms) over ``count`` calls; ``share``: its total self
    time over the total model time of the traced inferences (so the shares of all layers add up to at most 1,
    the rest being the runtime's own work between layers)."""

    layer: str
    op_type: str
    count: int
    p50_ms: float
    share: float
    end_rank: float
    """Median position of the layer's end within its inference (0 = first to end): the execution order."""


@dataclass
class LayerTimes:
    """Per-layer self times of one trace (ns, one list entry per inference that ran the layer)."""

    source: str
    inferences: int
    model_ns: list[int]
    self_ns: dict[str, list[int]] = field(default_factory=dict)
    op_type: dict[str, str] = field(default_factory=dict)
    end_rank: dict[str, list[int]] = field(default_factory=dict)

    def p50_ms(self, key: str) -> float:
        return float(np.median(self.self_ns[key])) / 1e6

    def order(self) -> list[str]:
        """Layer keys in execution (end) order."""
        return sorted(self.self_ns, key=lambda k: float(np.median(self.end_rank[k])))


@dataclass(frozen=True)
class TraceSummary:
    source: str
    inferences: int
    model_p50_ms: float
    spans_per_level: dict[str, int]
    layers: list[LayerStat]
    op_types: list[tuple[str, float, float]]
    """(op type, summed p50 self time in ms, summed share of the model time), largest first."""

    def top(self, n: int) -> list[LayerStat]:
        return sorted(self.layers, key=lambda s: -s.p50_ms)[:n]


def layer_times(spans: Sequence[SpanRecord]) -> LayerTimes:
    """Self time of every layer in every inference of ``spans``; an error when the trace has no layers (it was
    recorded below the ``framework`` level)."""
    fw = [s for s in spans if s.level == "framework"]
    if not any("layer" in s.attributes for s in fw):
        raise RepliscopeError("the trace has no layer spans: record it with --trace-level framework or library")
    parents = nest(fw)
    child_ns = [0] * len(fw)
    for i, p in enumerate(parents):
        if p >= 0:
            child_ns[p] += fw[i].duration_ns
    roots = [i for i, p in enumerate(parents) if p < 0]
    root_of = list(range(len(fw)))
    for i in sorted(range(len(fw)), key=lambda i: (fw[i].tid, fw[i].start_ns, -fw[i].end_ns)):
        if parents[i] >= 0:
            root_of[i] = root_of[parents[i]]
    sources = {str(s.attributes.get("source", "")) for s in fw} - {""}
    out = LayerTimes(
        source="+".join(sorted(sources)) or "?", inferences=len(roots), model_ns=[fw[i].duration_ns for i in roots]
    )
    by_root: dict[int, list[int]] = {}
    for i, s in enumerate(fw):
        if "layer" in s.attributes:
            by_root.setdefault(root_of[i], []).append(i)
    for members in by_root.values():
        for rank, i in enumerate(sorted(members, key=lambda i: fw[i].end_ns)):
            key = str(fw[i].attributes["layer"]) or "<model>"
            out.self_ns.setdefault(key, []).append(fw[i].duration_ns - child_ns[i])
            out.op_type.setdefault(key, str(fw[i].attributes.get("op_type", "?")))
            out.end_rank.setdefault(key, []).append(rank)
    return out


def summarize(spans: Sequence[SpanRecord]) -> TraceSummary:
    """The summary of a trace (see the module doc); levels without layer spans give an error."""
    times = layer_times(spans)
    model = float(np.median(times.model_ns)) / 1e6 if times.model_ns else 0.0
    whole = float(sum(times.model_ns))
    layers = [
        LayerStat(
            k,
            times.op_type[k],
            len(times.self_ns[k]),
            times.p50_ms(k),
            sum(times.self_ns[k]) / whole if whole else 0.0,
            float(np.median(times.end_rank[k])),
        )
        for k in times.order()
    ]
    totals: dict[str, tuple[float, float]] = {}
    for s in layers:
        ms, share = totals.get(s.op_type, (0.0, 0.0))
        totals[s.op_type] = (ms + s.p50_ms, share + s.share)
    op_types = sorted(((t, ms, share) for t, (ms, share) in totals.items()), key=lambda x: -x[1])
    counts = {level: sum(1 for s in spans if s.level == level) for level in LEVELS[1:]}
    return TraceSummary(times.source, times.inferences, model, counts, layers, op_types)
