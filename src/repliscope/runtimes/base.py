"""The runtime interface (one Runner per framework), after Polygraphy's runners.

A runner is built from a :class:`ModelArtifact` (a verified local model file plus how to build it),
``load()``-ed once, then ``infer()``-ed on batches. The base class owns timing; subclasses implement
``_load`` and ``_infer``.
"""

from __future__ import annotations

import importlib
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar, overload

import numpy as np

from repliscope.backends import runtime_entries
from repliscope.errors import FrameworkError
from repliscope.registry import Registry
from repliscope.runtimes.errors import BatchError

_Out = TypeVar("_Out")

Outputs = np.ndarray | dict[str, np.ndarray]
"""A runner's outputs of one batch: the (N, C) score array, or every named output."""

ModelFormat = Literal[
    "pytorch_state_dict", "onnx", "tflite", "tf_frozen_graph", "tf_saved_model", "keras", "mtcnn_cascade", "darknet"
]


@dataclass(frozen=True)
class Architecture:
    """How to build a torch module for a weight-only file: ``factory`` is ``"module:attr"`` (may be
    ``"module:Class.method"``), called with ``kwargs``."""

    factory: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    module_dir: Path | None = None
    """A local folder the factory's module is imported from (manifest ``architecture.path``), else None."""
    module_sha256: str | None = None
    """sha256 of that local module file (part of the ONNX export key and of the record's provenance)."""
    package: str | None = None
    """The manifest's ``architecture.package`` requirement: without ``module_dir`` the factory resolves inside it
    (:mod:`repliscope.manifest.code_refs`)."""


@dataclass(frozen=True)
class ModelArtifact:
    """A model file that exists locally and whose sha256 was verified against the manifest.

    ``input_shape``: the model input, batch axis first, with -1 (or None) for the dynamic batch, e.g.
    (-1, 3, 224, 224) in NCHW; ``input_name`` / ``input_dtype`` as in the manifest.
    """

    path: Path
    sha256: str
    format: ModelFormat
    input_name: str
    input_shape: tuple[int, ...]
    input_dtype: str
    architecture: Architecture | None = None
    origin: str = ""
    output_names: tuple[str, ...] = ()
    """The manifest's output names, in order (detection models have several)."""
    config_path: Path | None = None
    """``darknet``: the verified ``.cfg`` beside the ``.weights`` (``path``); None for other formats."""
    config_sha256: str | None = None


