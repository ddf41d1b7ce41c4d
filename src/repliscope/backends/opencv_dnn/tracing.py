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
    """Called after every forward: keeps the raw per-layer ticks (one ``getPerfProfile`` call); the spans are made
    after the traced block, outside the measured work."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.types: list[str] = []
        self.forwards: list[tuple[Any, int, int, int]] = []
        """(per-layer ticks, start_ns, end_ns, tid) of every forward."""

    def __call__(self, net: Any, start_ns: int, end_ns: int) -> None:
        if not self.names:
            self.names = list(net.getLayerNames())
            self.types = [str(net.getLayer(name).type) for name in self.names]
        _, ticks = net.getPerfProfile()
        self.forwards.append((ticks, start_ns, end_ns, threading.get_native_id()))

    def convert(self, tracer: Any, index: ScopeIndex) -> None:
        """One ``opencv_dnn.forward`` span per forward with its layers (framework) and OpenCV layers (library)."""
        import cv2

        per_tick = 1e9 / cv2.getTickFrequency()
        for ticks, start_ns, end_ns, tid in self.forwards:
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
            tracer.record("opencv_dnn.forward", "framework", start_ns, end_ns, tid, {"source": "opencv_dnn"})
            record_layers(tracer, group_layers(nodes, index), tid, "opencv_dnn", estimated_start=True)


@contextlib.contextmanager
def opencv_layer_timings(tracer: Any, runner: Any) -> Iterator[None]:
    """Per-layer spans for every forward of ``runner`` (an OpenCVDnnRunner) for the duration."""
    runner.load()
    timer = _LayerTimer()
    runner.layer_timer = timer
    try:
        yield
    finally:
        runner.layer_timer = None
    timer.convert(tracer, ScopeIndex(runner.onnx_path))
