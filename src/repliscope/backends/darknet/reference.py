"""libdarknet as the reference: Darknet's own pre- and post-processing, the reference the repliscope ops are
pinned to (``load_image_color`` + ``letterbox_image``, the network input of ``detector test/valid``;
``get_network_boxes`` + ``do_nms_sort`` / ``do_nms_obj``, their detections), and its network layer by layer as the
reference side of a unit-level diff (:class:`DarknetLayers`, a :class:`~repliscope.diff.base.Reference`: any
candidate is compared with it by :func:`repliscope.diff.layers.driver.diff_layers`)."""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from repliscope.backends.darknet import lib as dn
from repliscope.backends.darknet.runner import DarknetRunner
from repliscope.convert.darknet_cfg import LayerPlan, Network, load_network_cfg
from repliscope.diff.base import LayerInfo, Reference
from repliscope.errors import RepliscopeError

if TYPE_CHECKING:
    from repliscope.convert.darknet_cfg import Weights
    from repliscope.diff.layers.layer_result import Cause

KINDS = {
    "convolutional": "Conv",
    "maxpool": "MaxPool",
    "route": "Concat",
    "upsample": "Resize",
    "shortcut": "Add",
    "yolo": "Sigmoid",
}
"""Darknet layer type -> the unit ``kind`` (the ONNX op the conversion makes of it; tolerance ``kind_k`` keys)."""

BN_CONVENTIONS: dict[str, tuple[str, float | None]] = {
    "darknet": ("Darknet's (x - mean) / (sqrt(var) + 1e-6)", None),
    "keras": ("Keras / TensorFlow's BatchNormalization (x - mean) / sqrt(var + 1e-3)", 1e-3),
    "torch": ("torch's BatchNorm2d (x - mean) / sqrt(var + 1e-5)", 1e-5),
}
"""The batch-norm conventions a diverging convolutional layer is tested against: word -> (in words, the epsilon
added to the variance; None for Darknet's 1e-6 added to the standard deviation)."""

LEAKY = 0.1
"""Darknet's ``leaky`` slope."""

FORMULA = "k * eps(float32) * sqrt(reduction) * max|ref|"
"""The tolerance formula as a Darknet layer diff states it (float32, carried accumulated in quadrature)."""


def _image_array(img: dn.IMAGE) -> np.ndarray:
    return np.ctypeslib.as_array(img.data, shape=(img.c, img.h, img.w)).copy()


def load_image(path: Path) -> np.ndarray:
    """``load_image_color(path, 0, 0)``: float32 CHW RGB in [0, 1] as Darknet decodes it (OpenCV ``imread``)."""
    lib = dn.load_library()
    img = lib.load_image_color(str(path).encode(), 0, 0)
    try:
        return _image_array(img)
    finally:
        lib.free_image(img)


def letterbox(path: Path, width: int, height: int) -> np.ndarray:
    """``letterbox_image(load_image_color(path), w, h)``: the exact network input (3, h, w) float32."""
    lib = dn.load_library()
    img = lib.load_image_color(str(path).encode(), 0, 0)
    boxed = lib.letterbox_image(img, width, height)
    try:
        return _image_array(boxed)
    finally:
        lib.free_image(boxed)
        lib.free_image(img)


def letterbox_array(chw: np.ndarray, width: int, height: int) -> np.ndarray:
    """``letterbox_image`` of an image given as float32 CHW (any values): Darknet's resize + embed alone."""
    lib = dn.load_library()
    c, h, w = chw.shape
    data = np.ascontiguousarray(chw, dtype=np.float32)
    img = dn.IMAGE(w, h, c, data.ctypes.data_as(ctypes.POINTER(ctypes.c_float)))
    boxed = lib.letterbox_image(img, width, height)
    try:
        return _image_array(boxed)
    finally:
        lib.free_image(boxed)


@dataclass(frozen=True)
class DarknetDetection:
    """One (box, class) pair with a non-zero probability after NMS: ``box`` cx, cy, w, h as Darknet holds it
    (pixels of the source image when ``relative`` is 0), ``prob`` = objectness x class probability."""

    box: tuple[float, float, float, float]
    class_id: int
    prob: float
    objectness: float


