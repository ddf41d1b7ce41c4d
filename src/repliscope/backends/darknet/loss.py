"""``darknet_yolo``: libdarknet's own ``forward_yolo_layer`` in training mode, as a loss of the loss-diff contract
(:mod:`repliscope.diff.loss.contract`).

For each yolo layer of the inputs, a one-layer network is parsed by libdarknet itself (``load_network`` on a cfg
of a ``[net]`` whose input is the layer's (A*(5+C), H, W) tensor and the ``[yolo]`` section with the layer's
``mask``, ``anchors`` (all of them: ``num``), ``classes``, ``ignore_thresh`` and ``truth_thresh``), so the yolo
layer is exactly what ``parse_yolo`` / ``make_yolo_layer`` build. Each image is then run through the layer's
``forward`` pointer (checked to be libdarknet's ``forward_yolo_layer``) with a ``struct network`` whose ``input``
is the raw tensor, ``truth`` the image's truths (``max_boxes`` (90) rows of x, y, w, h, class, zero-padded: a zero
x ends the list), ``train = 1`` and ``w``/``h`` the network input size the anchors are in.

What comes back: ``l.delta``, Darknet's NEGATIVE gradient of its loss with respect to the raw outputs, returned as
the gradient ``-delta`` of the loss being minimised; ``*l.cost``, which is ``|delta|^2`` (not a loss value: kept
listed per layer in the notes, never a component). The loss values (total, box,
objectness, no_object, class, per image) are those of the loss whose gradient is ``-delta``
(:mod:`repliscope.diff.loss.yolo_form`), evaluated on libdarknet's own masks (its positive, ignored and no-object
cells as read from ``delta``) and checked against its assignment: libdarknet's delta defines them, numpy only adds
them up. Darknet sums over images (no batch mean).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from repliscope.backends.darknet import lib as dn
from repliscope.backends.darknet.structs import LAYER, LAYER_TYPES, NETWORK
from repliscope.diff.loss.contract import LOSSES, LossInputs, LossResult, LossSpec
from repliscope.diff.loss.yolo_form import (
    DARKNET,
    YoloLayerConfig,
    assign,
    layer_configs,
    layer_values,
    truths_array,
)
from repliscope.errors import FrameworkError

_LOCK = threading.Lock()
"""libdarknet's layer buffers are shared: one forward at a time in this process."""

MAX_BOXES = 90
"""``max_boxes`` of a yolo layer without ``max=`` (``parse_yolo``): the truth rows Darknet reads per image."""

NOTES = (
    "gradients: -l.delta of libdarknet's forward_yolo_layer (Darknet's delta is the negative gradient)",
    "libdarknet's *l.cost is |delta|^2, not a loss value: listed per layer below, not in the components",
    "values: the loss whose gradient is -delta (box s*[BCE(x)+BCE(y)+(tw-rw)^2/2+(th-rh)^2/2], s = 2 - w*h; "
    "BCE objectness, no-object and class), summed over images, on libdarknet's own positive and ignored cells",
)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silence libdarknet's stderr (layer table, defaults) and stdout (``Region ... Avg IOU`` per call), flushing
    the C library's buffered stdout before the descriptor is restored."""
    libc = ctypes.CDLL(None)
    saved = (os.dup(1), os.dup(2))
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 1)
            os.dup2(null.fileno(), 2)
            try:
                yield
            finally:
                libc.fflush(None)
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])


def layer_cfg_text(cfg: YoloLayerConfig, height: int, width: int) -> str:
    """The one-layer cfg libdarknet parses for ``cfg`` on a (H, W) grid."""
    anchors = ", ".join(f"{a:g},{b:g}" for a, b in cfg.anchors)
    return (
        f"[net]\nbatch=1\nsubdivisions=1\nwidth={width}\nheight={height}\n"
        f"channels={len(cfg.mask) * (5 + cfg.classes)}\n\n"
        f"[yolo]\nmask={','.join(str(m) for m in cfg.mask)}\nanchors={anchors}\nclasses={cfg.classes}\n"
        f"num={len(cfg.anchors)}\njitter=0\nignore_thresh={cfg.ignore_thresh!r}\ntruth_thresh={cfg.truth_thresh!r}\n"
        "random=0\n"
    )


