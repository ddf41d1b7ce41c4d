"""``ModelCheck``: the helpers of :mod:`repliscope.testkit.checks` with the suite's default tolerances bound."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

DEFAULT_ATOL = 1e-5
DEFAULT_RTOL = 1e-4
DEFAULT_COMPILE_BACKEND = "inductor"


@dataclass(frozen=True)
class ModelCheck:
    """What the ``model_check`` fixture returns: one method per check, tolerances defaulting to the suite's.

    ``atol`` / ``rtol`` apply to the checks that allow a tolerance (ONNX round trip, compiled vs eager); the
    state_dict round trip and determinism are always bit-exact, the Keras round trip exact unless overridden.
    Every keyword argument of the underlying ``assert_*`` function can be passed through.

    The checks module (and NumPy) is imported on the first call, so loading the plugin stays cheap.
    """

    atol: float = DEFAULT_ATOL
    rtol: float = DEFAULT_RTOL
    compile_backend: str = DEFAULT_COMPILE_BACKEND

    def output_shape(self, model: Any, example_inputs: Any, expected_shape: Any, **kwargs: Any) -> Any:
        """Passthrough test, see :func:`~repliscope.testkit.checks.assert_output_shape`; returns the output."""
        __tracebackhide__ = True
        from repliscope.testkit import checks

        return checks.assert_output_shape(model, example_inputs, expected_shape, **kwargs)

    def gradients_flow(
        self, model: Any, example_inputs: Any, loss_fn: Callable[[Any], Any] | None = None, **kwargs: Any
    ) -> None:
        """Gradient test, see :func:`~repliscope.testkit.checks.assert_gradients_flow`."""
        __tracebackhide__ = True
        from repliscope.testkit import checks

        checks.assert_gradients_flow(model, example_inputs, loss_fn, **kwargs)

    def state_dict_roundtrip(self, model: Any, example_inputs: Any, factory: Callable[[], Any], **kwargs: Any) -> None:
        """Bit-exact state_dict round trip, see :func:`~repliscope.testkit.checks.assert_state_dict_roundtrip`."""
        __tracebackhide__ = True
        from repliscope.testkit import checks

        checks.assert_state_dict_roundtrip(model, example_inputs, factory, **kwargs)

    def onnx_roundtrip(self, model: Any, example_inputs: Any, **kwargs: Any) -> None:
        """torch vs onnxruntime, see :func:`~repliscope.testkit.checks.assert_onnx_roundtrip`."""
        __tracebackhide__ = True
        from repliscope.testkit import checks

        kwargs = {"atol": self.atol, "rtol": self.rtol, **kwargs}
        checks.assert_onnx_roundtrip(model, example_inputs, **kwargs)

    def keras_roundtrip(self, keras_model: Any, example_inputs: Any, **kwargs: Any) -> None:
        """Keras save / load, see :func:`~repliscope.testkit.checks.assert_keras_roundtrip`."""
        __tracebackhide__ = True
        from repliscope.testkit import checks

        checks.assert_keras_roundtrip(keras_model, example_inputs, **kwargs)

    def deterministic(self, model: Any, example_inputs: Any, runs: int = 2, **kwargs: Any) -> None:
        """Bit-identical repeated runs, see :func:`~repliscope.testkit.checks.assert_deterministic`."""
        __tracebackhide__ = True
        from repliscope.testkit import checks

        checks.assert_deterministic(model, example_inputs, runs, **kwargs)

    def compiled_matches_eager(self, model: Any, example_inputs: Any, **kwargs: Any) -> None:
        """torch.compile vs eager, see :func:`~repliscope.testkit.checks.assert_compiled_matches_eager`."""
        __tracebackhide__ = True
        from repliscope.testkit import checks

        kwargs = {"atol": self.atol, "rtol": self.rtol, "backend": self.compile_backend, **kwargs}
        checks.assert_compiled_matches_eager(model, example_inputs, **kwargs)
