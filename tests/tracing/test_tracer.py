"""The leveled tracer: levels, no-op spans, Chrome trace nesting, OpenTelemetry export."""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import pytest

from repliscope.errors import RepliscopeError
from repliscope.tracing import LEVELS, NO_TRACER, current_tracer, make_tracer, use_tracer
from repliscope.tracing.chrome import from_chrome, nesting_errors, to_chrome
from repliscope.tracing.spans import SpanRecord, nest


def _one_of_each(tracer) -> None:
    with tracer.span("run", "application"), tracer.span("batch", "model", index=0):
        with tracer.span("preprocess/resize", "model"):
            pass
        with (
            tracer.span("inference", "model"),
            tracer.span("_blocks.0", "framework", layer="_blocks.0"),
            tracer.span("aten::conv2d", "library"),
        ):
            pass
        with tracer.span("postprocess/topk", "model"):
            pass


@pytest.mark.parametrize(
    ("level", "names"),
    [
        ("none", []),
        ("application", ["run"]),
        ("model", ["run", "batch", "preprocess/resize", "inference", "postprocess/topk"]),
        ("framework", ["run", "batch", "preprocess/resize", "inference", "_blocks.0", "postprocess/topk"]),
        (
            "library",
            ["run", "batch", "preprocess/resize", "inference", "_blocks.0", "aten::conv2d", "postprocess/topk"],
        ),
    ],
)
def test_spans_present_exactly_up_to_the_level(level: str, names: list[str]) -> None:
    tracer = make_tracer(level, otel=False)
    _one_of_each(tracer)
    events = [e for e in tracer.chrome_trace()["traceEvents"] if e["ph"] == "X"]
    assert [e["name"] for e in events] == names  # sorted by start: parents before children
    assert {e["cat"] for e in events} == set(LEVELS[1 : LEVELS.index(level) + 1])


def test_a_span_above_the_level_is_the_shared_no_op() -> None:
    tracer = make_tracer("application", otel=False)
    first = tracer.span("inference", "model", batch_size=8)
    assert first is tracer.span("q", "model") is tracer.span("k", "library") is NO_TRACER.span("run", "application")
    with first:
        pass
    assert tracer.spans == [] and NO_TRACER.spans == []
    assert tracer.instrument(object()) is first  # framework instrumentation is off at this level too


def test_unknown_levels_are_errors_naming_the_allowed_ones() -> None:
    with pytest.raises(
        RepliscopeError,
        match=r"unknown trace level 'layers' \(allowed: none, application, model, "
        r"framework, library\)",
    ):
        make_tracer("layers")
    with pytest.raises(RepliscopeError, match="unknown span level 'none'"):
        make_tracer("model", otel=False).span("x", "none")


