"""The Darknet backend: the ORIGINAL C implementation (Debian's ``libdarknet.so``, pjreddie 2018) through ctypes,
the native runtime of darknet sources. ``lib``: the library and the structs it exchanges (``structs``: the exact
layouts of ``struct layer`` / ``struct network``); ``runner``: :class:`DarknetRunner` (every layer's output by its
Darknet name); ``layer_loop``: ``network_predict``'s calls layer by layer; ``tracing``: one span per layer;
``reference``: Darknet's own letterbox and detections, for pinning the ops."""

from repliscope.backends import Backend, RuntimeEntry

BACKEND = Backend(
    "darknet",
    runtimes=(
        RuntimeEntry(
            "darknet",
            "repliscope.backends.darknet.runner:DarknetRunner",
            source_formats=("darknet",),
            system_library="Debian package 'darknet' (libdarknet.so through ctypes)",
            instrument="repliscope.backends.darknet.tracing:darknet_layer_timings",
        ),
    ),
    frameworks={"darknet": "darknet"},
    # repliscope's conversions compared with libdarknet layer by layer (--runtimes darknet onnxruntime|keras --layers)
    candidates={
        "darknet_onnx": "repliscope.convert.darknet_verify:DarknetOnnxCandidate",
        "darknet_keras": "repliscope.convert.darknet_verify:DarknetKerasCandidate",
    },
)
