"""OpenCV DNN runner: ``cv2.dnn.readNetFromONNX`` on CPU, for an ONNX source or the cached torch export."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from repliscope.runtimes._common import (
    check_batch,
    distribution_version,
    onnx_batch_fixed_at_one,
    onnx_source,
    output_keys,
    run_per_image,
    select_outputs,
    to_scores,
)
from repliscope.runtimes.base import ModelArtifact, Runner
from repliscope.runtimes.errors import ModelLoadError
from repliscope.runtimes.loaders import GraphModel, Net, graph_model

_DISTRIBUTIONS = ["opencv-python-headless", "opencv-python", "opencv-contrib-python-headless", "opencv-contrib-python"]


class OpenCVDnnRunner(Runner):
    """OpenCV DNN, backend ``DNN_BACKEND_OPENCV`` on CPU.

    ``infer``: batch of ``artifact.input_dtype`` (N, ...) e.g. float32 NCHW (N, 3, 224, 224), fed as is
    (no ``blobFromImage``: pre-processing is the pipeline's job) -> float32 (N, C). Any N works with the
    dynamic-batch export.

    Engine: OpenCV 5 has two ONNX engines and ``ENGINE_AUTO`` silently falls back from the new one to the
    classic one. The runner asks for ``ENGINE_NEW`` explicitly (CPU-only, ignores targets) and falls back to
    ``ENGINE_CLASSIC`` (backend OPENCV, target CPU) only when the new engine cannot read the model; the
    engine used, and why, is in ``notes["engine"]``. OpenCV 4.x has only the classic engine.

    Threads: ``cv2.setNumThreads`` is process-global; set on load and re-asserted before every batch.

    ``infer_outputs``: the manifest's outputs by name (``net.forward(names)``; every unconnected output when the
    manifest names none). A graph whose input batch is the literal 1 (a TFLite conversion) runs image by image,
    outputs stacked (``notes["batching"]``).
    """

    name = "opencv_dnn"

    def __init__(self, artifact: ModelArtifact, *, threads: int, cache_dir: Path) -> None:
        super().__init__(artifact, threads=threads, cache_dir=cache_dir)
        self._net: Any = None
        self.onnx_path: Path | None = None
        """The ONNX file the net was read from (set by ``load``)."""
        self._output_names: list[str] = []
        self._per_image = False
        self._model: GraphModel | None = None
        """A model of several graphs (:data:`repliscope.backends.ONNX_MODELS`), driving this runner's nets."""
        self._darknet_sources: dict[str, str] | None = None
        """A darknet source read by OpenCV itself: manifest output -> the OpenCV layer it is computed from."""
        self._darknet_anchors: dict[str, int] = {}
        self.layer_timer: Callable[[Any, int, int], None] | None = None
        """Tracing hook: called after every forward with (net, start_ns, end_ns) on perf_counter_ns."""

    def framework(self) -> tuple[str, str]:
        try:
            return distribution_version(_DISTRIBUTIONS)
        except Exception:
            return "opencv", cv2.__version__

    def _load(self) -> None:
        cv2.setNumThreads(self.threads)
        model = graph_model(self.artifact)
        if model is not None:
            self._load_model(model)
            return
        if self.artifact.format == "darknet":
            from repliscope.backends.opencv_dnn import darknet as opencv_darknet

            if opencv_darknet.has_darknet_reader(cv2):
                self._load_darknet()
                return
            self.notes["darknet_reader"] = {
                "reader": "the ONNX conversion (notes.conversion)",
                "reason": f"OpenCV {cv2.__version__} has no cv2.dnn.readNetFromDarknet (OpenCV 5 removed it)",
            }
        path = onnx_source(self.artifact, self.cache_dir, self.notes)
        self.onnx_path = path
        net, engine = self._read(path)
        net.setPreferableBackend(cv2.dnn.DNN_BACKEND_OPENCV)
        if engine["name"] != "new":  # the new engine is CPU-only and warns on setPreferableTarget
            net.setPreferableTarget(cv2.dnn.DNN_TARGET_CPU)
        if self.artifact.input_name:
            probe = np.zeros(
                (1, *[max(int(d or 1), 1) for d in self.artifact.input_shape[1:]]),
                dtype=np.dtype(self.artifact.input_dtype),
            )
            try:
                net.setInput(probe, self.artifact.input_name)
            except cv2.error as exc:
                raise ModelLoadError(
                    f"'{path.name}' has no input named '{self.artifact.input_name}' (the manifest's "
                    f"inputs[0].name); its inputs are: {_onnx_inputs(path)}"
                ) from exc
        self._net = net
        self._output_names = select_outputs(
            list(net.getUnconnectedOutLayersNames()), self.artifact.output_names, path.name
        )
        self._per_image = onnx_batch_fixed_at_one(path)
        if self._per_image:
            self.notes["batching"] = "loop: the ONNX input's batch is fixed at 1, images run one by one and stacked"
        self.notes["engine"] = engine
        self.notes["backend"] = "DNN_BACKEND_OPENCV"
        self.notes["target"] = "DNN_TARGET_CPU"

    def _load_darknet(self) -> None:
        """A darknet source on OpenCV < 5: OpenCV's own Darknet reader
        (:mod:`repliscope.backends.opencv_dnn.darknet`), backend OPENCV, target CPU."""
        from repliscope.backends.opencv_dnn import darknet as opencv_darknet

        net, sources = opencv_darknet.read_darknet(cv2, self.artifact)
        net.setPreferableBackend(cv2.dnn.DNN_BACKEND_OPENCV)
        net.setPreferableTarget(cv2.dnn.DNN_TARGET_CPU)
        self._net = net
        self._darknet_sources = sources
        self._darknet_anchors = opencv_darknet.anchors_per_output(self.artifact)
        assert self.artifact.config_path is not None
        self.notes["darknet_reader"] = opencv_darknet.describe(self.artifact.config_path, sources, cv2.__version__)
        self.notes["engine"] = {"name": "classic", "reason": "readNetFromDarknet"}
        self.notes["backend"] = "DNN_BACKEND_OPENCV"
        self.notes["target"] = "DNN_TARGET_CPU"

    def _darknet_outputs(self, batch: np.ndarray) -> dict[str, np.ndarray]:
        """The manifest's yolo outputs from OpenCV's Darknet net: the feeding conv layers + the yolo logistic."""
        from repliscope.backends.opencv_dnn.darknet import yolo_activate

        assert self._net is not None and self._darknet_sources is not None
        if cv2.getNumThreads() != self.threads:
            cv2.setNumThreads(self.threads)
        self._net.setInput(np.ascontiguousarray(batch))
        names = list(self._darknet_sources)
        start = time.perf_counter_ns()
        raw = self._net.forward([self._darknet_sources[n] for n in names])
        if self.layer_timer is not None:
            self.layer_timer(self._net, start, time.perf_counter_ns())
        return {n: yolo_activate(np.asarray(r), self._darknet_anchors[n]) for n, r in zip(names, raw, strict=True)}

    def _load_model(self, model: type[GraphModel]) -> None:
        """A model of several graphs: one net per graph (same engine choice and backend), driven by the model."""
        engines: dict[str, dict[str, str]] = {}

        def open_net(path: Path, names: list[str]) -> Net:
            net, engines[path.stem] = self._read(path)
            net.setPreferableBackend(cv2.dnn.DNN_BACKEND_OPENCV)

            def run(x: np.ndarray) -> list[np.ndarray]:
                if cv2.getNumThreads() != self.threads:
                    cv2.setNumThreads(self.threads)
                net.setInput(x)
                return [np.array(o, copy=True) for o in net.forward(names)]

            return run

        self._model = model.load(self.artifact, open_net, self.notes)
        self.notes["engine"] = engines
        self.notes["backend"] = "DNN_BACKEND_OPENCV"

    def _read(self, path: Path) -> tuple[Any, dict[str, str]]:
        if not hasattr(cv2.dnn, "ENGINE_NEW"):  # OpenCV 4.x
            return self._read_engine(path, None), {"name": "classic", "reason": "only engine in this OpenCV"}
        try:
            return self._read_engine(path, cv2.dnn.ENGINE_NEW), {"name": "new", "reason": "requested"}
        except ModelLoadError as exc:
            net = self._read_engine(path, cv2.dnn.ENGINE_CLASSIC)
            return net, {"name": "classic", "reason": f"new engine failed: {exc}"}

    @staticmethod
    def _read_engine(path: Path, engine: int | None) -> Any:
        return read_onnx(path, engine)

    def _infer(self, batch: np.ndarray) -> np.ndarray:
        check_batch(batch, self.artifact)
        if self._model is not None:
            raise ModelLoadError(self._model.single_output_error)
        if self._darknet_sources is not None:
            raise ModelLoadError("a Darknet YOLO net gives its yolo outputs, not one score output: use infer_outputs")
        if self._per_image and batch.shape[0] > 1:
            (out,) = run_per_image(lambda x: [self._forward(x, None)[0]], batch)
        else:
            out = self._forward(batch, None)[0]
        return to_scores(out, batch.shape[0])

    def _infer_outputs(self, batch: np.ndarray) -> dict[str, np.ndarray]:
        check_batch(batch, self.artifact)
        if self._model is not None:
            return self._model.infer_outputs(batch, self.artifact.output_names)
        if self._darknet_sources is not None:
            return self._darknet_outputs(batch)
        names = self._output_names
        if self._per_image and batch.shape[0] > 1:
            outs = run_per_image(lambda x: self._forward(x, names), batch)
        else:
            outs = self._forward(batch, names)
        return dict(zip(output_keys(self.artifact, names), outs, strict=True))

    def _forward(self, batch: np.ndarray, names: list[str] | None) -> list[np.ndarray]:
        """One ``net.forward`` on ``batch``: the default output (``names`` None, the classification path) or the
        named outputs, copied out of OpenCV's buffers."""
        assert self._net is not None
        if cv2.getNumThreads() != self.threads:
            cv2.setNumThreads(self.threads)
        if self.artifact.input_name:
            self._net.setInput(np.ascontiguousarray(batch), self.artifact.input_name)
        else:
            self._net.setInput(np.ascontiguousarray(batch))
        start = time.perf_counter_ns()
        out = self._net.forward() if names is None else self._net.forward(names)
        if self.layer_timer is not None:
            self.layer_timer(self._net, start, time.perf_counter_ns())
        outs = [out] if names is None else list(out)
        return [np.array(o, copy=True) for o in outs]


