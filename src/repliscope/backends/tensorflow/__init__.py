"""The TensorFlow backend: SavedModels and frozen graphs, and SavedModel folders as re-implementations."""

from repliscope.backends import Backend, RuntimeEntry

BACKEND = Backend(
    "tensorflow",
    runtimes=(
        RuntimeEntry(
            "tensorflow",
            "repliscope.backends.tensorflow.runner:TensorflowRunner",
            source_formats=("tf_frozen_graph", "tf_saved_model"),
            distributions=("tensorflow", "tensorflow-cpu"),
            main=(("tensorflow", "tensorflow-cpu"),),
            instrument="repliscope.backends.tensorflow.tracing:profile_tensorflow",
        ),
    ),
    frameworks={"tensorflow": "tensorflow"},
    framework_distributions={"tensorflow": ("tensorflow", "tensorflow-cpu")},
    candidates={
        "savedmodel": "repliscope.backends.tensorflow.candidate:TensorflowCandidate",
        "tf_keras": "repliscope.backends.tensorflow.tf_keras_candidate:TfKerasCandidate",
    },
)
