"""Model test kit: unit tests for a model that any pytest suite can call (see README_SECTION.md).

``repliscope.testkit.checks`` holds the framework helpers (plain functions raising ``AssertionError``);
``repliscope.testkit.plugin`` is the pytest plugin (the ``model_check`` fixture and the ``repliscope_model``
marker), registered through the ``pytest11`` entry point. The names below are imported on first use, and torch,
onnxruntime and keras only when a check runs, so pytest loading the plugin costs next to nothing.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

_HOMES = {
    "ModelCheck": "repliscope.testkit.kit",
    "assert_compiled_matches_eager": "repliscope.testkit.checks",
    "assert_deterministic": "repliscope.testkit.checks",
    "assert_gradients_flow": "repliscope.testkit.checks",
    "assert_keras_roundtrip": "repliscope.testkit.checks",
    "assert_onnx_roundtrip": "repliscope.testkit.checks",
    "assert_output_shape": "repliscope.testkit.checks",
    "assert_state_dict_roundtrip": "repliscope.testkit.checks",
}
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


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'repliscope.testkit' has no attribute '{name}'")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOMES])
