"""Keras 3 runners: a ``.keras`` file run by Keras on an explicitly chosen backend.

Keras' backend is PROCESS-GLOBAL (``KERAS_BACKEND``, read once at Keras' first import). So the backend is part of
the runtime's registry name and never changes the calling process:

* ``keras_tensorflow`` / ``keras_jax``: that backend. The model runs in this process when Keras is already
  imported here with that backend, or not imported yet and ``KERAS_BACKEND`` (unset = Keras' own default,
  tensorflow) names it; otherwise in a worker process (``python -m repliscope.backends.keras.runner`` with
  ``KERAS_BACKEND`` set), which loads the model once and answers one request per batch through pipes (the batch
  and outputs are pickled; the measured inference time includes that transfer). ``notes["execution"]`` says
  which, and why.
* ``keras``: the backend this process' Keras uses (imported now if needed), recorded, never switched.

Recorded in ``notes``: ``backend`` (what ``keras.backend.backend()`` returned where the model runs), the type of
the array the backend's call returned (``jaxlib...ArrayImpl`` proves JAX executed), the JAX platform or the
TensorFlow thread pools. Threads: TensorFlow's process-global pools (see the tensorflow runner); JAX (XLA CPU)
has no per-call thread setting: the worker sets ``XLA_FLAGS=--xla_cpu_multi_thread_eigen=<threads > 1>
intra_op_parallelism_threads=<threads>`` before importing JAX; in this process JAX's own setting is recorded.

Inference: ``model(x, training=False)`` converted to numpy; outputs matched by name to ``model.output_names``
(a single-output model with a single manifest output is that output).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import weakref
import zipfile
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from repliscope.backends.tensorflow.runner import TF_INSTALL
from repliscope.errors import FrameworkError, RepliscopeError
from repliscope.runtimes._common import (
    check_batch,
    distribution_version,
    output_keys,
    select_outputs,
    single_output_scores,
)
from repliscope.runtimes.base import ModelArtifact, Runner, import_framework
from repliscope.runtimes.errors import BatchError, ModelLoadError

BACKENDS = ("tensorflow", "jax")
JAX_INSTALL = "pip install 'repliscope[jax]'"


def current_backend() -> tuple[str | None, str]:
    """(the backend Keras uses or would use in this process, how that is known); None when Keras is imported
    with no backend we run."""
    if "keras" in sys.modules:
        return sys.modules["keras"].backend.backend(), "keras is imported in this process with it"
    env = os.environ.get("KERAS_BACKEND")
    if env:
        return env, "KERAS_BACKEND is set in this process (keras not imported yet)"
    return "tensorflow", "KERAS_BACKEND is unset: Keras' own default (keras not imported yet)"


class _Model:
    """A loaded ``.keras`` model in the process where Keras has ``backend``: call -> outputs by model name."""

    def __init__(self, path: str, backend: str, threads: int, wanted: tuple[str, ...]) -> None:
        runtime = f"keras_{backend}"
        import_framework(backend, runtime, JAX_INSTALL if backend == "jax" else TF_INSTALL)
        keras = import_framework("keras", runtime, "pip install 'repliscope[keras]'")
        if keras.backend.backend() != backend:
            raise ModelLoadError(f"Keras here runs on '{keras.backend.backend()}', not '{backend}'")
        self.info: dict[str, Any] = {"backend": keras.backend.backend(), "keras": keras.__version__}
        if backend == "tensorflow":
            from repliscope.backends.tensorflow.runner import set_threads

            pools = set_threads(threads)
            self.info["thread_pools"] = {**pools, "matches_requested": pools["intra_op"] == threads}
        else:
            jax = import_framework("jax", runtime, JAX_INSTALL)
            self.info["jax"] = {
                "version": jax.__version__,
                "platform": jax.default_backend(),
                "devices": [str(d) for d in jax.devices()],
                "XLA_FLAGS": os.environ.get("XLA_FLAGS"),
            }
        try:
            self.model = keras.saving.load_model(path, compile=False)
        except Exception as exc:
            raise ModelLoadError(f"Keras cannot load '{path}': {type(exc).__name__}: {exc}") from exc
        names = [str(n) for n in getattr(self.model, "output_names", None) or ["output"]]
        self.names = select_outputs(names, wanted, Path(path).name)
        self.all_names = names
        self.info["model_outputs"] = names

    def __call__(self, batch: np.ndarray) -> list[np.ndarray]:
        out = self.model(batch, training=False)
        first = _first(out) if isinstance(out, list | tuple | dict) else out
        self.info["returned"] = f"{type(first).__module__}.{type(first).__name__}"
        if isinstance(out, dict):
            by_name = {k: np.asarray(v) for k, v in out.items()}
        elif isinstance(out, list | tuple):
            by_name = {n: np.asarray(v) for n, v in zip(self.all_names, out, strict=True)}
        else:
            by_name = {self.all_names[0]: np.asarray(out)}
        return [by_name[n] for n in self.names]


def _first(out: Any) -> Any:
    return next(iter(out.values())) if isinstance(out, dict) else out[0]


def _serve(backend: str, threads: int, path: str, wanted: tuple[str, ...]) -> None:
    """Worker process main (``python -m repliscope.backends.keras.runner``): the backend and XLA's threads are
    set before Keras is imported; pickled requests on stdin, pickled replies on the original stdout (fd 1 is
    pointed at stderr so that library prints cannot corrupt the replies)."""
    import pickle

    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    requests = sys.stdin.buffer
    os.environ["KERAS_BACKEND"] = backend
    if backend == "jax":
        os.environ["XLA_FLAGS"] = (
            f"--xla_cpu_multi_thread_eigen={'true' if threads > 1 else 'false'} intra_op_parallelism_threads={threads}"
        )

    def reply(*msg: Any) -> None:
        pickle.dump(msg, replies, protocol=pickle.HIGHEST_PROTOCOL)
        replies.flush()

    try:
        model = _Model(path, backend, threads, wanted)
    except RepliscopeError as exc:  # already says what and where
        reply("error", str(exc), type(exc).__name__)
        return
    except Exception as exc:
        reply("error", f"{type(exc).__name__}: {exc}", None)
        return
    reply("ready", {**model.info, "names": model.names, "pid": os.getpid()})
    while True:
        try:
            batch = pickle.load(requests)
        except EOFError:
            return
        if batch is None:
            return
        try:
            reply("ok", model(batch), model.info.get("returned"))
        except Exception as exc:
            reply("error", f"{type(exc).__name__}: {exc}")


class _Worker:
    """The parent's handle on a worker process (``sys.executable -m repliscope.backends.keras.runner``, stopped
    with the runner or at exit)."""

    def __init__(self, path: str, backend: str, threads: int, wanted: tuple[str, ...]) -> None:
        cmd = [
            sys.executable,
            "-m",
            "repliscope.backends.keras.runner",
            backend,
            str(threads),
            path,
            json.dumps(list(wanted)),
        ]
        self.process = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env={**os.environ, "KERAS_BACKEND": backend}
        )
        weakref.finalize(self, _stop, self.process)
        status, *payload = self._recv(f"the Keras {backend} worker could not load '{path}'")
        if status != "ready":
            if payload[1] is not None:  # a missing framework stays a FrameworkError, anything else cannot load
                kind = FrameworkError if payload[1] == "FrameworkError" else ModelLoadError
                raise kind(f"{payload[0]} (in the Keras {backend} worker process)")
            raise ModelLoadError(f"the Keras {backend} worker could not load '{path}': {payload[0]}")
        self.info: dict[str, Any] = payload[0]
        self.names: list[str] = self.info.pop("names")

    def _recv(self, what: str) -> tuple[Any, ...]:
        import pickle

        assert self.process.stdout is not None
        try:
            return tuple(pickle.load(self.process.stdout))
        except EOFError as exc:
            code = self.process.wait(timeout=10)
            raise ModelLoadError(f"{what}: the worker exited with code {code} (its stderr is above)") from exc

    def __call__(self, batch: np.ndarray) -> list[np.ndarray]:
        import pickle

        assert self.process.stdin is not None
        pickle.dump(batch, self.process.stdin, protocol=pickle.HIGHEST_PROTOCOL)
        self.process.stdin.flush()
        status, *payload = self._recv("the Keras worker failed")
        if status != "ok":
            raise BatchError(f"the Keras worker failed on a batch of shape {batch.shape}: {payload[0]}")
        self.info["returned"] = payload[1]
        return list(payload[0])


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.stdin is not None:
        with contextlib.suppress(OSError):
            process.stdin.close()
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


class KerasRunner(Runner):
    """``keras``: a ``.keras`` file on this process' Keras backend (see the module docstring).

    ``infer``: a batch of ``artifact.input_dtype`` in the model's layout (Keras image models are NHWC, e.g.
    float32 (N, 224, 224, 3)) -> float32 (N, C); ``infer_outputs`` -> every output by manifest name.
    """

    name = "keras"
    backend: ClassVar[str | None] = None
    """The backend this runner requires; None = whatever this process' Keras uses."""

    def __init__(self, artifact: ModelArtifact, *, threads: int, cache_dir: Path) -> None:
        super().__init__(artifact, threads=threads, cache_dir=cache_dir)
        self._model: _Model | _Worker | None = None

    def framework(self) -> tuple[str, str]:
        return distribution_version(["keras"])

    def _load(self) -> None:
        if self.artifact.format != "keras":
            raise ModelLoadError(
                f"the {self.name} runtime runs 'keras' sources (.keras files), not '{self.artifact.format}'"
            )
        here, why = current_backend()
        wanted = self.backend or here
        if wanted not in BACKENDS:
            raise ModelLoadError(
                f"Keras backend '{wanted}' ({why}) is not one repliscope runs (allowed: "
                f"{', '.join(BACKENDS)}): use the runtime keras_tensorflow or keras_jax"
            )
        path, names = str(self.artifact.path), tuple(self.artifact.output_names)
        if not zipfile.is_zipfile(path):  # Keras itself says "File not found" for a file that is there
            raise ModelLoadError(
                f"'{path}' is not a .keras file (a .keras model is a zip archive; this file is "
                "not one, or is truncated)"
            )
        if wanted == here:
            self._model = _Model(path, wanted, self.threads, names)
            self.notes["execution"] = {"where": "this process", "why": why}
        else:
            self._model = _Worker(path, wanted, self.threads, names)
            self.notes["execution"] = {
                "where": "worker process",
                "pid": self._model.info.pop("pid"),
                "why": f"this process' Keras backend is '{here}' ({why})",
            }
        self.notes.update({k: v for k, v in self._model.info.items() if k != "returned"})

    def _infer_outputs(self, batch: np.ndarray) -> dict[str, np.ndarray]:
        assert self._model is not None
        check_batch(batch, self.artifact)
        outs = self._model(np.ascontiguousarray(batch))
        self.notes["returned"] = self._model.info.get("returned")
        for name, out in zip(self._model.names, outs, strict=True):
            if out.ndim == 0 or out.shape[0] != batch.shape[0]:
                raise BatchError(
                    f"output '{name}' has shape {out.shape}: its first axis is not the batch ({batch.shape[0]})"
                )
        return dict(zip(output_keys(self.artifact, self._model.names), outs, strict=True))

    def _infer(self, batch: np.ndarray) -> np.ndarray:
        return single_output_scores(self._infer_outputs(batch), batch.shape[0])


class KerasTensorflowRunner(KerasRunner):
    """``keras_tensorflow``: the TensorFlow backend (in this process when it is this process' backend)."""

    name = "keras_tensorflow"
    backend = "tensorflow"


class KerasJaxRunner(KerasRunner):
    """``keras_jax``: the JAX backend (in a worker process unless this process' Keras runs on JAX)."""

    name = "keras_jax"
    backend = "jax"


if __name__ == "__main__":
    _serve(sys.argv[1], int(sys.argv[2]), sys.argv[3], tuple(json.loads(sys.argv[4])))
