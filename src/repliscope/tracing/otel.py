"""OpenTelemetry export of recorded spans (imported only when a tracer with a level above ``none`` uses OTel).

The tracer owns its own SDK ``TracerProvider`` (it never sets the global one behind the caller's back). Spans are
recorded cheaply during the run and exported when the run's ``application`` span ends (or on ``flush``), with
their real start/end times (epoch ns) and parents found by nesting, so ONNX Runtime / torch.profiler events
converted after the fact nest exactly like live spans. OTLP/HTTP export is added only when the standard
``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` variable is set (the exporter reads
the other ``OTEL_EXPORTER_OTLP_*`` variables itself).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from repliscope.errors import RepliscopeError
from repliscope.tracing.spans import SpanRecord, nest, time_order

OTLP_ENV = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")


class OtelSink:
    """A private TracerProvider (service name ``service``) with ``exporter`` (e.g. the SDK's
    InMemorySpanExporter, synchronous) and, when the OTLP variables are set, an OTLP/HTTP batch exporter."""

    def __init__(self, service: str, exporter: Any = None) -> None:
        try:
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
        except ImportError as exc:
            raise RepliscopeError(
                f"OpenTelemetry export needs the SDK: pip install 'repliscope[tracing]' ({exc})"
            ) from exc
        self.provider = TracerProvider(resource=Resource.create({"service.name": service}))
        self.exporters: list[str] = []
        if exporter is not None:
            self.provider.add_span_processor(SimpleSpanProcessor(exporter))
            self.exporters.append(type(exporter).__name__)
        if any(os.environ.get(name) for name in OTLP_ENV):
            try:
                from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            except ImportError as exc:
                raise RepliscopeError(
                    f"{' or '.join(OTLP_ENV)} is set but the OTLP exporter is not installed: "
                    f"pip install 'repliscope[tracing]' ({exc})"
                ) from exc
            self.provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
            self.exporters.append("OTLPSpanExporter(http/protobuf)")
        self.tracer = self.provider.get_tracer("repliscope.tracing")

    def export(self, spans: Sequence[SpanRecord], epoch_offset_ns: int) -> int:
        """Emit ``spans`` (perf_counter_ns clock; epoch = perf + ``epoch_offset_ns``) -> how many were emitted."""
        return emit_spans(self.tracer, spans, epoch_offset_ns)

    def shutdown(self) -> None:
        self.provider.force_flush()
        self.provider.shutdown()


def emit_spans(tracer: Any, spans: Sequence[SpanRecord], epoch_offset_ns: int) -> int:
    """Start and end one OpenTelemetry span of ``tracer`` (an SDK tracer) per record, parents first, each child in
    its :func:`~repliscope.tracing.spans.nest` parent's context, at its real times (epoch = perf +
    ``epoch_offset_ns``), with its level, thread id and attributes -> how many were emitted. The one conversion of
    recorded spans: the live export (:class:`OtelSink`) and a stored trace's OTLP/JSON
    (:mod:`repliscope.tracing.otlp_json`) both go through it."""
    from opentelemetry import trace

    parents = nest(spans)
    made: dict[int, Any] = {}
    for i in time_order(spans):  # parents first
        s = spans[i]
        parent = made.get(parents[i])
        context = trace.set_span_in_context(parent) if parent is not None else None
        attributes = {
            "repliscope.level": s.level,
            "thread.id": s.tid,
            **{k: _attr(v) for k, v in s.attributes.items()},
        }
        span = tracer.start_span(
            s.name, context=context, start_time=s.start_ns + epoch_offset_ns, attributes=attributes
        )
        span.end(end_time=s.end_ns + epoch_offset_ns)
        made[i] = span
    return len(made)


def _attr(value: Any) -> Any:
    if isinstance(value, str | bool | int | float):
        return value
    if isinstance(value, list | tuple) and all(isinstance(v, str | bool | int | float) for v in value):
        return list(value)
    return str(value)
