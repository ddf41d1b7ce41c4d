"""Darknet (.cfg + .weights) -> ONNX, layer for layer, Darknet's layer names kept.

Each Darknet layer becomes a few ONNX nodes whose LAST output tensor is named after the layer
(``convolutional_0``, ``maxpool_11``, ``route_17``, ``upsample_19``, ``yolo_16``), so every layer output can be
fetched by name and paired with libdarknet's ``net->layers[i].output`` (:mod:`repliscope.convert.darknet_verify`).

- ``convolutional``: ``Conv`` (pads = Darknet's ``pad ? size/2 : padding``) with batch norm FOLDED the way Darknet
  normalises: ``(x - mean) / (sqrt(variance) + .000001f)`` (epsilon added to the square root, not to the variance)
  then ``* scales + biases``; ``leaky`` = ``LeakyRelu(alpha=0.1)``, ``relu``, ``logistic`` = ``Sigmoid``.
- ``maxpool``: ``MaxPool`` with pads ``[padding/2, padding/2, padding - padding/2, ...]`` (Darknet's window offset
  ``-padding/2``; padded cells never win), so the stride-1 size-2 pool of YOLOv3-tiny keeps 13x13.
- ``route``: ``Concat`` on channels (``Identity`` for one layer); ``shortcut``: ``Add``; ``upsample``: nearest
  ``Resize`` (asymmetric, floor) times ``scale``.
- ``yolo``: the logistic on x, y, objectness and classes of each anchor (w, h stay raw), as ``forward_yolo_layer``.

The model's outputs are the yolo layers (NCHW, batch axis dynamic); ``opset`` 17.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from repliscope.convert.darknet_cfg import (
    LayerPlan,
    Network,
    Weights,
    artifact_size,
    load_network_cfg,
    read_weights,
)
from repliscope.runtimes.loaders import Conversion

if TYPE_CHECKING:
    from repliscope.runtimes.base import ModelArtifact

OPSET = 17
CONVERTER_VERSION = "1"
DARKNET_BN_EPSILON = 1e-6
LEAKY_SLOPE = 0.1


def fold_batch_norm(conv: Any, epsilon: float = DARKNET_BN_EPSILON) -> tuple[np.ndarray, np.ndarray]:
    """(kernel, bias) float32 with Darknet's batch norm folded in (see the module doc)."""
    if conv.scales is None:
        return conv.kernel.astype(np.float32), conv.biases.astype(np.float32)
    factor = conv.scales.astype(np.float64) / (np.sqrt(conv.variance.astype(np.float64)) + epsilon)
    kernel = conv.kernel.astype(np.float64) * factor[:, None, None, None]
    bias = conv.biases.astype(np.float64) - conv.mean.astype(np.float64) * factor
    return kernel.astype(np.float32), bias.astype(np.float32)


