"""A stored trace as OTLP/JSON (``repliscope.tracing.otlp_json``): protobuf's own parser reads it into an
``ExportTraceServiceRequest``; its spans are the live OpenTelemetry export's (names, parents, epoch times,
attributes) and nest as the Chrome trace does; ids are hex, one trace id, deterministic; no ``OTEL_*`` variable
changes the file or sends it anywhere. Tiny hand-made traces: milliseconds."""

from __future__ import annotations

import base64
import json
import sys
from typing import Any

import pytest
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from repliscope.errors import RepliscopeError
from repliscope.tracing import make_tracer
from repliscope.tracing.chrome import from_chrome, to_chrome
from repliscope.tracing.otlp_json import ID_FIELDS, SCOPE, UNKNOWN_EPOCH, to_otlp_json
from repliscope.tracing.spans import SpanRecord, nest


def parse_otlp(doc: dict[str, Any]) -> ExportTraceServiceRequest:
    """``doc`` read by protobuf's strict JSON parser (unknown fields refused); OTLP/JSON's hex ids are turned
    into the base64 that protobuf's JSON mapping reads, as the OTLP specification describes the difference."""

    def b64(value: Any) -> Any:
        if isinstance(value, dict):
            return {
                k: base64.b64encode(bytes.fromhex(v)).decode() if k in ID_FIELDS else b64(v) for k, v in value.items()
            }
        if isinstance(value, list):
            return [b64(v) for v in value]
        return value

    return json_format.Parse(json.dumps(b64(doc)), ExportTraceServiceRequest())


def spans_of(doc: dict[str, Any]) -> list[dict[str, Any]]:
    (resource,) = doc["resourceSpans"]
    (scope,) = resource["scopeSpans"]
    assert scope["scope"] == {"name": SCOPE}
    return list(scope["spans"])


def value_of(value: dict[str, Any]) -> Any:
    """An OTLP ``AnyValue`` (``{stringValue|intValue|doubleValue|boolValue|arrayValue}``) as a Python value."""
    ((kind, v),) = value.items()
    assert kind in ("stringValue", "intValue", "doubleValue", "boolValue", "arrayValue"), value
    if kind == "arrayValue":
        return [value_of(x) for x in v["values"]]
    return int(v) if kind == "intValue" else v  # OTLP/JSON writes a 64-bit integer as a decimal string


def attributes_of(span: dict[str, Any]) -> dict[str, Any]:
    """OTLP ``[{key, value}]`` as a dict of Python values."""
    return {item["key"]: value_of(item["value"]) for item in span["attributes"]}


def _traced(exporter: Any = None) -> Any:
    """A run on the main thread, a batch with its ops and inference, a worker thread's batch inside the run, a
    float, a bool and a list attribute."""
    tracer = make_tracer("framework", service="svc", otel_exporter=exporter, otel=exporter is not None)
    tracer.record("run", "application", 1_000, 90_000, 2, {"manifest": "lite0"})
    tracer.record("batch", "model", 2_000, 40_000, 2, {"index": 0, "threshold": 0.25, "warm": True})
    tracer.record("preprocess/resize", "model", 2_500, 9_000, 2, {"shape": [224, 224]})
    tracer.record("inference", "model", 10_000, 39_000, 2, {})
    tracer.record("_blocks.0._conv", "framework", 11_000, 20_000, 2, {"op_type": "Conv"})
    tracer.record("batch", "model", 41_000, 80_000, 1, {"index": 1})  # a worker thread
    return tracer


def test_a_stored_trace_is_the_live_exports_spans_and_protobuf_reads_it() -> None:
    exporter = InMemorySpanExporter()
    tracer = _traced(exporter)
    assert tracer.flush() == 6
    live = exporter.get_finished_spans()
    doc = to_otlp_json(json.loads(json.dumps(tracer.chrome_trace())))  # as stored: through JSON
    request = parse_otlp(doc)
    assert len(request.resource_spans[0].scope_spans[0].spans) == 6
    spans = spans_of(doc)
    resource = {a["key"]: a["value"]["stringValue"] for a in doc["resourceSpans"][0]["resource"]["attributes"]}
    assert resource == {"service.name": "svc", "repliscope.trace_level": "framework"}
    by_id = {s["spanId"]: s for s in spans}

    live_by_id: dict[int, Any] = {s.context.span_id: s for s in live}

    def live_row(s: Any) -> tuple[Any, ...]:
        parent = None if s.parent is None else live_by_id[s.parent.span_id]
        attributes = {k: list(v) if isinstance(v, tuple) else v for k, v in s.attributes.items()}
        return s.end_time, None if parent is None else (parent.name, parent.start_time), attributes

    def otlp_row(s: dict[str, Any]) -> tuple[Any, ...]:
        parent = by_id.get(s.get("parentSpanId", ""))
        where = None if parent is None else (parent["name"], int(parent["startTimeUnixNano"]))
        return int(s["endTimeUnixNano"]), where, attributes_of(s)

    want = {(s.name, s.start_time): live_row(s) for s in live}
    got = {(s["name"], int(s["startTimeUnixNano"])): otlp_row(s) for s in spans}
    assert got == want
    assert len(got) == len(want) == 6
    worker = next(s for s in spans if attributes_of(s).get("thread.id") == 1)
    assert by_id[worker["parentSpanId"]]["name"] == "run"  # the worker's batch belongs to the run
    assert attributes_of(by_id[worker["parentSpanId"]])["manifest"] == "lite0"
    batch = next(s for s in spans if attributes_of(s).get("index") == 0)
    assert {a["key"]: a["value"] for a in batch["attributes"]}["threshold"] == {"doubleValue": 0.25}
    assert {a["key"]: a["value"] for a in batch["attributes"]}["warm"] == {"boolValue": True}


