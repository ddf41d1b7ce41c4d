"""Trace levels, outermost first; each level includes the ones before it (after MLModelScope's tracer)."""

from __future__ import annotations

from repliscope.errors import RepliscopeError

LEVELS: tuple[str, ...] = ("none", "application", "model", "framework", "library")
"""``application``: the run (one per command); ``model``: each query / batch with one child per pre-processing op,
inference and post-processing op; ``framework``: each layer (torch module hooks, ONNX Runtime node profiler,
OpenCV DNN per-layer timings, libdarknet's layer loop driven from Python); ``library``: kernels (torch.profiler
aten / oneDNN ops, ONNX Runtime kernels)."""

RANK: dict[str, int] = {name: i for i, name in enumerate(LEVELS)}


def check_level(level: str, what: str = "trace level") -> int:
    """The rank of ``level`` (0 for ``none``); an unknown level is an error naming :data:`LEVELS`."""
    try:
        return RANK[level]
    except (KeyError, TypeError):
        raise RepliscopeError(f"unknown {what} {level!r} (allowed: {', '.join(LEVELS)})") from None
