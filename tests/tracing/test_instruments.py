"""Framework / library instrumentation: ONNX Runtime's profiler on our clock, OpenCV DNN per-layer timings,
torch module hooks and torch.profiler ops."""

from __future__ import annotations

from pathlib import Path

import pytest

from repliscope.backends.onnxruntime.tracing import align_events
from repliscope.errors import RepliscopeError
from repliscope.runtimes import create_runner
from repliscope.tracing import make_tracer
from repliscope.tracing.chrome import nesting_errors
from repliscope.tracing.spans import SpanRecord
from tests.tracing._models import KEYS, NODES, batch, tiny_onnx


def _run(level: str, runtime: str, tmp_path: Path, n: int = 3):
    tracer = make_tracer(level, otel=False)
    runner = create_runner(runtime, tiny_onnx(tmp_path), threads=1, cache_dir=tmp_path)
    with tracer.span("run", "application"), tracer.instrument(runner):
        for _ in range(n):
            with tracer.span("inference", "model"):
                runner.infer(batch())
    return tracer


def _inside(child: SpanRecord, parent: SpanRecord) -> bool:
    return parent.start_ns <= child.start_ns and child.end_ns <= parent.end_ns


def test_align_events_moves_ort_times_onto_the_perf_counter_clock() -> None:
    events = [
        {"ph": "X", "ts": 1500, "dur": 250, "name": "model_run", "cat": "Session"},
        {"ph": "i", "ts": 0, "name": "ignored"},
    ]
    ((event, start, end),) = align_events(events, start_epoch_ns=10_000_000, epoch_offset_ns=4_000_000)
    assert event["name"] == "model_run" and (start, end) == (7_500_000, 7_750_000)


def test_onnxruntime_profiler_events_are_aligned_with_our_spans(tmp_path: Path) -> None:
    tracer = _run("framework", "onnxruntime", tmp_path)
    runs = [s for s in tracer.spans if s.name == "onnxruntime.run"]
    ours = [s for s in tracer.spans if s.name == "inference"]
    assert len(runs) == len(ours) == 3
    for ort_run, inference in zip(sorted(runs, key=lambda s: s.start_ns), ours, strict=True):
        assert _inside(ort_run, inference)  # ORT's run, converted, lies within the span we timed around it
        assert ort_run.tid == inference.tid
        # and covers most of it: the clocks agree to well under the call's overhead
        assert ort_run.duration_ns > 0.2 * inference.duration_ns
    layers = [s for s in tracer.spans if s.level == "framework" and "layer" in s.attributes]
    assert [s.name for s in layers] == KEYS * 3
    assert [s.attributes["op_type"] for s in layers[:4]] == ["Mul", "Relu", "Sigmoid", "Relu"]
    assert not any(s.level == "library" for s in tracer.spans)
    assert nesting_errors(tracer.chrome_trace()) == []
    assert tracer.chrome_trace()["otherData"]["onnxruntime_profiler"][0]["runs"] == 3


def test_onnxruntime_library_level_adds_node_kernels(tmp_path: Path) -> None:
    tracer = _run("library", "onnxruntime", tmp_path, n=1)
    kernels = [s for s in tracer.spans if s.level == "library"]
    assert [(s.name, s.attributes["layer"]) for s in kernels] == [
        (n, k) for (n, _, _), k in zip(NODES, KEYS, strict=True)
    ]
    assert nesting_errors(tracer.chrome_trace()) == []


def test_opencv_layers_are_laid_end_to_end_inside_the_forward(tmp_path: Path) -> None:
    pytest.importorskip("cv2")
    tracer = _run("library", "opencv_dnn", tmp_path, n=2)
    forwards = [s for s in tracer.spans if s.name == "opencv_dnn.forward"]
    layers = [s for s in tracer.spans if s.level == "framework" and "layer" in s.attributes]
    assert len(forwards) == 2 and [s.name for s in layers] == KEYS * 2
    assert layers[0].start_ns == forwards[0].start_ns and layers[0].attributes["estimated_start"] is True
    assert [a.end_ns for a in layers[:3]] == [b.start_ns for b in layers[1:4]]
    assert all(_inside(s, forwards[0]) for s in layers[:4])
    assert [s.attributes["op_type"] for s in layers[:4]][1] == "ReLU"
    assert nesting_errors(tracer.chrome_trace()) == []


