"""OpenCV DNN: per-layer timings of every forward (``Net.getPerfProfile``) -> ``framework`` layer spans.

OpenCV reports only each layer's duration (ticks of ``cv2.getTickFrequency()``), not when it started; layers
run one after the other, so they are laid end to end from the forward's start (``estimated_start`` is set on
those spans). Layer names are the ONNX node names (plus ``TransformLayout`` layers OpenCV inserts, unmapped);
the op type is OpenCV's layer type (``Conv2``, ``Clip``).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from repliscope.tracing.layers import NodeTiming, ScopeIndex, group_layers, record_layers


class _LayerTimer:
    def __init__(self, tracer: Any, index: ScopeIndex) -> None:
        self.tracer = tracer
        self.index = index
        self.names: list[str] | None = None
        self.types: list[str] = []

    def __call__(self, net: Any, start_ns: int, end_ns: int) -> None:
        import cv2

        if self.names is None:
            self.names = list(net.getLayerNames())
            self.types = [str(net.getLayer(name).type) for name in self.names]
        _, ticks = net.getPerfProfile()
        per_tick = 1e9 / cv2.getTickFrequency()
        durations = [int(t * per_tick) for t in ticks.ravel()]
        total = sum(durations)
        scale = (end_ns - start_ns) / total if total > end_ns - start_ns else 1.0
        nodes: list[NodeTiming] = []
        t = start_ns
        for name, kind, d in zip(self.names, self.types, durations, strict=False):
            if d <= 0:
                continue
            d = int(d * scale)
            nodes.append(NodeTiming(name, kind, t, t + d))
            t += d
        tid = threading.get_native_id()
        self.tracer.record("opencv_dnn.forward", "framework", start_ns, end_ns, tid, {"source": "opencv_dnn"})
        record_layers(self.tracer, group_layers(nodes, self.index), tid, "opencv_dnn", estimated_start=True)


@contextlib.contextmanager
def opencv_layer_timings(tracer: Any, runner: Any) -> Iterator[None]:
    """Per-layer spans for every forward of ``runner`` (an OpenCVDnnRunner) for the duration."""
    runner.load()
    runner.layer_timer = _LayerTimer(tracer, ScopeIndex(runner.onnx_path))
    try:
        yield
    finally:
        runner.layer_timer = None
