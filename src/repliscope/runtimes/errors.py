"""Errors raised while building or running a model (import-light: no ML framework needed)."""

from __future__ import annotations

from repliscope.errors import RepliscopeError


class ModelLoadError(RepliscopeError):
    """A model file cannot be turned into a runnable model: unsafe or unreadable file, state_dict keys
    that do not match the architecture, ONNX input names that differ from the manifest, export failure."""


class BatchError(RepliscopeError):
    """A batch given to ``Runner.infer`` does not match the model input (rank, fixed dims, dtype)."""
