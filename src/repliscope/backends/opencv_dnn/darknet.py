"""OpenCV's own Darknet reader (``cv2.dnn.readNetFromDarknet``, OpenCV < 5) for a ``darknet`` source.

OpenCV's importer turns a ``[yolo]`` layer into a region layer that emits boxes already decoded (N·H·W·A, 5 + C),
not Darknet's ``l.output``. The manifest's outputs are Darknet's yolo layers (C·A, H, W) after their logistic, so
the runner reads OpenCV's layer feeding each yolo layer (``conv_<i>``: Darknet's linear convolutional ``i``) and
applies the yolo layer's activation as ``forward_yolo_layer`` does: logistic on x, y, objectness and classes of
each anchor, w and h unchanged. OpenCV 5 dropped the reader: there the runner runs the ONNX conversion.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from repliscope.convert.darknet_cfg import DarknetFormatError, Network, artifact_size, load_network_cfg
from repliscope.runtimes.base import ModelArtifact
from repliscope.runtimes.errors import ModelLoadError


def has_darknet_reader(cv2: Any) -> bool:
    """True when this OpenCV reads Darknet's ``.cfg`` + ``.weights`` itself (OpenCV 3.4 / 4.x)."""
    return hasattr(cv2.dnn, "readNetFromDarknet")


def yolo_inputs(artifact: ModelArtifact) -> tuple[Network, dict[str, str]]:
    """The cfg's layer plan and, per manifest output (a yolo layer), the OpenCV layer name it is computed from.

    Refuses an output that is not a yolo layer fed by a linear convolutional layer without batch norm (every
    YOLOv3 cfg's head), and a manifest input size other than the cfg's (OpenCV's importer builds the cfg's size)."""
    assert artifact.config_path is not None
    try:
        net = load_network_cfg(artifact.config_path)
        sources: dict[str, str] = {}
        for name in artifact.output_names:
            lay = net.layer(name)
            if lay.type != "yolo":
                raise DarknetFormatError(
                    f"output {name!r} is a [{lay.type}] layer; OpenCV's Darknet reader is used for yolo outputs only"
                )
            prev = net.layers[lay.index - 1]
            if prev.type != "convolutional" or prev.params["batch_normalize"] or prev.params["activation"] != "linear":
                raise DarknetFormatError(
                    f"output {name!r}: its input layer {prev.name} is not a linear convolutional "
                    "layer without batch norm"
                )
            sources[name] = f"conv_{prev.index}"
    except DarknetFormatError as exc:
        raise ModelLoadError(str(exc)) from exc
    size = artifact_size(artifact)
    if size is not None and size != (net.height, net.width):
        raise ModelLoadError(
            f"the model input {list(size)} differs from the cfg's {[net.height, net.width]}: "
            "OpenCV's Darknet reader builds the cfg's size"
        )
    return net, sources


def read_darknet(cv2: Any, artifact: ModelArtifact) -> tuple[Any, dict[str, str]]:
    """(the net read by ``readNetFromDarknet``, manifest output -> OpenCV layer to forward)."""
    assert artifact.config_path is not None
    _, sources = yolo_inputs(artifact)
    try:
        net = cv2.dnn.readNetFromDarknet(str(artifact.config_path), str(artifact.path))
    except cv2.error as exc:
        raise ModelLoadError(
            f"OpenCV cannot read {artifact.config_path} + {artifact.path}: {str(exc).strip()}"
        ) from exc
    names = set(net.getLayerNames())
    missing = [s for s in sources.values() if s not in names]
    if missing:
        raise ModelLoadError(
            f"OpenCV's Darknet net has no layer {', '.join(missing)} (its layers end {', '.join(list(names)[-4:])})"
        )
    return net, sources


def yolo_activate(raw: np.ndarray, anchors: int) -> np.ndarray:
    """Darknet's yolo-layer activation of a raw head (N, A·(5 + C), H, W) float32: logistic on entries 0, 1
    (x, y) and 4.. (objectness, classes) of each anchor, 2 and 3 (w, h) unchanged; same shape and dtype."""
    n, c, h, w = raw.shape
    if c % anchors:
        raise ModelLoadError(f"a yolo head of {c} channels is not {anchors} anchors x (5 + classes)")
    x = raw.reshape(n, anchors, c // anchors, h, w).astype(np.float32, copy=True)
    keep = x[:, :, 2:4].copy()
    x[:] = np.float32(1) / (np.float32(1) + np.exp(-x))
    x[:, :, 2:4] = keep
    return x.reshape(n, c, h, w)


def anchors_per_output(artifact: ModelArtifact) -> dict[str, int]:
    net, _ = yolo_inputs(artifact)
    return {name: len(net.layer(name).params["mask"]) for name in artifact.output_names}  # type: ignore[arg-type]


def describe(cfg: Path, sources: dict[str, str], version: str) -> dict[str, object]:
    """The run's ``notes["darknet_reader"]``."""
    return {
        "reader": "cv2.dnn.readNetFromDarknet",
        "opencv": version,
        "cfg": str(cfg),
        "outputs": {
            name: f"{src} + the yolo layer's logistic (x, y, objectness, classes)" for name, src in sources.items()
        },
    }
