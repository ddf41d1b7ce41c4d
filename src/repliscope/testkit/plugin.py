"""The pytest plugin: the ``model_check`` fixture, the ``repliscope_model`` marker and three options.

Registered through the ``pytest11`` entry point, so pytest loads it in every project where repliscope is
installed: it imports nothing heavy (no torch, onnxruntime or keras) until a check runs. Without the entry
point, load it with ``pytest -p repliscope.testkit.plugin`` or ``pytest_plugins = ["repliscope.testkit.plugin"]``
in a root conftest.py.

Tolerances resolve per test, first hit wins: ``@pytest.mark.repliscope_model(atol=..., rtol=...,
compile_backend=...)`` on the test (or its class / module), the command line (``--repliscope-atol``,
``--repliscope-rtol``, ``--repliscope-compile-backend``), the ini file (``repliscope_atol``, ``repliscope_rtol``,
``repliscope_compile_backend``), then the defaults 1e-5, 1e-4 and ``inductor``.
"""

from __future__ import annotations

from typing import Any

import pytest

from repliscope.testkit.kit import DEFAULT_ATOL, DEFAULT_COMPILE_BACKEND, DEFAULT_RTOL, ModelCheck

_SETTINGS = {
    "atol": (float, DEFAULT_ATOL, "absolute tolerance of the model checks that allow one (ONNX, torch.compile)"),
    "rtol": (float, DEFAULT_RTOL, "relative tolerance of the model checks that allow one (ONNX, torch.compile)"),
    "compile_backend": (
        str,
        DEFAULT_COMPILE_BACKEND,
        "torch.compile backend of model_check.compiled_matches_eager ('aot_eager' is fast)",
    ),
}
MARKER = "repliscope_model"


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register ``--repliscope-atol`` / ``-rtol`` / ``-compile-backend`` and their ini twins."""
    group = parser.getgroup("repliscope", "repliscope model test kit")
    for key, (kind, default, text) in _SETTINGS.items():
        group.addoption(
            f"--repliscope-{key.replace('_', '-')}",
            dest=f"repliscope_{key}",
            type=kind,
            default=None,
            help=f"{text} (default {default})",
        )
        parser.addini(f"repliscope_{key}", f"{text} (default {default})", default=None)


def pytest_configure(config: pytest.Config) -> None:
    """Declare the marker so ``--strict-markers`` accepts it."""
    config.addinivalue_line(
        "markers",
        f"{MARKER}(atol=None, rtol=None, compile_backend=None): per-test settings of the model_check fixture "
        "(repliscope model test kit)",
    )


@pytest.fixture
def model_check(request: pytest.FixtureRequest) -> ModelCheck:
    """The repliscope model checks (shape, gradients, state_dict / ONNX / Keras round trips, determinism,
    torch.compile), with this test's tolerances bound; see :class:`repliscope.testkit.ModelCheck`."""
    marker = request.node.get_closest_marker(MARKER)
    overrides: dict[str, Any] = dict(marker.kwargs) if marker else {}
    unknown = sorted(set(overrides) - set(_SETTINGS))
    if unknown:
        raise pytest.UsageError(
            f"@pytest.mark.{MARKER}: unknown argument(s) {', '.join(unknown)} (allowed: {', '.join(_SETTINGS)})"
        )
    values: dict[str, Any] = {}
    for key, (kind, default, _) in _SETTINGS.items():
        value = overrides.get(key)
        if value is None:
            value = request.config.getoption(f"repliscope_{key}")
        if value is None:
            value = request.config.getini(f"repliscope_{key}") or None
        values[key] = kind(value) if value is not None else default
    return ModelCheck(**values)