class _YoloNet:
    """A libdarknet network holding one yolo layer, checked against the settings it was parsed from."""

    def __init__(self, text: str, cfg: YoloLayerConfig, height: int, width: int) -> None:
        lib = dn.load_library()
        with tempfile.TemporaryDirectory(prefix="repliscope-yolo-") as tmp:
            path = Path(tmp) / "yolo.cfg"
            path.write_text(text)
            with _LOCK, _quiet():
                net = lib.load_network(str(path).encode(), None, 0)
        if not net:
            raise FrameworkError(f"libdarknet could not parse the yolo layer of {cfg.name}")
        self.net = ctypes.cast(net, ctypes.POINTER(NETWORK))
        self.layer = ctypes.cast(self.net.contents.layers, ctypes.POINTER(LAYER))[0]
        lay = self.layer
        kind = LAYER_TYPES[lay.type] if 0 <= lay.type < len(LAYER_TYPES) else str(lay.type)
        forward = ctypes.cast(lib.forward_yolo_layer, ctypes.c_void_p).value
        got = (kind, lay.w, lay.h, lay.n, lay.total, lay.classes, lay.batch, lay.max_boxes)
        want = ("YOLO", width, height, len(cfg.mask), len(cfg.anchors), cfg.classes, 1, MAX_BOXES)
        if got != want or lay.forward != forward:
            raise FrameworkError(
                f"{cfg.name}: libdarknet's yolo layer (type, w, h, n, total, classes, batch, max_boxes) = {got}, "
                f"expected {want}, and its forward must be forward_yolo_layer"
            )
        thresholds = (lay.ignore_thresh, lay.truth_thresh)
        if not np.allclose(thresholds, (cfg.ignore_thresh, cfg.truth_thresh), rtol=1e-6):
            raise FrameworkError(f"{cfg.name}: libdarknet read ignore/truth_thresh {thresholds}")
        self.forward = ctypes.CFUNCTYPE(None, LAYER, NETWORK)(lay.forward)

    def run(self, raw: np.ndarray, truths: np.ndarray, net_w: int, net_h: int) -> tuple[np.ndarray, np.ndarray, float]:
        """(output after the logistic, delta, cost) of one image's raw (C, H, W) tensor."""
        lay = self.layer
        data = np.ascontiguousarray(raw, dtype=np.float32)
        truth = np.ascontiguousarray(truths, dtype=np.float32)
        if data.size != lay.outputs or truth.size != lay.truths:
            raise FrameworkError(
                f"{data.size} inputs / {truth.size} truths for a layer of {lay.outputs} / {lay.truths}"
            )
        net = NETWORK.from_buffer_copy(self.net.contents)
        net.input = data.ctypes.data
        net.truth = truth.ctypes.data
        net.train = 1
        net.delta = None
        net.index = 0
        net.w, net.h = net_w, net_h
        n = lay.outputs
        with _LOCK:  # the layer's output, delta and cost buffers are read before another call reuses them
            with _quiet():
                self.forward(lay, net)
            output = np.ctypeslib.as_array(ctypes.cast(lay.output, ctypes.POINTER(ctypes.c_float)), shape=(n,)).copy()
            delta = np.ctypeslib.as_array(ctypes.cast(lay.delta, ctypes.POINTER(ctypes.c_float)), shape=(n,)).copy()
            cost = float(ctypes.cast(lay.cost, ctypes.POINTER(ctypes.c_float))[0])
        return output.reshape(raw.shape), delta.reshape(raw.shape), cost


@functools.cache
def _yolo_net(text: str, cfg: YoloLayerConfig, height: int, width: int) -> _YoloNet:
    return _YoloNet(text, cfg, height, width)


def truth_rows(image_id: str, rows: Any, classes: int) -> np.ndarray:
    """Darknet's ``net.truth`` of one image: MAX_BOXES x (x, y, w, h, class), zero-padded; ValueError naming the
    image when a box would end Darknet's list early (x == 0), there are too many, or a class is outside
    0..classes-1 (pjreddie's ``delta_yolo_class`` would write past the layer's buffer)."""
    out = np.zeros((MAX_BOXES, 5), np.float32)
    if len(rows) > MAX_BOXES:
        raise ValueError(f"image {image_id}: {len(rows)} boxes, Darknet reads at most {MAX_BOXES} (max_boxes)")
    for k, (x, y, w, h, c) in enumerate(rows):
        if not 0 <= c < classes:
            raise ValueError(f"image {image_id}: box {k} has class {c}; the yolo layers have classes 0..{classes - 1}")
        if not (0 < x < 1 and 0 < y < 1 and 0 < w <= 1 and 0 < h <= 1):
            raise ValueError(
                f"image {image_id}: box {k} (cx, cy, w, h) = ({x:g}, {y:g}, {w:g}, {h:g}) is outside Darknet's "
                "truth range (0 < cx, cy < 1; 0 < w, h <= 1)"
            )
        out[k] = (x, y, w, h, c)
    return out


