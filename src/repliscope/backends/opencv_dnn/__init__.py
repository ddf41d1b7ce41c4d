"""The OpenCV DNN backend: ONNX graphs (and darknet sources with OpenCV < 5) on OpenCV's DNN module."""

from repliscope.backends import ONNX_SOURCES, Backend, RuntimeEntry

BACKEND = Backend(
    "opencv_dnn",
    runtimes=(
        RuntimeEntry(
            "opencv_dnn",
            "repliscope.backends.opencv_dnn.runner:OpenCVDnnRunner",
            source_formats=ONNX_SOURCES,
            distributions=("opencv-python-headless", "opencv-python", "onnx", "tf2onnx"),
            main=(("opencv-python-headless", "opencv-python"),),
            instrument="repliscope.backends.opencv_dnn.tracing:opencv_layer_timings",
        ),
    ),
)
