"""PyTorch runner: the weight-only source built by its architecture factory, run eagerly on CPU."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from repliscope.backends.torch.loader import build_torch_module
from repliscope.errors import RepliscopeError
from repliscope.runtimes._common import check_batch, distribution_version, to_scores
from repliscope.runtimes.base import ModelArtifact, Runner


class TorchRunner(Runner):
    """Eager PyTorch on CPU under ``torch.inference_mode()``.

    ``infer``: batch of ``artifact.input_dtype`` (N, ...) e.g. float32 NCHW (N, 3, 224, 224) -> float32
    (N, C).

    Threads: ``torch.set_num_threads`` is process-global. The runner sets it on load and re-asserts it before
    every batch (another runner in the same process may have changed it); it does not restore the previous
    value. Inter-op threads are left alone (torch allows setting them only once per process).
    """

    name = "torch"

    def __init__(self, artifact: ModelArtifact, *, threads: int, cache_dir: Path) -> None:
        if artifact.format != "pytorch_state_dict":
            raise RepliscopeError(
                f"torch runtime needs a torch source (format 'pytorch_state_dict'), "
                f"got format '{artifact.format}' ('{artifact.path.name}'); "
                "use the onnxruntime or opencv_dnn runtime for ONNX sources"
            )
        super().__init__(artifact, threads=threads, cache_dir=cache_dir)
        self._module: torch.nn.Module | None = None

    def framework(self) -> tuple[str, str]:
        return distribution_version(["torch"])

    @property
    def module(self) -> torch.nn.Module:
        """The loaded module (loads on first use), e.g. for tracing hooks."""
        self.load()
        assert self._module is not None
        return self._module

    def _load(self) -> None:
        torch.set_num_threads(self.threads)
        describe: dict[str, object] = {}
        self._module = build_torch_module(self.artifact, describe)
        self.notes["model"] = describe
        self.notes["device"] = "cpu"

    def _infer(self, batch: np.ndarray) -> np.ndarray:
        assert self._module is not None
        check_batch(batch, self.artifact)
        if torch.get_num_threads() != self.threads:
            torch.set_num_threads(self.threads)
        x = np.ascontiguousarray(batch)
        if not x.flags.writeable:  # torch.from_numpy warns on read-only memory
            x = x.copy()
        with torch.inference_mode():
            out = self._module(torch.from_numpy(x))
        return to_scores(out.float().numpy(), batch.shape[0])