def darknet_yolo_loss(inputs: LossInputs) -> LossResult:
    """libdarknet's ``forward_yolo_layer`` on ``inputs`` (family ``yolo``)."""
    if inputs.family != "yolo":
        raise ValueError(f"darknet_yolo is a yolo loss; the inputs are family '{inputs.family}'")
    extra = {k: v for k, v in inputs.config.items() if k in ("scale_x_y", "iou_loss", "focal_loss") and v}
    if extra.get("scale_x_y", 1.0) != 1.0 or "iou_loss" in extra or "focal_loss" in extra:
        raise ValueError(
            f"darknet_yolo: libdarknet 0.0.0+git20180914 has no {', '.join(extra)} (later Darknets' options)"
        )
    cfgs = layer_configs(inputs)
    n_images = len(inputs.targets)
    classes = int(inputs.config["classes"])  # layer_configs checked it is there
    truths = [truth_rows(t.image_id, truths_array(t), classes) for t in inputs.targets]
    components: dict[str, float] = {}
    gradients: dict[str, np.ndarray] = {}
    per_image = [0.0] * n_images
    matching: list[list[tuple[int, int, float]]] = [[] for _ in range(n_images)]
    costs: list[str] = []
    offset = 0
    for cfg in cfgs:
        tensor = inputs.outputs[cfg.name]
        if tensor.shape[0] != n_images:
            raise ValueError(f"output '{cfg.name}' holds {tensor.shape[0]} images, the targets {n_images}")
        h, w = int(tensor.shape[2]), int(tensor.shape[3])
        net = _yolo_net(layer_cfg_text(cfg, h, w), cfg, h, w)
        grad = np.empty(tensor.shape, np.float32)
        sums = {"box": 0.0, "objectness": 0.0, "no_object": 0.0, "class": 0.0}
        cost_sum = 0.0
        a_n = len(cfg.mask)
        for n, target in enumerate(inputs.targets):
            output, delta, cost = net.run(tensor[n], truths[n], cfg.net_w, cfg.net_h)
            grad[n] = -delta
            cost_sum += cost
            d = delta.reshape(a_n, 5 + cfg.classes, h, w)
            p = output.reshape(a_n, 5 + cfg.classes, h, w)
            assignment = assign(tensor[n], target, cfg)
            positive = d[:, 4] > 0
            mine = np.zeros_like(positive)
            for cell in assignment.truth_of:
                mine[cell] = True
            # a positive whose objectness is exactly 1.0 in float32 (raw > ~16.6) has delta 0 there: not a mismatch
            saturated = (d[:, 4] == 0) & (p[:, 4] == 1.0)
            mismatch = (positive != mine) & ~saturated
            if mismatch.any():
                where = np.argwhere(mismatch)[0]
                raise FrameworkError(
                    f"{cfg.name}, image {target.image_id}: libdarknet's positive cells differ from the YOLOv3 "
                    f"assignment at (anchor, y, x) = {tuple(int(v) for v in where)}"
                )
            targets = np.rint(p[:, 5:] + d[:, 5:])  # (A, C, H, W): 1 where Darknet's class target is 1
            class_targets = {
                cell: {int(c) for c in np.nonzero(targets[cell[0], :, cell[1], cell[2]])[0]}
                for cell in assignment.truth_of
            }
            values, _ = layer_values(
                tensor[n], target, cfg, DARKNET, assignment, positive_classes=class_targets, noobj=d[:, 4] < 0
            )
            for key, value in values.items():
                sums[key] += value
            per_image[n] += sum(values.values())
            matching[n] += [(offset + a * h * w + j * w + i, t, c) for (a, j, i), t, c in assignment.pairs]
        offset += a_n * h * w
        gradients[cfg.name] = grad
        for key, value in sums.items():
            components[f"{cfg.name}/{key}"] = value
        costs.append(f"{cfg.name}: libdarknet's cost (|delta|^2, summed over images) = {cost_sum:.6g}")
    total = sum(components.values())
    return LossResult(
        total=float(total),
        components=components,
        gradients=gradients,
        matching=tuple(tuple(m) for m in matching),
        per_image=tuple(per_image),
        notes=NOTES + tuple(costs),
    )


ORIGIN = f"libdarknet forward_yolo_layer (train = 1), Debian darknet {dn.debian_version()}"

LOSSES.add(
    "darknet_yolo",
    LossSpec(
        name="darknet_yolo",
        family="yolo",
        origin=ORIGIN,
        target="repliscope.backends.darknet.loss:darknet_yolo_loss",
        stack=None,
        differences=(
            "loss values: libdarknet computes none (its cost is |delta|^2); the values are those of the loss whose "
            "gradient is -delta, on libdarknet's own cells",
        ),
    ),
)
