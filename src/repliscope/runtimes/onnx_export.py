"""Export a weight-only torch source to ONNX once, cached by everything that determines the graph.

Exporter: ``torch.onnx.export(dynamo=True)`` (torch.export + onnxscript), opset 18, batch axis dynamic. It
was chosen over the TorchScript exporter (``dynamo=False``, deprecated since torch 2.9) because its graph is
clean (for EfficientNet-Lite: 49 Conv, 33 Clip, 9 Add, ReduceMean, Reshape, Gemm; BatchNorm folded, the
"same" padding folded into Conv pads) and both onnxruntime and OpenCV DNN (both engines) run it with any
batch size; OpenCV's classic engine cannot run the TorchScript export with a batch other than the traced
one (its Gemm gets (1, N*1280)).

Cache: ``cache_dir / f"{sha256[:16]}-{key}.onnx"``, ``key`` hashing the source sha256, the architecture
factory + kwargs, the input shape and dtype, the opset, the exporter and the torch version. The cache is the one
every conversion shares (:meth:`repliscope.runtimes.loaders.Conversion.cached`): written aside, verified, renamed
atomically; the sidecar ``.json`` records the inputs (source and local-module sha256, the key) and the export's
sha256, and a cached file is used only when both match (at worst two concurrent runs both export and the last
rename wins; the export is byte-for-byte deterministic).

Process: when torch is not imported in this process (``repliscope evaluate`` on onnxruntime, which needs only the
ONNX file), the export runs in a child Python (:func:`export_in_child`): this process never imports torch (its
import alone costs seconds and hundreds of MB), and the export's Python does not hold this process's GIL while
the run reads and pre-processes its first samples beside it (:mod:`repliscope.evaluation.warm_start`). With torch
imported already, the export runs here.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import logging
import os
import pickle
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from repliscope.errors import FrameworkError, RepliscopeError
from repliscope.runtimes.base import ModelArtifact, import_framework
from repliscope.runtimes.errors import ModelLoadError
from repliscope.runtimes.loaders import Conversion

TORCH_INSTALL = "pip install 'repliscope[torch]'"

OPSET = 18
EXPORTER = "torch.onnx.export(dynamo=True)"
_EXAMPLE_BATCH = 2  # torch.export specialises sizes 0 and 1, so trace with 2 to keep the batch axis dynamic


def torch_version() -> str:
    """The installed torch's version (e.g. ``2.13.0+cpu``) without importing torch: a cached export is found
    and verified with it, and importing torch costs seconds of a run that only needs the ONNX file.
    ``torch.__version__`` when torch is imported already, else its distribution's version (the same string)."""
    module = sys.modules.get("torch")
    if module is not None:
        return str(module.__version__)
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError as exc:
        raise FrameworkError(
            f"exporting a torch source to ONNX needs torch, which is not installed ({TORCH_INSTALL})"
        ) from exc


def export_key(artifact: ModelArtifact) -> str:
    """16 hex digits identifying an export of ``artifact`` with this torch, exporter and opset."""
    arch = artifact.architecture
    payload = {
        "source_sha256": artifact.sha256,
        "factory": arch.factory if arch else None,
        "kwargs": arch.kwargs if arch else None,
        "input_shape": [-1 if d is None or d < 0 else int(d) for d in artifact.input_shape],
        "input_dtype": artifact.input_dtype,
        "input_name": artifact.input_name,
        "opset": OPSET,
        "exporter": EXPORTER,
        "torch_version": torch_version(),
    }
    if arch is not None and arch.module_sha256 is not None:  # a local module: its code shapes the graph
        payload["module_sha256"] = arch.module_sha256
    blob = json.dumps(payload, sort_keys=True, default=repr).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def export_cache_path(artifact: ModelArtifact, cache_dir: Path) -> Path:
    """Where the export of ``artifact`` is (or will be) cached."""
    return Path(cache_dir) / f"{artifact.sha256[:16]}-{export_key(artifact)}.onnx"


class TorchToOnnx(Conversion):
    """``pytorch_state_dict`` -> ONNX with :data:`EXPORTER`, through the shared verified cache
    (:meth:`repliscope.runtimes.loaders.Conversion.cached`); its info is the record's ``notes["export"]``."""

    source = "pytorch_state_dict"
    target = "onnx"
    notes_key = "export"
    stale_key = "reexported_because"

    def check_source(self, artifact: ModelArtifact) -> None:
        if artifact.format != self.source:
            raise ModelLoadError(f"only a 'pytorch_state_dict' source can be exported to ONNX, not '{artifact.format}'")

    def cache_path(self, artifact: ModelArtifact, cache_dir: Path) -> Path:
        return export_cache_path(artifact, cache_dir)

    def inputs(self, artifact: ModelArtifact) -> dict[str, Any]:
        arch = artifact.architecture
        return {
            "source_sha256": artifact.sha256,
            "module_sha256": arch.module_sha256 if arch is not None else None,
            "cache_key": export_key(artifact),
        }

    def convert(self, artifact: ModelArtifact, out: Path) -> dict[str, Any]:
        if "torch" in sys.modules or not sys.executable:  # torch is here already (or no interpreter to start)
            return _export(artifact, out)
        return export_in_child(artifact, out)


TORCH_TO_ONNX = TorchToOnnx()


def export_to_onnx(artifact: ModelArtifact, cache_dir: Path) -> tuple[Path, dict[str, Any]]:
    """The ONNX export of a ``pytorch_state_dict`` artifact, exported on first use and reused after.

    The ONNX model has one input named ``artifact.input_name`` (same dtype and layout as the torch
    model, e.g. float32 NCHW (N, 3, 224, 224), N dynamic when the manifest's batch is -1) and one output
    ``"logits"`` (N, C) float32. Returns ``(path, info)``; ``info["cached"]`` is True when reused.
    """
    return TORCH_TO_ONNX.cached(artifact, cache_dir)


