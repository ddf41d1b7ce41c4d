"""Darknet (.cfg + .weights) -> a Keras 3 model (NHWC), as the TF Model Garden port re-engineered YOLO, verified
layer by layer against libdarknet.

Each Darknet layer is one or more Keras layers; the last one carries the Darknet layer's name
(``convolutional_0``, ``maxpool_11``, ``yolo_16``) so its output pairs with ``net->layers[i].output``:

- ``convolutional``: ``ZeroPadding2D`` (Darknet's symmetric pad) + ``Conv2D`` (valid, BN folded as Darknet
  normalises: :func:`repliscope.convert.darknet_onnx.fold_batch_norm`) + ``LeakyReLU(0.1)`` / ``ReLU`` /
  ``Activation('sigmoid')``;
- ``maxpool``: ``MaxPooling2D(padding='same')``, which pads ``size - 1`` at the end with nothing that wins a max:
  Darknet's window offset ``-padding/2 = 0`` with ``padding = size - 1`` (any other padding is refused);
- ``route``: ``Concatenate`` on channels (or the routed layer itself); ``upsample``: ``UpSampling2D`` nearest;
  ``shortcut``: ``Add``; ``yolo``: :class:`DarknetYolo` (logistic on x, y, objectness, classes of each anchor).

Loading and editing a port file: importing this module registers :class:`DarknetYolo` with Keras, so::

    import keras
    import repliscope.convert.darknet_keras  # noqa: F401  (registers repliscope>DarknetYolo)

    model = keras.saving.load_model("yolov3-tiny.keras")
    model.get_layer("convolutional_13").negative_slope = 0.1   # or set_weights, or a new functional model
    model.save("edited.keras")

(or ``custom_objects=CUSTOM_OBJECTS``, or :func:`load_darknet_port`). Any functional model built from its layers
whose layers keep the Darknet names is compared with libdarknet by ``repliscope diff MANIFEST --candidate FILE
--layers``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import keras
import numpy as np

from repliscope.convert.darknet_cfg import DarknetFormatError, Network, Weights, load_network_cfg, read_weights
from repliscope.convert.darknet_onnx import DARKNET_BN_EPSILON, LEAKY_SLOPE, fold_batch_norm


@keras.saving.register_keras_serializable(package="repliscope")
class DarknetYolo(keras.layers.Layer):
    """Darknet ``forward_yolo_layer`` on NHWC: logistic on entries 0, 1 and 4.. of each of ``anchors`` groups of
    ``entries`` channels; w, h (entries 2, 3) unchanged.

    Registered with Keras as ``repliscope>DarknetYolo`` when this module is imported, so a port file loads with
    ``import repliscope.convert.darknet_keras`` then ``keras.saving.load_model(path)`` (Keras imports no module
    a file names: it only finds classes registered before the call)."""

    def __init__(self, anchors: int, entries: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.anchors, self.entries = anchors, entries
        mask = np.ones((anchors, entries), np.float32)
        mask[:, 2:4] = 0
        self._mask = mask.reshape(-1)

    def call(self, x: Any) -> Any:
        m = keras.ops.convert_to_tensor(self._mask, dtype=x.dtype)
        return m * keras.ops.sigmoid(x) + (1 - m) * x

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "anchors": self.anchors, "entries": self.entries}


CUSTOM_OBJECTS: dict[str, type] = {"repliscope>DarknetYolo": DarknetYolo}
"""The custom layers of a Darknet port, by their registered names (``custom_objects=`` of ``load_model``)."""


def _yolo_layer_class() -> Any:
    """:class:`DarknetYolo` (kept for the callers written when the class was defined on demand)."""
    return DarknetYolo


def load_darknet_port(path: Path) -> Any:
    """The Keras port file ``path`` (a ``.keras`` file ``convert --to keras`` wrote, edited or not) as a
    ``keras.Model`` (not compiled); a file that is no Keras model is one RepliscopeError naming it."""
    from repliscope.errors import RepliscopeError

    try:
        return keras.saving.load_model(path, compile=False, custom_objects=CUSTOM_OBJECTS)
    except Exception as exc:
        raise RepliscopeError(f"cannot load the Keras port '{path}': {type(exc).__name__}: {exc}") from None


def build_keras(
    net: Network, weights: Weights, *, epsilon: float = DARKNET_BN_EPSILON, leaky_slope: float = LEAKY_SLOPE
) -> tuple[Any, dict[str, list[Any]]]:
    """(the functional ``keras.Model`` whose outputs are every Darknet layer, in order; per Darknet layer the Keras
    layers that make it, applied in order to its first input — route / shortcut take their inputs as a list)."""
    yolo_cls = DarknetYolo
    inp = keras.Input((net.height, net.width, net.channels), name="data")
    outs: list[Any] = []
    parts: dict[str, list[Any]] = {}
    x = inp
    for lay in net.layers:
        p = lay.params
        name = lay.name
        if lay.type == "convolutional":
            kernel, bias = fold_batch_norm(weights.layers[name], epsilon)
            pad, size, stride = int(p["pad"]), int(p["size"]), int(p["stride"])  # type: ignore[call-overload]
            seq: list[Any] = []
            if pad:
                seq.append(keras.layers.ZeroPadding2D(pad, name=f"{name}_pad"))
            act = p["activation"]
            conv = keras.layers.Conv2D(
                kernel.shape[0], size, strides=stride, padding="valid", name=name if act == "linear" else f"{name}_conv"
            )
            seq.append(conv)
            if act == "leaky":
                seq.append(keras.layers.LeakyReLU(negative_slope=leaky_slope, name=name))
            elif act == "relu":
                seq.append(keras.layers.ReLU(name=name))
            elif act == "logistic":
                seq.append(keras.layers.Activation("sigmoid", name=name))
            y = x
            for layer in seq:
                y = layer(y)
            conv.set_weights([kernel.transpose(2, 3, 1, 0), bias])
        elif lay.type == "maxpool":
            size, stride, padding = int(p["size"]), int(p["stride"]), int(p["padding"])  # type: ignore[call-overload]
            h = lay.in_shape[1]
            if padding != size - 1 or lay.out_shape[1] != -(-h // stride):
                raise DarknetFormatError(
                    f"{name}: a maxpool with padding {padding} (size {size}, stride {stride}) has "
                    "no Keras equivalent here (padding = size - 1 only)"
                )
            seq = [keras.layers.MaxPooling2D(size, strides=stride, padding="same", name=name)]
            y = seq[0](x)
        elif lay.type == "route":
            srcs = [outs[i] for i in p["layers"]]  # type: ignore[attr-defined]
            seq = [keras.layers.Concatenate(axis=-1, name=name) if len(srcs) > 1 else keras.layers.Identity(name=name)]
            y = seq[0](srcs if len(srcs) > 1 else srcs[0])
        elif lay.type == "shortcut":
            seq = [keras.layers.Add(name=name)]
            y = seq[0]([x, outs[int(p["from"])]])  # type: ignore[call-overload]
        elif lay.type == "upsample":
            if float(p["scale"]) != 1.0:  # type: ignore[arg-type]
                raise DarknetFormatError(f"{name}: upsample scale {p['scale']} is not supported by the Keras port")
            seq = [keras.layers.UpSampling2D(int(p["stride"]), interpolation="nearest", name=name)]  # type: ignore[call-overload]
            y = seq[0](x)
        elif lay.type == "yolo":
            anchors = len(p["mask"])  # type: ignore[arg-type]
            seq = [yolo_cls(anchors, lay.in_shape[0] // anchors, name=name)]
            y = seq[0](x)
        else:  # pragma: no cover - plan_layers refuses other sections
            raise DarknetFormatError(f"{name}: unsupported layer type {lay.type}")
        parts[name] = seq
        outs.append(y)
        x = y
    return keras.Model(inp, outs, name="darknet"), parts


def keras_layer_outputs(model: Any, images_nchw: np.ndarray, names: list[str]) -> dict[str, np.ndarray]:
    """Every Darknet layer's output of the Keras port (carried), back in NCHW."""
    outs = model.predict(np.ascontiguousarray(images_nchw.transpose(0, 2, 3, 1)), verbose=0)
    return {n: np.asarray(o).transpose(0, 3, 1, 2) for n, o in zip(names, outs, strict=True)}


def convert_keras(cfg: Path, weights: Path, out: Path) -> dict[str, Any]:
    """Write ``out`` (.keras); returns what was done."""
    import time

    start = time.perf_counter()
    net = load_network_cfg(cfg)
    model, _ = build_keras(net, read_weights(weights, net))
    model.save(out)
    return {
        "converter": "repliscope.convert.darknet_keras",
        "layers": len(net.layers),
        "parameters": int(model.count_params()),
        "seconds": round(time.perf_counter() - start, 3),
        "path": str(out),
    }