def test_the_nesting_is_the_chrome_traces_and_the_ids_are_hex_and_consistent() -> None:
    chrome = _traced().chrome_trace()
    doc = to_otlp_json(chrome)
    spans = spans_of(doc)
    records = from_chrome(chrome)
    parents = nest(records)
    epoch = chrome["otherData"]["origin_ns"] + chrome["otherData"]["epoch_offset_ns"]
    by_time = {(r.name, r.start_ns + epoch): i for i, r in enumerate(records)}
    index_of = {s["spanId"]: by_time[(s["name"], int(s["startTimeUnixNano"]))] for s in spans}
    for s in spans:
        want = parents[index_of[s["spanId"]]]
        assert (index_of[s["parentSpanId"]] if "parentSpanId" in s else -1) == want, s["name"]
    assert len({s["traceId"] for s in spans}) == 1
    assert all(len(s["traceId"]) == 32 and int(s["traceId"], 16) for s in spans)
    assert len({s["spanId"] for s in spans}) == len(spans) == 6
    assert all(len(s["spanId"]) == 16 and set(s["spanId"]) <= set("0123456789abcdef") for s in spans)
    assert {s["parentSpanId"] for s in spans if "parentSpanId" in s} <= {s["spanId"] for s in spans}
    assert all(s["kind"] == 1 for s in spans)  # SPAN_KIND_INTERNAL, an integer as OTLP/JSON wants
    assert to_otlp_json(chrome) == doc  # one stored trace, one file
    other = _traced().chrome_trace()
    other["otherData"]["origin_ns"] += 1
    assert spans_of(to_otlp_json(other))[0]["traceId"] != spans[0]["traceId"]


def test_a_trace_without_an_origin_says_so_and_a_half_origin_is_an_error() -> None:
    doc = to_chrome([SpanRecord("run", "application", 3_000, 5_000, 1)], 0, thread_names={}, metadata={}, pid=1)
    out = to_otlp_json(doc)
    ((span,),) = [spans_of(out)]
    assert (span["startTimeUnixNano"], span["endTimeUnixNano"]) == ("3000", "5000")
    resource = {a["key"]: a["value"]["stringValue"] for a in out["resourceSpans"][0]["resource"]["attributes"]}
    assert resource == {"service.name": "unknown_service", "repliscope.epoch": UNKNOWN_EPOCH}
    doc["otherData"] = {"origin_ns": 5}
    with pytest.raises(RepliscopeError, match=r"otherData\.epoch_offset_ns must be an integer .* not None"):
        to_otlp_json(doc)
    doc["otherData"] = {"origin_ns": "5", "epoch_offset_ns": 1}
    with pytest.raises(RepliscopeError, match=r"otherData\.origin_ns must be an integer .* not '5'"):
        to_otlp_json(doc)
    with pytest.raises(RepliscopeError, match="not a Chrome trace: no 'traceEvents' list"):
        to_otlp_json({"resourceSpans": []})


def test_no_otel_variable_changes_the_file_or_sends_it(monkeypatch: pytest.MonkeyPatch) -> None:
    chrome = _traced().chrome_trace()
    quiet = to_otlp_json(chrome)
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_off")
    monkeypatch.setenv("OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT", "1")
    monkeypatch.setenv("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "2")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "host.name=secret-host")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "other")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")  # nothing listens: a send would fail
    assert to_otlp_json(chrome) == quiet
    assert "secret-host" not in json.dumps(quiet)


def test_without_the_sdk_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from repliscope.tracing import otlp_json

    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace", None)  # as if repliscope[tracing] were absent
    assert otlp_json.available() is False
    with pytest.raises(
        RepliscopeError, match=r"OTLP/JSON needs the OpenTelemetry SDK: pip install 'repliscope\[tracing\]'"
    ):
        to_otlp_json(_traced().chrome_trace())
