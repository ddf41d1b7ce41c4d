"""Darknet: one ``framework`` span per layer, timed around each ``l.forward`` call of libdarknet's own layer
functions (:class:`repliscope.backends.darknet.layer_loop.LayerLoop` runs ``forward_network``'s loop from Python,
so the outputs stay ``network_predict``'s bit for bit).

Each image is a ``darknet.run`` span (the runner's) holding its layers in execution order, named as Darknet numbers
them (``convolutional_0`` … ``yolo_23``, ``op_type`` the ``LAYER_TYPE``: ``CONVOLUTIONAL``, ``MAXPOOL``, ``ROUTE``,
``UPSAMPLE``, ``YOLO``) and ``read_outputs``. There is no ``library`` level: the kernels (im2col + gemm) are inside
the C layer functions.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any


class _LayerTimer:
    """``on_layer`` of the layer loop: keeps (index, start_ns, end_ns, tid); spans are made after the block."""

    def __init__(self) -> None:
        self.times: list[tuple[int, int, int, int]] = []

    def __call__(self, index: int, start_ns: int, end_ns: int) -> None:
        self.times.append((index, start_ns, end_ns, threading.get_native_id()))

    def convert(self, tracer: Any, names: list[str], kinds: list[str]) -> None:
        for index, start_ns, end_ns, tid in self.times:
            name = names[index]
            attrs = {"layer": name, "op_type": kinds[index], "source": "darknet", "index": index}
            tracer.record(name, "framework", start_ns, end_ns, tid, attrs)


@contextlib.contextmanager
def darknet_layer_timings(tracer: Any, runner: Any) -> Iterator[None]:
    """Per-layer spans for every image ``runner`` (a DarknetRunner) runs for the duration, plus its stage spans."""
    loop = runner.layer_loop()  # loads the network and checks the struct layout before anything is timed
    timer = _LayerTimer()
    runner.tracer, runner.layer_timer = tracer, timer
    try:
        yield
    finally:
        runner.tracer, runner.layer_timer = None, None
    timer.convert(tracer, loop.names, loop.kinds)