def test_torch_module_hooks_and_profiler_ops(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3)
            self.act = torch.nn.ReLU()
            self.head = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4 * 6 * 6, 5))

        def forward(self, x):
            return self.head(self.act(self.act(self.conv(x))))

    class FakeRunner:
        name = "torch"
        module = Net().eval()

    for level, library in (("framework", False), ("library", True)):
        tracer = make_tracer(level, otel=False)
        with tracer.instrument(FakeRunner()), tracer.span("inference", "model"), torch.inference_mode():
            FakeRunner.module(torch.zeros(1, 3, 8, 8))
        layers = [s for s in tracer.spans if s.level == "framework"]
        assert [s.attributes["layer"] for s in layers] == ["conv", "act", "act#2", "head.0", "head.1", "head", ""]
        assert [s.attributes["leaf"] for s in layers] == [True, True, True, True, True, False, False]
        assert layers[-1].name == "<model>" and layers[-1].attributes["op_type"] == "Net"
        ops = [s for s in tracer.spans if s.level == "library"]
        assert bool(ops) is library
        if library:
            conv = next(s for s in ops if s.name == "aten::conv2d")
            # kineto's epoch times, moved onto our clock, fall inside the conv module's span (same thread)
            assert _inside(conv, layers[0]) and conv.tid == layers[0].tid
            assert nesting_errors(tracer.chrome_trace()) == []
    assert FakeRunner.module._forward_hooks == {}  # hooks removed on exit


def test_a_runtime_without_instrumentation_is_an_error() -> None:
    class Other:
        name = "keras_jax"

    with pytest.raises(
        RepliscopeError,
        match=r"no framework-level tracing for runtime 'keras_jax' \(allowed: "
        r"darknet, onnxruntime, opencv_dnn, tensorflow, tflite, torch\)",
    ):
        make_tracer("framework", otel=False).instrument(Other()).__enter__()


def test_torch_library_level_records_one_thread_and_says_so() -> None:
    torch = pytest.importorskip("torch")
    import threading

    class FakeRunner:
        name = "torch"
        module = torch.nn.Sequential(torch.nn.ReLU()).eval()

    tracer = make_tracer("library", otel=False)
    with tracer.instrument(FakeRunner()):
        with pytest.raises(RepliscopeError, match="records the ops of one thread"):
            tracer.instrument(FakeRunner()).__enter__()

        def infer() -> None:
            with tracer.span("inference", "model"), torch.inference_mode():
                FakeRunner.module(torch.zeros(2))

        worker = threading.Thread(target=infer)
        worker.start()
        worker.join()
        infer()
    (note,) = tracer.notes["torch_profiler"]
    assert note["thread"] == threading.get_native_id() and note["threads_without_ops"] == [worker.native_id]
    ops = [s for s in tracer.spans if s.level == "library"]
    assert ops and {s.tid for s in ops} == {threading.get_native_id()}
    assert "torch.profiler" not in tracer.active


def test_onnxruntime_and_opencv_traces_of_one_model_align_by_key(tmp_path: Path) -> None:
    pytest.importorskip("cv2")
    from repliscope.tracing.compare import compare_layers
    from repliscope.tracing.summary import layer_times

    for side in ("a", "b"):
        (tmp_path / side).mkdir()
    ort = layer_times(_run("framework", "onnxruntime", tmp_path / "a").spans)
    cv = layer_times(_run("framework", "opencv_dnn", tmp_path / "b").spans)
    c = compare_layers(ort, cv)
    assert (c.a_source, c.b_source, c.mapping) == ("onnxruntime", "opencv_dnn", "by key")
    assert [x.key for x in c.layers] == KEYS and c.only_a == c.only_b == []
    assert all(x.a_ms > 0 and x.b_ms > 0 for x in c.layers)


def test_an_mtcnn_cascade_is_refused_at_the_framework_level() -> None:
    class Artifact:
        format = "mtcnn_cascade"

    class Cascade:
        name = "onnxruntime"
        artifact = Artifact()

    with pytest.raises(
        RepliscopeError,
        match=r"^no framework-level tracing of an mtcnn_cascade source on "
        r"'onnxruntime': .* use --trace-level model",
    ):
        make_tracer("framework", otel=False).instrument(Cascade()).__enter__()
