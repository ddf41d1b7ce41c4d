"""The TensorFlow Lite backend: LiteRT's interpreter, and .tflite files as re-implementations."""

from repliscope.backends import Backend, RuntimeEntry

BACKEND = Backend(
    "tflite",
    runtimes=(
        RuntimeEntry(
            "tflite",
            "repliscope.backends.tflite.runner:TfliteRunner",
            source_formats=("tflite",),
            distributions=("ai-edge-litert",),
            instrument="repliscope.tracing.instruments:staged_instrument",
        ),
    ),
    frameworks={"tflite": "tflite"},
    framework_distributions={"tflite": ("ai-edge-litert",)},
    candidates={"tflite": "repliscope.backends.tflite.candidate:TfliteCandidate"},
)
