"""The Keras backend: Keras 3 on its configured backend (or pinned to TensorFlow / JAX), and Keras ports as
re-implementations."""

from repliscope.backends import Backend, RuntimeEntry

BACKEND = Backend(
    "keras",
    runtimes=(
        RuntimeEntry(
            "keras",
            "repliscope.backends.keras.runner:KerasRunner",
            source_formats=("keras",),
            distributions=("keras", "tensorflow", "tensorflow-cpu", "jax", "jaxlib"),
        ),
        RuntimeEntry(
            "keras_tensorflow",
            "repliscope.backends.keras.runner:KerasTensorflowRunner",
            source_formats=("keras",),
            distributions=("keras", "tensorflow", "tensorflow-cpu"),
            main=(("keras",), ("tensorflow", "tensorflow-cpu")),
        ),
        RuntimeEntry(
            "keras_jax",
            "repliscope.backends.keras.runner:KerasJaxRunner",
            source_formats=("keras",),
            distributions=("keras", "jax", "jaxlib"),
            main=(("keras",), ("jax",)),
        ),
    ),
    frameworks={"keras": "keras"},
    framework_distributions={"keras": ("keras",)},
    candidates={"keras": "repliscope.backends.keras.candidate:KerasCandidate"},
)