class Runner(ABC):
    """One framework backend, after Polygraphy's runners: ``load`` once, then ``infer(feed)`` -> named outputs.
    The base class owns loading and timing; subclasses implement ``_load``, ``_infer_outputs`` (named outputs of a
    batch) and ``_infer`` (the single-score call)."""

    name: ClassVar[str]

    def __init__(self, artifact: ModelArtifact, *, threads: int, cache_dir: Path) -> None:
        self.artifact = artifact
        self.threads = threads
        self.cache_dir = cache_dir
        self.last_inference_seconds: float = 0.0
        self.load_seconds: float = 0.0
        """Wall-clock time of ``load()``: building the model, an ONNX export, creating the session."""
        self.loaded = False
        self.notes: dict[str, Any] = {}
        """Provenance the runner adds to the record (e.g. "exported torch -> onnx, cached at ...")."""

    def load(self) -> None:
        """Load once (timed in ``load_seconds``); later calls do nothing."""
        if not self.loaded:
            start = time.perf_counter()
            self._load()
            self.load_seconds = time.perf_counter() - start
            self.loaded = True

    def warm_up(self, batch_shape: tuple[int, ...]) -> float:
        """One untimed-by-the-loop inference on zeros of ``batch_shape`` (batch axis first, e.g. (8, 3, 224,
        224)) and the model's input dtype, so lazy allocation and kernel selection of the first real batch are
        not in the measured loop. Returns the seconds it took."""
        self.load()
        start = time.perf_counter()
        self._infer_outputs(np.zeros(batch_shape, dtype=np.dtype(self.artifact.input_dtype)))
        return time.perf_counter() - start

    @overload
    def infer(self, feed: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]: ...

    @overload
    def infer(self, feed: np.ndarray) -> np.ndarray: ...

    def infer(self, feed: Mapping[str, np.ndarray] | np.ndarray) -> dict[str, np.ndarray] | np.ndarray:
        """Run the model once, timed in ``last_inference_seconds`` (loading first if needed).

        ``feed``: ``{input name: batch}`` (the manifest's ``inputs[0].name``; batch axis first, e.g. float32 NCHW
        (N, 3, 224, 224)) -> every output by name, in the manifest's order (the model's when the manifest names
        none), batch axis first: the one interface every runner shares (Polygraphy's ``infer(feed_dict)``).

        A bare batch instead of a feed is the single-score call of classification: float32 (N, C) scores of the
        model's one output. Kept for its callers (the evaluation engine's ``runner.infer(inputs)``); runners
        implement it in ``_infer`` because a single-output graph may be run by its default output."""
        if isinstance(feed, np.ndarray):
            return self._timed(self._infer, feed)
        return self._timed(self._infer_outputs, self._batch_of(feed))

    def infer_outputs(self, batch: np.ndarray) -> dict[str, np.ndarray]:
        """Every model output by name for ``batch``: ``infer({input name: batch})``."""
        return self.infer({self.artifact.input_name: batch})

    def query_call(self, named: bool = False) -> Callable[[np.ndarray], Outputs]:
        """The inference of :meth:`infer` on a batch (``named``: of :meth:`infer_outputs`), for a caller that
        times each call itself (a benchmark's queries): the runner is loaded now and every call goes straight
        to the backend, without the load check and the timestamps of ``last_inference_seconds`` (not updated by
        these calls). The outputs, and the checks of the batch, are those of ``infer``."""
        self.load()
        return self._infer_outputs if named else self._infer

    def _timed(self, run: Callable[[np.ndarray], _Out], batch: np.ndarray) -> _Out:
        self.load()
        start = time.perf_counter()
        out = run(batch)
        self.last_inference_seconds = time.perf_counter() - start
        return out

    def _batch_of(self, feed: Mapping[str, np.ndarray]) -> np.ndarray:
        """The one batch of ``feed``, keyed by the model's input name (any one key when the manifest names none)."""
        wanted = self.artifact.input_name
        if len(feed) == 1 and (not wanted or wanted in feed):
            return next(iter(feed.values()))
        raise BatchError(
            f"infer() takes a feed of the model's one input {wanted or '(any name)'!r}, "
            f"got {', '.join(repr(k) for k in feed) or 'nothing'}"
        )

    def _infer_outputs(self, batch: np.ndarray) -> dict[str, np.ndarray]:
        """Default: the single output of :meth:`_infer` under the manifest's (first) output name."""
        name = self.artifact.output_names[0] if self.artifact.output_names else "output"
        return {name: self._infer(batch)}

    def replica(self, threads: int | None = None) -> Runner:
        """A new, not yet loaded runner of the same kind on the same model (``threads`` default: this one's),
        for a worker of its own: runners are not shared between threads (``last_inference_seconds``; some
        backends, e.g. OpenCV DNN, are not thread-safe). Loading it reuses caches (e.g. the ONNX export)."""
        clone = type(self)(
            self.artifact, threads=self.threads if threads is None else threads, cache_dir=self.cache_dir
        )
        clone.notes.update({k: v for k, v in self.notes.items() if k not in clone.notes})
        return clone

    def info(self) -> dict[str, Any]:
        """Framework name + version, threads, and any notes (export, providers)."""
        framework, version = self.framework()
        return {
            "runtime": self.name,
            "framework": framework,
            "framework_version": version,
            "threads": self.threads,
            **self.notes,
        }

    @abstractmethod
    def framework(self) -> tuple[str, str]:
        """(framework distribution name, installed version)."""

    @abstractmethod
    def _load(self) -> None: ...

    @abstractmethod
    def _infer(self, batch: np.ndarray) -> np.ndarray: ...


def import_framework(module: str, runtime: str, install: str) -> Any:
    """``import module`` for a runner; when it (or a module it needs) is not installed, a one-line FrameworkError
    naming the runtime, the missing module and ``install`` (e.g. ``pip install 'repliscope[tflite]'``)."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        missing = exc.name or module
        raise FrameworkError(
            f"the {runtime} runtime needs the Python module '{missing}', which is not installed ({install})"
        ) from exc


RUNTIMES: Registry[type[Runner]] = Registry("runtime")
for _entry in runtime_entries():  # one entry per backend (repliscope.backends)
    RUNTIMES.add(_entry.name, _entry.runner)

RUNTIME_SOURCE_FORMATS: dict[str, tuple[str, ...]] = {r.name: r.source_formats for r in runtime_entries()}
"""Registered runtime -> the ``source.format`` values it runs (the ONNX runtimes run a torch, TFLite, frozen-graph
or darknet source through its cached conversion, :func:`repliscope.runtimes.loaders.load_as`). Read without importing a
runner (the service's wizard offers a manifest only the runtimes that run its format); from the backends' entries."""
