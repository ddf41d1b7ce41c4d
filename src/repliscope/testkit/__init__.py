"""Model test kit: unit tests for a model that any pytest suite can call (see README_SECTION.md).

``repliscope.testkit.checks`` holds the framework helpers (plain functions raising ``AssertionError``);
``repliscope.testkit.plugin`` is the pytest plugin (the ``model_check`` fixture and the ``repliscope_model``
marker), registered through the ``pytest11`` entry point. Nothing here imports torch, onnxruntime or keras until
a check runs.
"""

from repliscope.testkit.checks import (
    assert_compiled_matches_eager,
    assert_deterministic,
    assert_gradients_flow,
    assert_keras_roundtrip,
    assert_onnx_roundtrip,
    assert_output_shape,
    assert_state_dict_roundtrip,
)
from repliscope.testkit.kit import ModelCheck

__all__ = [
    "ModelCheck",
    "assert_compiled_matches_eager",
    "assert_deterministic",
    "assert_gradients_flow",
    "assert_keras_roundtrip",
    "assert_onnx_roundtrip",
    "assert_output_shape",
    "assert_state_dict_roundtrip",
]
