"""libdarknet's ``network_predict`` driven layer by layer from Python, so each layer can be timed.

``network_predict(net, input)`` saves ``*net``, sets ``input`` and clears ``truth``, ``train`` and ``delta``, calls
``forward_network`` and restores ``*net``; ``forward_network`` (src/network.c of the 2018 source) copies the
network and runs::

    for (i = 0; i < net.n; ++i) {
        net.index = i;  layer l = net.layers[i];
        if (l.delta) fill_cpu(l.outputs * l.batch, 0, l.delta, 1);
        l.forward(l, net);
        net.input = l.output;
        if (l.truth) net.truth = l.output;
    }
    calc_network_cost(netp);

:class:`LayerLoop` makes exactly these calls through the exact struct layouts of
:mod:`repliscope.backends.darknet.structs` (the same C functions on the same buffers, so the layer outputs are
``network_predict``'s bit for bit), with a ``perf_counter_ns`` pair around each ``l.forward``.

Before it calls anything it checks the layer array it reads against repliscope's own reading of the ``.cfg`` (type,
input and output shapes, batch of every layer) and each layer's ``forward`` pointer against the address of the
exported ``forward_<type>_layer`` of that library: a layout that did not match would fail these checks instead of
calling a wrong address.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from repliscope.backends.darknet.structs import FORWARD, LAYER, LAYER_TYPES, NETWORK
from repliscope.convert.darknet_cfg import Network
from repliscope.errors import FrameworkError

_FORWARD_SYMBOL: dict[str, str] = {
    "CONVOLUTIONAL": "forward_convolutional_layer",
    "DECONVOLUTIONAL": "forward_deconvolutional_layer",
    "CONNECTED": "forward_connected_layer",
    "MAXPOOL": "forward_maxpool_layer",
    "SOFTMAX": "forward_softmax_layer",
    "DETECTION": "forward_detection_layer",
    "DROPOUT": "forward_dropout_layer",
    "CROP": "forward_crop_layer",
    "ROUTE": "forward_route_layer",
    "COST": "forward_cost_layer",
    "NORMALIZATION": "forward_normalization_layer",
    "AVGPOOL": "forward_avgpool_layer",
    "LOCAL": "forward_local_layer",
    "SHORTCUT": "forward_shortcut_layer",
    "ACTIVE": "forward_activation_layer",
    "RNN": "forward_rnn_layer",
    "GRU": "forward_gru_layer",
    "LSTM": "forward_lstm_layer",
    "CRNN": "forward_crnn_layer",
    "BATCHNORM": "forward_batchnorm_layer",
    "REGION": "forward_region_layer",
    "YOLO": "forward_yolo_layer",
    "ISEG": "forward_iseg_layer",
    "REORG": "forward_reorg_layer",
    "UPSAMPLE": "forward_upsample_layer",
    "LOGXENT": "forward_logistic_layer",
    "L2NORM": "forward_l2norm_layer",
}
"""``LAYER_TYPE`` -> the function ``parse_network_cfg`` stores in ``l.forward`` (CPU build)."""

LayerTimes = Callable[[int, int, int], None]
"""Called after each layer with (layer index, start_ns, end_ns) on ``time.perf_counter_ns``."""


@dataclass(frozen=True)
class LayerTiming:
    """One layer's ``l.forward`` call: Darknet ``name`` (``convolutional_0``), ``kind`` (``CONVOLUTIONAL``)."""

    index: int
    name: str
    kind: str
    start_ns: int
    end_ns: int


def _symbol_address(lib: ctypes.CDLL, name: str) -> int:
    return ctypes.cast(getattr(lib, name), ctypes.c_void_p).value or 0


