"""ONNX Runtime runner: an ONNX source as is, or a torch source exported once to ONNX (cached)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

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
from repliscope.runtimes.base import ModelArtifact, Outputs, Runner
from repliscope.runtimes.errors import ModelLoadError
from repliscope.runtimes.loaders import GraphModel, Net, graph_model
from repliscope.runtimes.onnx_external import check_external_data

_PROVIDERS = ["CPUExecutionProvider"]


class OnnxRuntimeRunner(Runner):
    """onnxruntime ``InferenceSession`` on ``CPUExecutionProvider``, graph optimisation ``ORT_ENABLE_ALL``,
    ``intra_op_num_threads = threads``, ``inter_op_num_threads = 1`` (per session, not process-global), and
    ``session.intra_op.allow_spinning = 0``: idle intra-op threads sleep instead of spinning, because they share
    the cores with the pre-processing threads and with other workers' sessions (spinning threads made two 2-thread
    sessions on 2 cores 1.4x slower).

    ``infer``: batch of ``artifact.input_dtype`` (N, ...) e.g. float32 NCHW (N, 3, 224, 224) -> float32
    (N, C), the session's first output. ``infer_outputs``: the manifest's outputs by name (every session output
    when the manifest names none), batch first, dtype as the session gives them.

    A graph whose input batch is the literal 1 (a TFLite conversion) runs image by image, outputs stacked
    (``notes["batching"]``).
    """

    name = "onnxruntime"

    def __init__(self, artifact: ModelArtifact, *, threads: int, cache_dir: Path) -> None:
        super().__init__(artifact, threads=threads, cache_dir=cache_dir)
        self._session: ort.InferenceSession | None = None
        self._input_name = ""
        self._output_name = ""
        self._output_names: list[str] = []
        self._per_image = False
        self._model: GraphModel | None = None
        """A model of several graphs (:data:`repliscope.backends.ONNX_MODELS`), driving this runner's sessions."""
        self.onnx_path: Path | None = None
        """The ONNX file the session runs (set by ``load``)."""
        self._profile_prefix: Path | None = None

    def framework(self) -> tuple[str, str]:
        return distribution_version(["onnxruntime", "onnxruntime-gpu", "onnxruntime-openvino"])

    def _load(self) -> None:
        model = graph_model(self.artifact)
        if model is not None:
            self._load_model(model)
            return
        path = onnx_source(self.artifact, self.cache_dir, self.notes)
        self.onnx_path = path
        session = self._create_session(path)
        names = [i.name for i in session.get_inputs()]
        wanted = self.artifact.input_name
        if wanted and wanted not in names:
            raise ModelLoadError(
                f"'{path.name}' has no input named '{wanted}' (the manifest's "
                f"inputs[0].name); its inputs are: {', '.join(names)}"
            )
        if not wanted and len(names) != 1:
            raise ModelLoadError(
                f"'{path.name}' has {len(names)} inputs ({', '.join(names)}); the manifest must name the one to feed"
            )
        self._session = session
        self._input_name = wanted or names[0]
        self._output_names = select_outputs(
            [o.name for o in session.get_outputs()], self.artifact.output_names, path.name
        )
        self._output_name = self._output_names[0]
        self._per_image = onnx_batch_fixed_at_one(path)
        if self._per_image:
            self.notes["batching"] = "loop: the ONNX input's batch is fixed at 1, images run one by one and stacked"
        self.notes["providers"] = session.get_providers()
        self.notes["session"] = {**self._session_notes(), "input": self._input_name, "output": self._output_name}
        if len(self._output_names) > 1:
            self.notes["session"]["outputs"] = self._output_names

    def _load_model(self, model: type[GraphModel]) -> None:
        """A model of several graphs: one session per graph (same options), driven by the model."""

        def open_net(path: Path, names: list[str]) -> Net:
            session = self._create_session(path)
            feed = session.get_inputs()[0].name
            return lambda x: list(session.run(names, {feed: x}))

        self._model = model.load(self.artifact, open_net, self.notes)
        self.notes["providers"] = list(_PROVIDERS)
        self.notes["session"] = self._session_notes()

    def _session_notes(self) -> dict[str, object]:
        """The options :meth:`_create_session` sets, as the record's ``runtime.notes.session``."""
        return {
            "graph_optimization_level": "ORT_ENABLE_ALL",
            "intra_op_num_threads": self.threads,
            "inter_op_num_threads": 1,
            "execution_mode": "ORT_SEQUENTIAL",
            "intra_op_allow_spinning": False,
        }

    def _create_session(self, path: Path) -> ort.InferenceSession:
        options = ort.SessionOptions()
        options.intra_op_num_threads = self.threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        if self._profile_prefix is not None:
            options.enable_profiling = True
            options.profile_file_prefix = str(self._profile_prefix)
        check_external_data(path)  # before onnxruntime opens it: external data stays inside the model's folder
        try:
            return ort.InferenceSession(str(path), sess_options=options, providers=_PROVIDERS)
        except Exception as exc:
            raise ModelLoadError(f"onnxruntime cannot load '{path}': {type(exc).__name__}: {exc}") from exc

    def start_profiling(self, prefix: Path) -> None:
        """Turn ORT's profiler on (tracing, framework level): load, or re-create the session with
        ``enable_profiling``; the profile is written to ``<prefix>_<date>.json`` by :meth:`end_profiling`."""
        self._profile_prefix = prefix
        if self.loaded:
            assert self.onnx_path is not None
            self._session = self._create_session(self.onnx_path)
        else:
            self.load()

    def end_profiling(self) -> tuple[Path, int]:
        """Stop profiling -> (the profile JSON, the profiling start in epoch ns). Later runs are not profiled."""
        assert self._session is not None and self._profile_prefix is not None
        start_ns = int(self._session.get_profiling_start_time_ns())
        path = Path(self._session.end_profiling())
        self._profile_prefix = None
        return path, start_ns

    def query_call(self, named: bool = False) -> Callable[[np.ndarray], Outputs]:
        """:meth:`Runner.query_call` with the least Python between the session's return and the caller: the
        session's ``run`` on the one output, the batch checked (:func:`check_batch`) once per shape and dtype
        instead of on every query, and the output returned as is when it already is float32 (N, C) C-contiguous
        (else :func:`to_scores`). Named outputs, a model of several graphs and a graph run image by image take
        the general path."""
        self.load()
        if named or self._model is not None or self._per_image:
            return super().query_call(named)
        names, feed, artifact = [self._output_name], self._input_name, self.artifact
        checked: set[tuple[tuple[int, ...], np.dtype[Any]]] = set()

        def call(batch: np.ndarray) -> np.ndarray:
            if (batch.shape, batch.dtype) not in checked:
                check_batch(batch, artifact)
                checked.add((batch.shape, batch.dtype))
            if not batch.flags.c_contiguous:
                batch = np.ascontiguousarray(batch)
            assert self._session is not None
            out = self._session.run(names, {feed: batch})[0]
            if out.dtype == np.float32 and out.ndim == 2 and out.shape[0] == batch.shape[0] and out.flags.c_contiguous:
                return out
            return to_scores(out, batch.shape[0])

        return call

    def _run(self, names: list[str], batch: np.ndarray) -> list[np.ndarray]:
        assert self._session is not None
        if self._per_image and batch.shape[0] > 1:
            return run_per_image(lambda x: self._run(names, x), batch)
        return list(self._session.run(names, {self._input_name: np.ascontiguousarray(batch)}))

    def _infer(self, batch: np.ndarray) -> np.ndarray:
        check_batch(batch, self.artifact)
        if self._model is not None:
            raise ModelLoadError(self._model.single_output_error)
        (out,) = self._run([self._output_name], batch)
        return to_scores(out, batch.shape[0])

    def _infer_outputs(self, batch: np.ndarray) -> dict[str, np.ndarray]:
        check_batch(batch, self.artifact)
        if self._model is not None:
            return self._model.infer_outputs(batch, self.artifact.output_names)
        return dict(
            zip(output_keys(self.artifact, self._output_names), self._run(self._output_names, batch), strict=True)
        )