def detect(
    runner: DarknetRunner,
    network_input: np.ndarray,
    image_hw: tuple[int, int],
    *,
    thresh: float,
    hier_thresh: float = 0.5,
    nms: float = 0.45,
    method: Literal["sort", "obj"] = "sort",
    relative: int = 0,
) -> list[DarknetDetection]:
    """Run ``network_input`` (3, H, W) and return Darknet's detections exactly as ``detector valid``
    (``method='sort'``) or the Python example (``'obj'``) get them, in Darknet's array order."""
    runner.load()
    lib = dn.load_library()
    runner._predict(network_input)
    num = ctypes.c_int(0)
    h, w = image_hw
    dets = lib.get_network_boxes(runner._net, w, h, thresh, hier_thresh, None, relative, ctypes.byref(num))
    try:
        n = num.value
        classes = dets[0].classes if n else 0
        if nms and n:
            (lib.do_nms_sort if method == "sort" else lib.do_nms_obj)(dets, n, classes, nms)
        out = []
        for i in range(n):
            d = dets[i]
            b = d.bbox
            for k in range(classes):
                if d.prob[k] > 0:
                    out.append(DarknetDetection((b.x, b.y, b.w, b.h), k, float(d.prob[k]), float(d.objectness)))
        return out
    finally:
        lib.free_detections(dets, num.value)


def layer_sources(lay: LayerPlan) -> list[int]:
    """The indices of the layers ``lay`` reads, in its input order (-1: the network input)."""
    if lay.type == "route":
        return list(lay.params["layers"])  # type: ignore[call-overload]
    if lay.type == "shortcut":
        return [lay.index - 1, int(lay.params["from"])]  # type: ignore[call-overload]
    return [lay.index - 1]


def layer_reduction(lay: LayerPlan) -> int:
    """Products (terms) summed per output element: a conv's ``channels x size x size``, a maxpool's window, else 1."""
    if lay.type == "convolutional":
        size = int(lay.params["size"])  # type: ignore[call-overload]
        return lay.in_shape[0] * size * size
    if lay.type == "maxpool":
        size = int(lay.params["size"])  # type: ignore[call-overload]
        return size * size
    return 1


def darknet_layer_outputs(
    cfg: Path, weights: Path, images: np.ndarray, threads: int = 1
) -> list[dict[str, np.ndarray]]:
    """libdarknet's every-layer outputs for each image of ``images`` (N, 3, H, W)."""
    from repliscope.runtimes.base import ModelArtifact

    artifact = ModelArtifact(
        path=weights,
        sha256="",
        format="darknet",
        input_name="data",
        input_shape=(-1, *images.shape[1:]),
        input_dtype="float32",
        config_path=cfg,
    )
    runner = DarknetRunner(artifact, threads=threads, cache_dir=Path("."))
    return [runner.layer_outputs(x) for x in images]