CHILD = "from repliscope.runtimes.onnx_export import child_main; child_main()"
"""What the child Python of :func:`export_in_child` runs (``python -c CHILD JOB RESULT``)."""
_CHILD_ERRORS: dict[str, type[RepliscopeError]] = {
    "ModelLoadError": ModelLoadError,
    "FrameworkError": FrameworkError,
    "RepliscopeError": RepliscopeError,
}


def export_in_child(artifact: ModelArtifact, out: Path) -> dict[str, Any]:
    """:func:`_export` in a child Python (this interpreter, this ``sys.path``, the environment) -> its
    provenance. The job (``sys.path``, the artifact, ``out``) is pickled into a private temporary folder by this
    process; the child answers in JSON there. Its output is captured (the parent's stdout may be ``--json``); a
    repliscope error in the child is raised here as the same class with the same message, any other failure as
    a ModelLoadError with the end of the child's stderr."""
    with tempfile.TemporaryDirectory(prefix="repliscope-export-") as tmp:
        job, answer = Path(tmp) / "job.pickle", Path(tmp) / "answer.json"
        job.write_bytes(pickle.dumps((list(sys.path), artifact, str(out))))
        done = subprocess.run(
            [sys.executable, "-c", CHILD, str(job), str(answer)],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            check=False,
        )
        try:
            reply = json.loads(answer.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            reply = None
    if isinstance(reply, dict) and isinstance(reply.get("info"), dict) and done.returncode == 0:
        return reply["info"]
    if isinstance(reply, dict) and isinstance(reply.get("error"), dict):
        error = reply["error"]
        raise _CHILD_ERRORS.get(str(error.get("type")), ModelLoadError)(str(error.get("message")))
    tail = " ".join(done.stderr.strip().splitlines()[-3:])[-500:] or "no output"
    raise ModelLoadError(
        f"exporting '{artifact.path.name}' to ONNX in a child process failed (exit code {done.returncode}): {tail}"
    )


def child_main() -> None:
    """The child of :func:`export_in_child`: ``sys.argv[1:3]`` = the job file and the answer file. Ends the
    process once the answer is written."""
    job, answer = Path(sys.argv[1]), Path(sys.argv[2])
    with job.open("rb") as f:
        path, artifact, out = pickle.load(f)  # written by the parent, in its private temporary folder
    sys.path[:] = path
    try:
        reply: dict[str, Any] = {"info": _export(artifact, Path(out))}
    except RepliscopeError as exc:
        kind = type(exc).__name__ if type(exc).__name__ in _CHILD_ERRORS else "ModelLoadError"
        reply = {"error": {"type": kind, "message": str(exc)}}
    answer.write_text(json.dumps(reply, default=str), encoding="utf-8")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # the answer is written: skip the interpreter's teardown of torch (about a second)


def _export(artifact: ModelArtifact, out: Path) -> dict[str, Any]:
    """Export to ``out`` (a temporary name the cache renames); returns the export's provenance."""
    dims = list(artifact.input_shape)
    if any(d is None or d < 0 for d in dims[1:]):
        raise ModelLoadError(f"input shape {tuple(dims)}: only the batch axis may be dynamic for an ONNX export")
    dynamic = dims[0] is None or dims[0] < 0
    example_shape = (_EXAMPLE_BATCH if dynamic else dims[0], *dims[1:])
    torch = import_framework("torch", "torch -> ONNX export", TORCH_INSTALL)
    from repliscope.backends.torch.loader import build_torch_module

    describe: dict[str, Any] = {}
    module = build_torch_module(artifact, describe)
    example = torch.from_numpy(np.zeros(example_shape, dtype=np.dtype(artifact.input_dtype)))
    input_name = artifact.input_name or "input"
    dynamic_shapes = ({0: torch.export.Dim("batch")},) if dynamic else None
    start = time.perf_counter()
    try:
        with quiet_torch_exporter():
            torch.onnx.export(
                module,
                (example,),
                str(out),
                dynamo=True,
                opset_version=OPSET,
                input_names=[input_name],
                output_names=["logits"],
                dynamic_shapes=dynamic_shapes,
                external_data=False,
                optimize=True,
                verbose=False,
            )
    except RepliscopeError:
        raise
    except Exception as exc:
        raise ModelLoadError(
            f"exporting '{artifact.path.name}' to ONNX with {EXPORTER} failed: "
            f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc) else ''}. "
            "Give an ONNX source in the manifest instead, or use the torch runtime"
        ) from exc
    return {
        "exported_from": "torch",
        "exporter": EXPORTER,
        "opset": OPSET,
        "torch_version": torch.__version__,
        "source_sha256": artifact.sha256,
        "cache_key": export_key(artifact),
        "input_name": input_name,
        "input_shape": [-1 if d is None or d < 0 else int(d) for d in dims],
        "dynamic_batch": dynamic,
        "export_seconds": round(time.perf_counter() - start, 3),
        "model": describe,
    }


@contextlib.contextmanager
def quiet_torch_exporter() -> Iterator[None]:
    """Silence torch-internal chatter that users cannot act on (deprecations inside torch.export and Inductor,
    and "torchvision is not installed. Skipping torchvision::nms" from the op registry). Errors still raise."""
    registry_logger = logging.getLogger("torch.onnx._internal.exporter._registration")
    level = registry_logger.level
    registry_logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            warnings.simplefilter("ignore", DeprecationWarning)
            yield
    finally:
        registry_logger.setLevel(level)
