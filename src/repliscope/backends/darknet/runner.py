"""``darknet`` runner: Debian's libdarknet (the original C implementation) loads the ``.cfg`` + ``.weights`` and runs
each image; every layer's output (``net->layers[i].output``) is readable by its Darknet name."""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from repliscope.backends.darknet import lib as dn
from repliscope.backends.darknet.layer_loop import LayerLoop, LayerTimes
from repliscope.convert.darknet_cfg import (
    DarknetFormatError,
    Network,
    artifact_size,
    load_network_cfg,
    read_weights,
)
from repliscope.runtimes._common import check_batch
from repliscope.runtimes.base import ModelArtifact, Runner
from repliscope.runtimes.errors import ModelLoadError


@contextlib.contextmanager
def quiet_stderr() -> Iterator[None]:
    """Silence the C library's layer table / "Loading weights" lines on file descriptor 2."""
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


class DarknetRunner(Runner):
    """libdarknet through ctypes; the source is a ``darknet`` artifact (``.weights`` + ``config_path`` ``.cfg``).

    ``infer_outputs``: float32 NCHW (N, C, H, W) in [0, 1], RGB (Darknet's own input) -> the manifest's outputs,
    each a Darknet layer name (``yolo_16``: float32 (N, 255, 13, 13), after the yolo layer's logistic on x, y,
    objectness and classes). Images run one at a time (the testing cfg's batch = 1: Darknet's layer buffers are
    allocated for it, as ``detector test/valid`` run). No NMS here: it is the manifest's ``darknet_nms`` op
    (``sort`` = ``detector test/valid``'s ``do_nms_sort``, ``obj`` = the Python example's ``do_nms_obj``).
    Threads: libgomp's ``omp_set_num_threads`` (process-wide).
    """

    name = "darknet"

    def __init__(self, artifact: ModelArtifact, *, threads: int, cache_dir: Path) -> None:
        super().__init__(artifact, threads=threads, cache_dir=cache_dir)
        self._net: int | None = None
        self.network: Network | None = None
        self._stale: dict[int, tuple[int, int, int]] = {}
        """After resize_network: yolo layer index -> the stale (c, h, w) libdarknet still reports for it."""
        self.tracer: Any = None
        """Set by tracing at ``framework`` level: each image is a ``darknet.run`` span with ``network_predict``
        (or, with :attr:`layer_timer`, one span per layer) and ``read_outputs``."""
        self.layer_timer: LayerTimes | None = None
        """Set by :mod:`repliscope.backends.darknet.tracing`: the image runs through :class:`LayerLoop` (libdarknet's
        ``forward_network`` driven from Python, same outputs bit for bit) and this gets each layer's timing."""
        self._loop: LayerLoop | None = None

    def framework(self) -> tuple[str, str]:
        return "darknet (Debian libdarknet)", dn.debian_version()

    def _load(self) -> None:
        if self.artifact.format != "darknet" or self.artifact.config_path is None:
            raise ModelLoadError(
                f"the darknet runtime runs source.format 'darknet' (.weights + config .cfg), not "
                f"'{self.artifact.format}'"
            )
        lib = dn.load_library()
        cfg, weights = self.artifact.config_path, self.artifact.path
        try:
            network = load_network_cfg(cfg)
            read_weights(weights, network)  # Darknet would read past a short file silently: refuse it first
            cfg_size = (network.height, network.width)
            size = artifact_size(self.artifact) or cfg_size
            stale: dict[int, tuple[int, int, int]] = {}
            if size != cfg_size:  # another input size: the cfg's layers at it, as resize_network computes them
                resized = load_network_cfg(cfg, size)
                # Darknet's resize_yolo_layer sets w, h, outputs and reallocates the output, but leaves out_w /
                # out_h at the cfg's size: get_network_image_layer then reports the old shape for yolo layers
                stale = {
                    lay.index: old.out_shape
                    for lay, old in zip(resized.layers, network.layers, strict=True)
                    if lay.type == "yolo"
                }
                network = resized
        except DarknetFormatError as exc:
            raise ModelLoadError(str(exc)) from exc
        want = (network.channels, network.height, network.width)
        if tuple(self.artifact.input_shape[1:]) != want:
            raise ModelLoadError(
                f"the manifest's input shape {list(self.artifact.input_shape)} differs from the cfg's "
                f"[net] channels {network.channels} ({cfg}); libdarknet's input has the cfg's "
                "channels"
            )
        for name in self.artifact.output_names:
            try:
                network.layer(name)
            except DarknetFormatError as exc:
                raise ModelLoadError(f"manifest output {name!r}: {exc}") from exc
        dn.set_threads(self.threads)
        with quiet_stderr():
            net = lib.load_network(str(cfg).encode(), str(weights).encode(), 0)
        if not net:
            raise ModelLoadError(f"libdarknet could not load {cfg} + {weights}")
        lib.set_batch_network(net, 1)
        if size != cfg_size:
            with quiet_stderr():
                lib.resize_network(net, size[1], size[0])
            if (lib.network_height(net), lib.network_width(net)) != size:
                raise ModelLoadError(f"libdarknet could not resize {cfg} to {size[0]}x{size[1]}")
        if dn.network_layer_count(net) != len(network.layers):
            raise ModelLoadError(
                f"libdarknet built {dn.network_layer_count(net)} layers from {cfg}, repliscope's "
                f"reader {len(network.layers)}"
            )
        self._net, self.network, self._stale = net, network, stale
        self.notes["darknet"] = {
            "library": str(dn.LIBDARKNET),
            "cfg": str(cfg),
            "cfg_sha256": self.artifact.config_sha256,
            "batch": "one image per network_predict",
            "nms": "none in the runtime: the manifest's darknet_nms op",
        }
        if size != cfg_size:
            self.notes["darknet"]["resize_network"] = {
                "from": list(cfg_size),
                "to": list(size),
                "yolo_layers_read_at": "the resized size (resize_yolo_layer leaves out_w/out_h stale)",
            }

    def _predict(self, image: np.ndarray) -> None:
        assert self._net is not None
        lib = dn.load_library()
        data = np.ascontiguousarray(image, dtype=np.float32)
        lib.network_predict(self._net, data.ctypes.data_as(ctypes.POINTER(ctypes.c_float)))

    def layer_loop(self) -> LayerLoop:
        """The network's :class:`LayerLoop` (built and checked against the cfg on first use)."""
        self.load()
        if self._loop is None:
            assert self._net is not None and self.network is not None
            self._loop = LayerLoop(dn.load_library(), self._net, self.network)
        return self._loop

    def _predict_layers(self, image: np.ndarray, on_layer: LayerTimes | None) -> None:
        """:meth:`_predict` layer by layer, ``on_layer(i, start_ns, end_ns)`` after each."""
        data = np.ascontiguousarray(image, dtype=np.float32)
        self.layer_loop().predict(data, on_layer)

    def _layer(self, index: int) -> np.ndarray:
        assert self._net is not None and self.network is not None
        img = dn.load_library().get_network_image_layer(self._net, index)
        c, h, w = self.network.layers[index].out_shape
        if (img.c, img.h, img.w) != (c, h, w) and (img.c, img.h, img.w) != self._stale.get(index):
            raise ModelLoadError(f"layer {index}: libdarknet's output is {img.c}x{img.h}x{img.w}, expected {c}x{h}x{w}")
        return np.ctypeslib.as_array(img.data, shape=(c, h, w)).copy()

    def _infer_outputs(self, batch: np.ndarray) -> dict[str, np.ndarray]:
        check_batch(batch, self.artifact)
        assert self.network is not None
        names = self.artifact.output_names or (self.network.layers[-1].name,)
        index = {n: self.network.layer(n).index for n in names}
        rows: dict[str, list[np.ndarray]] = {n: [] for n in names}
        for image in batch:
            if self.tracer is None:
                self._predict(image)
                for n in names:
                    rows[n].append(self._layer(index[n]))
                continue
            span = self.tracer.span
            stage = {"op_type": "stage", "source": "darknet"}
            with span("darknet.run", "framework", batch_size=1):
                if self.layer_timer is not None:
                    self._predict_layers(image, self.layer_timer)
                else:
                    with span("network_predict", "framework", layer="network_predict", **stage):
                        self._predict(image)
                with span("read_outputs", "framework", layer="read_outputs", **stage):
                    for n in names:
                        rows[n].append(self._layer(index[n]))
        return {n: np.stack(v) for n, v in rows.items()}

    def _infer(self, batch: np.ndarray) -> np.ndarray:
        out = self._infer_outputs(batch)
        return next(iter(out.values())).reshape(batch.shape[0], -1)

    def layer_outputs(self, image: np.ndarray) -> dict[str, np.ndarray]:
        """Every layer's output (C, H, W) float32 by Darknet name, for one CHW image."""
        self.load()
        assert self.network is not None
        self._predict(image)
        return {lay.name: self._layer(lay.index) for lay in self.network.layers}

    def info(self) -> dict[str, Any]:
        return super().info()

    def __del__(self) -> None:
        if self._net:
            with contextlib.suppress(Exception):
                dn.load_library().free_network(self._net)
            self._net = None