class DarknetLayers(Reference):
    """libdarknet (``network_predict``) as the reference of a unit-level diff: one unit per Darknet layer, named
    after it (``convolutional_0``), its inputs the outputs of the layers it reads (the network input for the
    first), its output the layer's output buffer (``get_network_image_layer``), each image run alone.

    ``outputs``: libdarknet's per-image layer outputs when already computed (:func:`darknet_layer_outputs`),
    else computed on the first :meth:`run`. No single whole-model output (one per yolo layer, each a unit)."""

    name = "darknet"

    def __init__(
        self, cfg: Path, weights: Path, *, threads: int = 1, outputs: list[dict[str, np.ndarray]] | None = None
    ) -> None:
        self.cfg, self.weights, self.threads = cfg, weights, threads
        self.network: Network = load_network_cfg(cfg)
        self._outputs = outputs
        self._weights: Weights | None = None
        self.notes = [
            f"reference: every layer's output buffer in libdarknet (get_network_image_layer) for {cfg.name}, "
            "each image run alone"
        ]

    def describe(self) -> dict[str, Any]:
        return {
            "framework": "darknet (libdarknet)",
            "runtime": "darknet",
            "cfg": str(self.cfg),
            "weights": str(self.weights),
        }

    def layers(self, example: np.ndarray) -> list[LayerInfo]:
        net = self.network
        return [
            LayerInfo(
                path=lay.name,
                kind=KINDS[lay.type],
                source=f"{self.cfg.name}:{lay.line}",
                reduction=layer_reduction(lay),
                producers=tuple(net.layers[s].name if s >= 0 else "" for s in layer_sources(lay)),
                type_name=lay.type,
            )
            for lay in net.layers
        ]

    def run(
        self,
        x: np.ndarray,
        on_start: Callable[[str, list[np.ndarray]], None] | None = None,
        on_end: Callable[[str, list[np.ndarray], np.ndarray], None] | None = None,
    ) -> None:
        if self._outputs is None:
            self._outputs = darknet_layer_outputs(self.cfg, self.weights, x, self.threads)
        if len(self._outputs) != len(x):
            raise RepliscopeError(f"{len(self._outputs)} images' layer outputs for a batch of {len(x)}")
        layers = self.network.layers
        out = {lay.name: np.stack([r[lay.name] for r in self._outputs]) for lay in layers}
        for lay in layers:
            inputs = [x if s < 0 else out[layers[s].name] for s in layer_sources(lay)]
            if on_start is not None:
                on_start(lay.name, inputs)
            if on_end is not None:
                on_end(lay.name, inputs, out[lay.name])
        return None

    def stages(self, path: str, output: np.ndarray) -> list[tuple[str, np.ndarray]]:
        """A convolutional layer with a ``leaky`` activation: its value before the activation (convolution + bias,
        batch norm folded), recovered from its output (``y / 0.1`` where ``y <= 0``; leaky is invertible), then its
        output; any other layer: its output alone."""
        lay = next((lay for lay in self.network.layers if lay.name == path), None)
        if lay is None or lay.type != "convolutional" or lay.params.get("activation") != "leaky":
            return [("output", output)]
        before = np.where(output > 0, output, output / output.dtype.type(LEAKY)).astype(output.dtype, copy=False)
        return [("output before its leaky activation (convolution + bias)", before), ("output", output)]

    def explain(self, path: str, output: np.ndarray, candidate: np.ndarray) -> Cause | None:
        """A convolutional layer with batch norm: which batch-norm convention explains the candidate's output.

        Darknet normalises with ``(x - mean) / (sqrt(var) + 1e-6)``; Keras / TensorFlow with ``(x - mean) /
        sqrt(var + 1e-3)`` and torch with ``sqrt(var + 1e-5)``. With the layer's bias ``beta`` removed and its
        activation undone (leaky: y / 0.1 below 0), a candidate using convention ``k`` gives per channel
        ``cand - beta = r_k * (ref - beta)``, ``r_k = (sqrt(var) + 1e-6) / sqrt(var + eps_k)``. The per-channel ratio
        is fitted (least squares) and each convention's residual ``max |(cand - beta) - r_k (ref - beta)|`` measured;
        the convention with the smallest residual is named when it explains at least 90 % of the error
        (residual <= 0.1 x max |cand - ref| before the activation) and is not Darknet's own."""
        from repliscope.convert.darknet_cfg import read_weights
        from repliscope.diff.layers.layer_result import Cause

        lay = next((lay for lay in self.network.layers if lay.name == path), None)
        if lay is None or lay.type != "convolutional" or not lay.params.get("batch_normalize"):
            return None
        activation = str(lay.params.get("activation", "linear"))
        if activation not in ("leaky", "linear") or output.shape != candidate.shape or output.ndim != 4:
            return None
        if self._weights is None:
            self._weights = read_weights(self.weights, self.network)
        conv = self._weights.layers[path]
        if conv.variance is None:
            return None

        def pre(y: np.ndarray) -> np.ndarray:
            y = np.asarray(y, dtype=np.float64)
            return np.where(y > 0, y, y / LEAKY) if activation == "leaky" else y

        beta = conv.biases.astype(np.float64)[None, :, None, None]
        u, v = pre(output) - beta, pre(candidate) - beta
        error = float(np.max(np.abs(v - u)))
        if error == 0.0:
            return None
        std = np.sqrt(conv.variance.astype(np.float64))
        residuals: dict[str, float] = {}
        for word, (_, eps) in BN_CONVENTIONS.items():
            ratio = np.ones_like(std) if eps is None else (std + 1e-6) / np.sqrt(std**2 + eps)
            residuals[word] = float(np.max(np.abs(v - ratio[None, :, None, None] * u)))
        best = min(residuals, key=residuals.__getitem__)
        if best == "darknet" or residuals[best] > 0.1 * error:
            return None
        fitted = np.sum(u * v, axis=(0, 2, 3)) / np.maximum(np.sum(u * u, axis=(0, 2, 3)), 1e-300)
        eps = BN_CONVENTIONS[best][1]
        predicted = (std + 1e-6) / np.sqrt(std**2 + float(eps or 0.0))
        off = float(np.max(np.abs(fitted - predicted)))
        words = BN_CONVENTIONS[best][0]
        return Cause(
            path=path,
            cause="batch_norm_convention",
            convention=best,
            explanation=(
                f"batch-norm convention: the candidate normalises with {words}, not "
                f"{BN_CONVENTIONS['darknet'][0]}: the per-channel ratio candidate / reference (bias removed, "
                f"before the {activation} activation) fitted over {std.size} channels is (sqrt(var) + 1e-6) / "
                f"sqrt(var + {eps:g}) within {off:.2g}; residual under it {residuals[best]:.3g} of a max |err| "
                f"{error:.3g} ({', '.join(f'{k} {r:.3g}' for k, r in residuals.items())})"
            ),
            error=error,
            residual=residuals[best],
            residuals=residuals,
        )
