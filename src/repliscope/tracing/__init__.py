"""Leveled tracing (application → model → framework → library) to OpenTelemetry and Chrome trace / Perfetto JSON.

Importable without OpenTelemetry, torch or ONNX Runtime: they are imported only when a level needs them.
"""

from repliscope.tracing.levels import LEVELS
from repliscope.tracing.tracer import NO_TRACER, Tracer, current_tracer, make_tracer, use_tracer

__all__ = ["LEVELS", "NO_TRACER", "Tracer", "current_tracer", "make_tracer", "use_tracer"]