def read_onnx(path: Path, engine: int | None) -> Any:
    """``cv2.dnn.readNetFromONNX`` of the FILE ``path`` with ``engine`` (``cv2.dnn.ENGINE_NEW`` /
    ``ENGINE_CLASSIC``; None on OpenCV 4.x). A file, never a buffer: in OpenCV 5.0 the buffer overload ignores
    ``ENGINE_CLASSIC`` and builds the new engine. Its external data is checked first
    (:func:`repliscope.runtimes.onnx_external.check_external_data`): OpenCV's importer follows ``../`` and
    absolute locations."""
    from repliscope.runtimes.onnx_external import check_external_data

    check_external_data(path)
    try:
        if engine is None:
            return cv2.dnn.readNetFromONNX(str(path))
        return cv2.dnn.readNetFromONNX(str(path), engine)
    except cv2.error as exc:
        raise ModelLoadError(f"OpenCV DNN cannot read '{path}': {str(exc).strip()}") from exc


def _onnx_inputs(path: Path) -> str:
    """The graph input names, when the ``onnx`` package is installed to read them."""
    try:
        import onnx

        model = onnx.load(str(path), load_external_data=False)
    except Exception:
        return "(install onnx to list them)"
    initializers = {i.name for i in model.graph.initializer}
    return ", ".join(i.name for i in model.graph.input if i.name not in initializers)
