"""Runtimes: one :class:`Runner` per framework (torch, onnxruntime, opencv_dnn), looked up by manifest name.

Importing this package imports no ML framework; a runner's module is imported on first lookup.
"""

from __future__ import annotations

from pathlib import Path

from repliscope.backends import native_runtimes
from repliscope.errors import RepliscopeError
from repliscope.runtimes.base import RUNTIMES, Architecture, ModelArtifact, Runner
from repliscope.runtimes.errors import BatchError, ModelLoadError

__all__ = [
    "NATIVE_RUNTIMES",
    "RUNTIMES",
    "Architecture",
    "BatchError",
    "ModelArtifact",
    "ModelLoadError",
    "Runner",
    "create_runner",
    "native_runtime",
]


def create_runner(name: str, artifact: ModelArtifact, threads: int, cache_dir: Path) -> Runner:
    """A not-yet-loaded runner for ``artifact``; ``threads`` >= 1 is the intra-op thread count."""
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise RepliscopeError(f"threads must be a positive integer, got {threads!r}")
    return RUNTIMES.get(name)(artifact, threads=threads, cache_dir=Path(cache_dir))


NATIVE_RUNTIMES: dict[str, str] = native_runtimes()
"""Manifest ``framework.name`` -> the runtime that runs its own format when no runtime is given (an ONNX
source, MTCNN's ``mtcnn_cascade`` of three ONNX nets too, runs on onnxruntime); from the backends' entries
(:mod:`repliscope.backends`)."""


def native_runtime(framework: str) -> str:
    """The runtime that runs a manifest's own format when no runtime is given (``--runtime``, a job's ``runtime``)."""
    if framework not in NATIVE_RUNTIMES:
        raise RepliscopeError(
            f"no default runtime for framework {framework!r}: pass --runtime "
            f"(frameworks with a default: {', '.join(sorted(NATIVE_RUNTIMES))})"
        )
    return NATIVE_RUNTIMES[framework]