def build_model(
    net: Network,
    weights: Weights,
    *,
    epsilon: float = DARKNET_BN_EPSILON,
    leaky_slope: float = LEAKY_SLOPE,
    input_name: str = "data",
    outputs: list[str] | None = None,
) -> Any:
    """The ``onnx.ModelProto``. ``epsilon`` / ``leaky_slope`` are parameters so a test can inject a converter bug;
    ``outputs``: layer names to expose as graph outputs (default: the yolo layers, else the last layer)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    nodes: list[Any] = []
    inits: list[Any] = []
    names: dict[int, str] = {}
    prev = input_name

    def const(name: str, arr: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(arr, name))
        return name

    for lay in net.layers:
        out = lay.name
        p = lay.params
        if lay.type == "convolutional":
            kernel, bias = fold_batch_norm(weights.layers[lay.name], epsilon)
            pad, size, stride = int(p["pad"]), int(p["size"]), int(p["stride"])  # type: ignore[call-overload]
            act = p["activation"]
            conv_out = out if act == "linear" else f"{out}/conv"
            inputs = [prev, const(f"{out}/W", kernel), const(f"{out}/B", bias)]
            nodes.append(
                helper.make_node(
                    "Conv",
                    inputs,
                    [conv_out],
                    name=f"{out}/conv",
                    kernel_shape=[size, size],
                    strides=[stride, stride],
                    pads=[pad, pad, pad, pad],
                )
            )
            if act == "leaky":
                nodes.append(helper.make_node("LeakyRelu", [conv_out], [out], name=f"{out}/leaky", alpha=leaky_slope))
            elif act == "relu":
                nodes.append(helper.make_node("Relu", [conv_out], [out], name=f"{out}/relu"))
            elif act == "logistic":
                nodes.append(helper.make_node("Sigmoid", [conv_out], [out], name=f"{out}/logistic"))
        elif lay.type == "maxpool":
            size, stride, padding = int(p["size"]), int(p["stride"]), int(p["padding"])  # type: ignore[call-overload]
            begin = padding // 2
            nodes.append(
                helper.make_node(
                    "MaxPool",
                    [prev],
                    [out],
                    name=out,
                    kernel_shape=[size, size],
                    strides=[stride, stride],
                    pads=[begin, begin, padding - begin, padding - begin],
                )
            )
        elif lay.type == "route":
            srcs = [names[i] for i in p["layers"]]  # type: ignore[attr-defined]
            if len(srcs) > 1:
                nodes.append(helper.make_node("Concat", srcs, [out], name=out, axis=1))
            else:
                nodes.append(helper.make_node("Identity", srcs, [out], name=out))
        elif lay.type == "shortcut":
            nodes.append(helper.make_node("Add", [prev, names[int(p["from"])]], [out], name=out))  # type: ignore[call-overload]
        elif lay.type == "upsample":
            s = float(p["stride"])  # type: ignore[arg-type]
            scales = const(f"{out}/scales", np.asarray([1, 1, s, s], np.float32))
            up = out if float(p["scale"]) == 1.0 else f"{out}/resize"  # type: ignore[arg-type]
            nodes.append(
                helper.make_node(
                    "Resize",
                    [prev, "", scales],
                    [up],
                    name=f"{out}/resize",
                    mode="nearest",
                    coordinate_transformation_mode="asymmetric",
                    nearest_mode="floor",
                )
            )
            if up != out:
                nodes.append(
                    helper.make_node(
                        "Mul",
                        [up, const(f"{out}/scale", np.asarray(p["scale"], np.float32))],
                        [out],
                        name=f"{out}/scale",
                    )
                )
        elif lay.type == "yolo":
            nodes.extend(_yolo_nodes(lay, prev, out, const))
        names[lay.index] = out
        prev = out
    wanted = outputs or [lay.name for lay in net.layers if lay.type == "yolo"] or [net.layers[-1].name]
    by_name = {lay.name: lay for lay in net.layers}
    graph_outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["N", *by_name[n].out_shape]) for n in wanted]
    graph_input = helper.make_tensor_value_info(
        input_name, TensorProto.FLOAT, ["N", net.channels, net.height, net.width]
    )
    graph = helper.make_graph(nodes, "darknet", [graph_input], graph_outputs, initializer=inits)
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        producer_name="repliscope.convert.darknet_onnx",
        producer_version=CONVERTER_VERSION,
    )
    onnx.checker.check_model(model)
    return model


def _yolo_nodes(lay: LayerPlan, src: str, out: str, const: Any) -> list[Any]:
    """Logistic on entries 0, 1 (x, y) and 4.. (objectness, classes) of each anchor; w, h (2, 3) unchanged."""
    from onnx import helper

    c, h, w = lay.in_shape
    a = len(lay.params["mask"])  # type: ignore[arg-type]
    entries = c // a
    shape5 = const(f"{out}/shape5", np.asarray([-1, a, entries, h, w], np.int64))
    shape4 = const(f"{out}/shape4", np.asarray([-1, c, h, w], np.int64))
    split = const(f"{out}/split", np.asarray([2, 2, entries - 4], np.int64))
    return [
        helper.make_node("Reshape", [src, shape5], [f"{out}/r5"], name=f"{out}/reshape5"),
        helper.make_node(
            "Split", [f"{out}/r5", split], [f"{out}/xy", f"{out}/wh", f"{out}/oc"], name=f"{out}/split", axis=2
        ),
        helper.make_node("Sigmoid", [f"{out}/xy"], [f"{out}/xy_s"], name=f"{out}/sigmoid_xy"),
        helper.make_node("Sigmoid", [f"{out}/oc"], [f"{out}/oc_s"], name=f"{out}/sigmoid_obj_cls"),
        helper.make_node(
            "Concat", [f"{out}/xy_s", f"{out}/wh", f"{out}/oc_s"], [f"{out}/cat"], name=f"{out}/concat", axis=2
        ),
        helper.make_node("Reshape", [f"{out}/cat", shape4], [out], name=out),
    ]


def convert(
    cfg: Path, weights: Path, out: Path, *, size: tuple[int, int] | None = None, **kwargs: Any
) -> dict[str, Any]:
    """Write the ONNX file (at the cfg's input size, or ``size`` = (height, width)); returns what was done
    (layers, parameters, input size, seconds)."""
    import onnx

    start = time.perf_counter()
    net = load_network_cfg(cfg, size)
    w = read_weights(weights, net)
    model = build_model(net, w, **kwargs)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out.parent, suffix=".onnx.part")
    os.close(fd)
    try:
        onnx.save(model, tmp)
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    params = sum(int(np.prod(i.dims)) for i in model.graph.initializer)
    return {
        "converter": "repliscope.convert.darknet_onnx",
        "converter_version": CONVERTER_VERSION,
        "opset": OPSET,
        "layers": len(net.layers),
        "parameters": params,
        "input_size": [net.height, net.width],
        "weights_version": ".".join(map(str, w.version)),
        "seconds": round(time.perf_counter() - start, 3),
        "path": str(out),
    }


class DarknetToOnnx(Conversion):
    """A ``darknet`` artifact (``.weights`` + its ``.cfg``) -> ONNX at its input size (the manifest's, or a
    pitfall's other size), through the shared verified cache (:meth:`repliscope.runtimes.loaders.Conversion.cached`).

    Cached under ``darknet-onnx/<key>/model.onnx``, ``key`` the sha256 of weights + cfg + converter version +
    opset (+ the size when it is not the cfg's). The sidecar ``model.json`` records the inputs (the weights' and
    cfg's sha256 as the manifest declares them, converter version, opset, size) and the model's sha256; a hit is
    used only when both match. The info (the record's ``notes["conversion"]``) repeats the inputs."""

    source = "darknet"
    target = "onnx"
    path_key = "path"
    notes_carry_inputs = True

    def check_source(self, artifact: ModelArtifact) -> None:
        super().check_source(artifact)
        if artifact.config_path is None:
            raise ValueError("a darknet artifact needs its .cfg (source.config)")

    def cache_path(self, artifact: ModelArtifact, cache_dir: Path) -> Path:
        assert artifact.config_path is not None
        size = artifact_size(artifact)
        parts: list[Any] = [artifact.sha256, artifact.config_sha256, CONVERTER_VERSION, OPSET]
        if size is not None and size != _cfg_size(artifact.config_path):
            parts.append(list(size))  # the cfg's own size keeps the key conversions made before had
        key = hashlib.sha256(json.dumps(parts).encode())
        return Path(cache_dir) / "darknet-onnx" / key.hexdigest()[:32] / "model.onnx"

    def inputs(self, artifact: ModelArtifact) -> dict[str, Any]:
        size = artifact_size(artifact)
        return {
            "weights_sha256": artifact.sha256,
            "config_sha256": artifact.config_sha256,
            "converter_version": CONVERTER_VERSION,
            "opset": OPSET,
            "size": list(size) if size is not None else None,
        }

    def convert(self, artifact: ModelArtifact, out: Path) -> dict[str, Any]:
        assert artifact.config_path is not None
        return convert(artifact.config_path, artifact.path, out, size=artifact_size(artifact))


DARKNET_TO_ONNX = DarknetToOnnx()


def convert_cached(artifact: ModelArtifact, cache_dir: Path) -> tuple[Path, dict[str, Any]]:
    """The ONNX conversion of a ``darknet`` artifact, converted on first use and reused after (verified):
    :class:`DarknetToOnnx`."""
    return DARKNET_TO_ONNX.cached(artifact, cache_dir)


def _cfg_size(cfg: Path) -> tuple[int, int]:
    net = load_network_cfg(cfg)
    return net.height, net.width