def test_chrome_trace_parses_and_every_child_is_inside_its_parent_per_thread() -> None:
    tracer = make_tracer("framework", otel=False)

    def worker(k: int) -> None:
        for i in range(3):
            with tracer.span("batch", "model", index=i, worker=k), tracer.span("inference", "model"):
                for layer in ("a", "b"):
                    with tracer.span(layer, "framework", layer=layer):
                        pass

    with tracer.span("run", "application"):
        threads = [threading.Thread(target=worker, args=(k,), name=f"worker-{k}") for k in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    doc = json.loads(json.dumps(tracer.chrome_trace()))
    assert doc["displayTimeUnit"] == "ms" and doc["otherData"]["repliscope_trace_level"] == "framework"
    spans = from_chrome(doc)
    assert len(spans) == 1 + 2 * 3 * 4
    assert len({s.tid for s in spans}) == 3
    names = {e["args"]["name"] for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
    assert names == {"MainThread", "worker-0", "worker-1"}
    assert nesting_errors(doc) == []
    parents = nest(spans)
    for s, p in zip(spans, parents, strict=True):
        if s.name == "run":
            assert p == -1
            continue
        parent = spans[p]
        assert parent.start_ns <= s.start_ns and s.end_ns <= parent.end_ns
        expected = {"batch": "run", "inference": "batch", "a": "inference", "b": "inference"}[s.name]
        assert parent.name == expected
        assert parent.tid == s.tid or parent.name == "run"  # a worker's batches belong to the main thread's run


def test_nesting_errors_name_an_overlapping_pair() -> None:
    doc = {
        "traceEvents": [
            {"name": "p", "ph": "X", "ts": 0, "dur": 10, "tid": 1, "cat": "model"},
            {"name": "c", "ph": "X", "ts": 5, "dur": 10, "tid": 1, "cat": "framework"},
            {"name": "other thread", "ph": "X", "ts": 5, "dur": 10, "tid": 2, "cat": "model"},
        ]
    }
    assert nesting_errors(doc) == ["thread 1: 'c' [5000, 15000] ns overlaps 'p' [0, 10000] ns without being inside it"]


def test_nest_gives_the_innermost_container_and_breaks_exact_ties_by_recording_order() -> None:
    spans = [
        SpanRecord("child", "model", 10, 20, 1),
        SpanRecord("parent", "model", 10, 20, 1),
        SpanRecord("run", "application", 0, 100, 1),
        SpanRecord("late", "model", 50, 60, 2),
    ]
    assert nest(spans) == [1, 2, -1, 2]


def test_an_exact_tie_puts_the_outer_level_first_whatever_the_recording_order() -> None:
    # converted profiler events record a layer, then its single node with the very same times (ORT, OpenCV DNN):
    # the framework layer must be the parent, in nest() and in the Chrome file's order (viewers nest ties by it)
    spans = [
        SpanRecord("run", "application", 0, 100, 1),
        SpanRecord("_swish", "framework", 10, 20, 1),
        SpanRecord("hardtanh_nchwc", "library", 10, 20, 1),
        SpanRecord("x", "custom", 10, 20, 1),
    ]
    assert nest(spans) == [-1, 0, 1, 2]
    doc = to_chrome(spans, 0, thread_names={}, metadata={}, pid=7)
    assert [e["name"] for e in doc["traceEvents"] if e["ph"] == "X"] == ["run", "_swish", "hardtanh_nchwc", "x"]


def test_opentelemetry_spans_with_parents_and_epoch_times() -> None:
    memory = pytest.importorskip("opentelemetry.sdk.trace.export.in_memory_span_exporter")
    exporter = memory.InMemorySpanExporter()
    tracer = make_tracer("model", service="svc", otel_exporter=exporter)
    _one_of_each(tracer)  # the application span's end exports
    finished = {s.name: s for s in exporter.get_finished_spans()}
    assert sorted(finished) == ["batch", "inference", "postprocess/topk", "preprocess/resize", "run"]
    run, batch = finished["run"], finished["batch"]
    assert run.parent is None and run.resource.attributes["service.name"] == "svc"
    assert batch.parent.span_id == run.context.span_id
    assert finished["inference"].parent.span_id == batch.context.span_id
    assert batch.attributes["index"] == 0 and batch.attributes["repliscope.level"] == "model"
    assert {s.context.trace_id for s in finished.values()} == {run.context.trace_id}
    local = {s.name: s for s in tracer.spans}
    for name, span in finished.items():
        assert span.start_time == local[name].start_ns + tracer.epoch_offset_ns
        assert span.end_time == local[name].end_ns + tracer.epoch_offset_ns
    assert tracer.flush() == 0  # nothing new


def test_opentelemetry_parent_of_a_tied_node_is_its_layer_and_a_worker_batch_is_in_the_run() -> None:
    memory = pytest.importorskip("opentelemetry.sdk.trace.export.in_memory_span_exporter")
    exporter = memory.InMemorySpanExporter()
    tracer = make_tracer("library", otel_exporter=exporter)
    # recorded as the ORT converter does (layer, then its node with the same times), then the run; a worker
    # thread (tid 1 sorts before the main thread's 2) has a batch inside the run
    tracer.record("_swish", "framework", 10, 20, 2, {})
    tracer.record("hardtanh_nchwc", "library", 10, 20, 2, {})
    tracer.record("batch", "model", 30, 40, 1, {})
    tracer.record("run", "application", 0, 100, 2, {})
    assert tracer.flush() == 4
    made = {s.name: s for s in exporter.get_finished_spans()}
    assert made["hardtanh_nchwc"].parent.span_id == made["_swish"].context.span_id
    assert made["_swish"].parent.span_id == made["run"].context.span_id
    assert made["batch"].parent.span_id == made["run"].context.span_id


def test_otel_is_only_built_with_somewhere_to_send_spans(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http.trace_exporter")
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    assert make_tracer("model").otel is None
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    tracer = make_tracer("model")
    assert tracer.otel is not None and tracer.otel.exporters == ["OTLPSpanExporter(http/protobuf)"]


def test_use_tracer_sets_the_process_wide_current_tracer() -> None:
    tracer = make_tracer("model", otel=False)
    assert current_tracer() is NO_TRACER
    with use_tracer(tracer):
        seen: list[object] = []
        t = threading.Thread(target=lambda: seen.append(current_tracer()))
        t.start()
        t.join()
        assert seen == [tracer]
    assert current_tracer() is NO_TRACER


def test_importing_tracing_imports_no_framework() -> None:
    code = (
        "import sys, repliscope.tracing as t; t.NO_TRACER.span('a', 'model'); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('opentelemetry', 'torch', 'onnxruntime', 'onnx', 'cv2')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_write_chrome_trace(tmp_path) -> None:
    tracer = make_tracer("application", otel=False)
    with tracer.span("run", "application", command="evaluate"):
        pass
    path = tracer.write_chrome_trace(tmp_path / "sub" / "trace.json")
    events = json.loads(path.read_text())["traceEvents"]
    assert [(e["name"], e["args"]) for e in events if e["ph"] == "X"] == [("run", {"command": "evaluate"})]


def test_enabled_levels() -> None:
    tracer = make_tracer("model", otel=False)
    assert [tracer.enabled(level) for level in LEVELS] == [False, True, True, False, False]
    with pytest.raises(RepliscopeError, match="unknown trace level 'kernel'"):
        tracer.enabled("kernel")
