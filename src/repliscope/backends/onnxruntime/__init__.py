"""The ONNX backend: onnxruntime, the native runtime of ONNX sources (MTCNN's three nets too), and ONNX files as
re-implementations compared layer by layer."""

from repliscope.backends import ONNX_SOURCES, Backend, RuntimeEntry

BACKEND = Backend(
    "onnxruntime",
    runtimes=(
        RuntimeEntry(
            "onnxruntime",
            "repliscope.backends.onnxruntime.runner:OnnxRuntimeRunner",
            source_formats=ONNX_SOURCES,
            distributions=("onnxruntime", "onnx", "tf2onnx"),
            instrument="repliscope.backends.onnxruntime.tracing:profile_onnxruntime",
            candidate="repliscope.backends.onnxruntime.candidate:OnnxCandidate",
        ),
    ),
    frameworks={"onnx": "onnxruntime"},
    framework_distributions={"onnx": ("onnx",)},
    candidates={"onnx": "repliscope.backends.onnxruntime.candidate:OnnxCandidate"},
)
