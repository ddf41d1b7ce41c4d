"""A stored trace (Chrome / Perfetto JSON) as OTLP/JSON, the file an OpenTelemetry backend (Jaeger, Tempo, an
OpenTelemetry Collector's ``otlpjsonfile`` receiver) imports: ``{"resourceSpans": [{"resource", "scopeSpans":
[{"scope", "spans": [...]}]}]}``.

The spans are made exactly as the live export makes them (:func:`repliscope.tracing.otel.emit_spans`: parents
found by nesting, level, thread id and attributes) on a private SDK provider that exports to memory only, encoded
by the OTLP exporter's own encoder (``encode_spans``: the ``ExportTraceServiceRequest`` an OTLP exporter would
send) and written with protobuf's JSON mapping, with the OTLP/JSON deviations: ``traceId``, ``spanId`` and
``parentSpanId`` are hex (not base64), enums are integers; as that mapping does, a field at its default value
(an ONNX node's empty name) is left out. :func:`dumps` writes it as one line (JSON Lines, what the Collector's
``otlpjsonfile`` receiver reads). The rendering reads no ``OTEL_*`` variable and sends nothing anywhere.

Ids are derived from the trace's content (SHA-256 of its canonical JSON), so one stored trace gives the same file
each time, and every span has the one trace id. Times are epoch nanoseconds: the trace's ``otherData``
``origin_ns + epoch_offset_ns`` (written by :meth:`repliscope.tracing.tracer.Tracer.chrome_trace`) plus each
event's ``ts``; a trace naming neither (a foreign file) has its ``ts`` read as microseconds since the Unix epoch,
and its resource says so (``repliscope.epoch``).
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping
from typing import Any

from repliscope.errors import RepliscopeError
from repliscope.tracing.chrome import from_chrome

SCOPE = "repliscope.tracing"
"""The instrumentation scope of every span (the live export's too)."""
UNKNOWN_SERVICE = "unknown_service"
"""``service.name`` of a trace that names no service (OpenTelemetry's own default)."""
UNKNOWN_EPOCH = "unknown: ts read as microseconds since the Unix epoch"
"""``repliscope.epoch`` of a trace whose ``otherData`` has no ``origin_ns`` / ``epoch_offset_ns``."""
MAX_ATTRIBUTES = 1024
"""Attributes kept per span (the SDK's own limit, set here so that no ``OTEL_*`` variable changes the file)."""
ID_FIELDS = frozenset({"traceId", "spanId", "parentSpanId"})
"""The bytes fields OTLP/JSON writes in hex where protobuf's JSON mapping writes base64."""


def available() -> bool:
    """Whether the OpenTelemetry SDK and the OTLP encoder (``repliscope[tracing]``) are installed."""
    from importlib.util import find_spec

    try:
        return all(
            find_spec(name) is not None
            for name in ("opentelemetry.sdk.trace", "opentelemetry.exporter.otlp.proto.common.trace_encoder")
        )
    except ModuleNotFoundError:  # a parent package is missing
        return False


def epoch_of(doc: Mapping[str, Any]) -> tuple[int, str | None]:
    """The epoch ns of the trace's ``ts`` 0 and, when the trace does not name it, the note saying what was taken;
    one of ``otherData.origin_ns`` / ``epoch_offset_ns`` without the other, or not an integer, is an error."""
    meta = doc.get("otherData")
    meta = meta if isinstance(meta, Mapping) else {}
    values = {name: meta.get(name) for name in ("origin_ns", "epoch_offset_ns")}
    if all(v is None for v in values.values()):
        return 0, UNKNOWN_EPOCH
    total = 0
    for name, value in values.items():
        if not isinstance(value, int) or isinstance(value, bool):
            raise RepliscopeError(
                f"the trace's otherData.{name} must be an integer (nanoseconds) when otherData.origin_ns or "
                f"otherData.epoch_offset_ns is given, not {value!r:.40}"
            )
        total += value
    return total, None


def to_otlp_json(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The Chrome trace ``doc`` (as stored or written by ``--trace-out``) as one OTLP/JSON
    ``ExportTraceServiceRequest``: one resource (``service.name``, ``repliscope.trace_level``), one scope
    (:data:`SCOPE`), a span per complete event. Not a Chrome trace, or a bad ``otherData`` epoch, is an error."""
    try:
        from google.protobuf.json_format import MessageToDict
        from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import SpanLimits, TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        from opentelemetry.sdk.trace.id_generator import IdGenerator
        from opentelemetry.sdk.trace.sampling import ALWAYS_ON
    except ImportError as exc:
        raise RepliscopeError(
            f"OTLP/JSON needs the OpenTelemetry SDK: pip install 'repliscope[tracing]' ({exc})"
        ) from exc

    from repliscope.tracing.otel import emit_spans

    spans = from_chrome(doc)
    epoch, note = epoch_of(doc)
    meta = doc.get("otherData")
    meta = meta if isinstance(meta, Mapping) else {}
    attributes: dict[str, str] = {"service.name": str(meta.get("service") or UNKNOWN_SERVICE)}
    if meta.get("repliscope_trace_level") is not None:
        attributes["repliscope.trace_level"] = str(meta["repliscope_trace_level"])
    if note is not None:
        attributes["repliscope.epoch"] = note
    digest = hashlib.sha256(
        json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str).encode()
    ).digest()

    class ContentIds(IdGenerator):
        """One trace id and a span id per span, from the trace's digest (never 0, which OTLP forbids)."""

        def __init__(self) -> None:
            self.count = 0

        def generate_trace_id(self) -> int:
            return int.from_bytes(digest[:16], "big") or 1

        def generate_span_id(self) -> int:
            self.count += 1
            return int.from_bytes(hashlib.sha256(digest + self.count.to_bytes(8, "big")).digest()[:8], "big") or 1

    unlimited = SpanLimits.UNSET
    provider = TracerProvider(
        sampler=ALWAYS_ON,
        resource=Resource(attributes),
        shutdown_on_exit=False,
        id_generator=ContentIds(),
        span_limits=SpanLimits(
            max_attributes=MAX_ATTRIBUTES,
            max_span_attributes=MAX_ATTRIBUTES,
            max_events=0,
            max_links=0,
            max_event_attributes=0,
            max_link_attributes=0,
            max_attribute_length=unlimited,
            max_span_attribute_length=unlimited,
        ),
    )
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    try:
        emit_spans(provider.get_tracer(SCOPE), spans, epoch)
        request = encode_spans(memory.get_finished_spans())
    finally:
        provider.shutdown()
    return _hex_ids(MessageToDict(request, use_integers_for_enums=True))


def dumps(request: Mapping[str, Any]) -> bytes:
    """``request`` as one line of UTF-8 JSON and a newline: the JSON Lines an OpenTelemetry Collector's
    ``otlpjsonfile`` receiver reads (one export request per line), also what Jaeger's and Tempo's upload take."""
    return json.dumps(request, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


def _hex_ids(request: dict[str, Any]) -> dict[str, Any]:
    """``request`` (protobuf's JSON mapping) with each span's :data:`ID_FIELDS` turned from base64 into hex, in
    place (the spans have no links or events: :func:`to_otlp_json` makes none)."""
    for resource in request.get("resourceSpans", []):
        for scope in resource.get("scopeSpans", []):
            for span in scope.get("spans", []):
                for key in ID_FIELDS & span.keys():
                    span[key] = base64.b64decode(span[key]).hex()
    return request
