"""The Keras backend: Keras 3 on its configured backend (or pinned to TensorFlow / JAX), and Keras ports as
re-implementations."""

from repliscope.backends import Backend, RuntimeEntry

BACKEND = Backend(
    "keras",
    runtimes=(
        RuntimeEntry(
            "keras",
            "repliscope.runtimes.keras_runner:KerasRunner",
            source_formats=("keras",),
            distributions=("keras", "tensorflow", "tensorflow-cpu", "jax", "jaxlib"),
        ),
        RuntimeEntry(
            "keras_tensorflow",
            "repliscope.runtimes.keras_runner:KerasTensorflowRunner",
            source_formats=("keras",),
            distributions=("keras", "tensorflow", "tensorflow-cpu"),
            main=(("keras",), ("tensorflow", "tensorflow-cpu")),
        ),
        RuntimeEntry(
            "keras_jax",
            "repliscope.runtimes.keras_runner:KerasJaxRunner",
            source_formats=("keras",),
            distributions=("keras", "jax", "jaxlib"),
            main=(("keras",), ("jax",)),
        ),
    ),
    frameworks={"keras": "keras"},
    framework_distributions={"keras": ("keras",)},
    candidates={"keras": "repliscope.diff.keras_candidate:KerasCandidate"},
)