class LayerLoop:
    """``forward_network`` of the loaded network ``net`` (a ``network *``) run from Python, layer by layer.

    ``network``: repliscope's reading of the same ``.cfg`` at the size the net was built (or resized) to; the
    layer array is checked against it on construction (FrameworkError naming the first mismatch)."""

    def __init__(self, lib: ctypes.CDLL, net: int, network: Network) -> None:
        self._lib = lib
        self._net = ctypes.cast(net, ctypes.POINTER(NETWORK))
        self._fill = lib.fill_cpu
        self._fill.argtypes = [ctypes.c_int, ctypes.c_float, ctypes.c_void_p, ctypes.c_int]
        self._fill.restype = None
        self._cost = lib.calc_network_cost
        self._cost.argtypes = [ctypes.c_void_p]
        self._cost.restype = None
        self.names = [lay.name for lay in network.layers]
        self.kinds: list[str] = []
        self._forwards: list[Any] = []  # FORWARD instances
        head = self._net.contents
        if head.n != len(network.layers):
            raise FrameworkError(f"libdarknet's network has {head.n} layers, the cfg {len(network.layers)}")
        layers = ctypes.cast(head.layers, ctypes.POINTER(LAYER))
        addresses = {kind: _symbol_address(lib, sym) for kind, sym in _FORWARD_SYMBOL.items() if hasattr(lib, sym)}
        for i, lay in enumerate(network.layers):
            c_layer = layers[i]
            kind = LAYER_TYPES[c_layer.type] if 0 <= c_layer.type < len(LAYER_TYPES) else f"type {c_layer.type}"
            if kind.lower() != lay.type:
                raise FrameworkError(f"layer {i}: libdarknet's layer is {kind}, the cfg's [{lay.type}]")
            out = (c_layer.out_c, c_layer.out_h, c_layer.out_w)
            if lay.type != "yolo" and out != tuple(lay.out_shape):  # resize_yolo_layer leaves out_w/out_h stale
                raise FrameworkError(f"layer {i} ({lay.name}): libdarknet's output is {out}, the cfg's {lay.out_shape}")
            if c_layer.outputs != int(np.prod(lay.out_shape)) or c_layer.batch != head.batch:
                raise FrameworkError(
                    f"layer {i} ({lay.name}): libdarknet's outputs {c_layer.outputs} x batch {c_layer.batch}, "
                    f"expected {int(np.prod(lay.out_shape))} x {head.batch}"
                )
            want = addresses.get(kind)
            if not want or c_layer.forward != want:
                raise FrameworkError(
                    f"layer {i} ({lay.name}): its forward pointer is not libdarknet's {_FORWARD_SYMBOL.get(kind, kind)}"
                )
            self.kinds.append(kind)
            self._forwards.append(FORWARD(c_layer.forward))
        self._layers = layers

    def predict(self, data: np.ndarray, on_layer: LayerTimes | None = None) -> None:
        """``network_predict(net, data)`` (``data``: float32 C-contiguous, the network's input size) with
        ``on_layer(i, start_ns, end_ns)`` after each layer's ``forward``. The outputs are then read as after
        ``network_predict`` (``get_network_image_layer``)."""
        netp = self._net
        saved = NETWORK.from_buffer_copy(netp.contents)  # network orig = *net
        try:
            netp.contents.input = data.ctypes.data
            netp.contents.truth = None
            netp.contents.train = 0
            netp.contents.delta = None
            net = NETWORK.from_buffer_copy(netp.contents)  # forward_network: network net = *netp
            clock = time.perf_counter_ns
            for i, forward in enumerate(self._forwards):
                net.index = i
                layer = self._layers[i]
                if layer.delta:
                    self._fill(layer.outputs * layer.batch, 0.0, layer.delta, 1)
                start = clock()
                forward(layer, net)
                end = clock()
                net.input = layer.output
                if layer.truth:
                    net.truth = layer.output
                if on_layer is not None:
                    on_layer(i, start, end)
            self._cost(ctypes.cast(netp, ctypes.c_void_p))
        finally:
            ctypes.memmove(ctypes.addressof(netp.contents), ctypes.addressof(saved), ctypes.sizeof(NETWORK))

    def timed_predict(self, data: np.ndarray) -> list[LayerTiming]:
        """:meth:`predict` -> one :class:`LayerTiming` per layer, in execution order."""
        times: list[tuple[int, int, int]] = []
        self.predict(data, lambda i, s, e: times.append((i, s, e)))
        return [LayerTiming(i, self.names[i], self.kinds[i], s, e) for i, s, e in times]
