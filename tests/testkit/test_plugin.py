"""The pytest plugin, run on generated test files with ``pytester``: fixture, marker, options, entry point."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest

import repliscope.testkit.plugin  # noqa: F401  (imported before pytester snapshots sys.modules, see below)

torch = pytest.importorskip("torch")

PLUGIN = "repliscope.testkit.plugin"


@pytest.fixture(scope="module", autouse=True)
def _frameworks_loaded_before_pytester() -> None:
    """pytester's in-process runs drop every module first imported during the run, and torch's extension and
    registries break when imported twice in one process: run one aot_eager compilation first, so everything the
    generated suites use (torch, torch._dynamo, parts of torch._inductor) is already loaded."""
    torch.compile(torch.nn.Linear(2, 2), backend="aot_eager")(torch.ones(1, 2))
    torch.compiler.reset()


def _plugin_args() -> list[str]:
    """``-p repliscope.testkit.plugin`` unless an installed ``pytest11`` entry point already loads it."""
    installed = any(ep.value == PLUGIN for ep in importlib.metadata.entry_points(group="pytest11"))
    return [] if installed else ["-p", PLUGIN]


USER_TESTS = """
import pytest
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self, with_unused_head=False):
        super().__init__()
        torch.manual_seed(0)
        self.body = nn.Linear(8, 4)
        if with_unused_head:
            self.head = nn.Linear(4, 2)

    def forward(self, x):
        return self.body(x)


X = torch.randn(3, 8)


def test_shape(model_check):
    assert model_check.output_shape(Net(), X, (3, 4)).shape == (3, 4)


def test_gradients(model_check):
    model_check.gradients_flow(Net(), X)


def test_gradients_unused_head(model_check):
    model_check.gradients_flow(Net(with_unused_head=True), X)


def test_state_dict(model_check):
    model_check.state_dict_roundtrip(Net(), X, Net)


def test_deterministic(model_check):
    model_check.deterministic(Net(), X, runs=3)


def test_compiled(model_check):
    model_check.compiled_matches_eager(Net(), X, backend="aot_eager")


@pytest.mark.repliscope_model(atol=0.5, compile_backend="aot_eager")
def test_marker_overrides(model_check):
    assert (model_check.atol, model_check.rtol, model_check.compile_backend) == (0.5, 2e-3, "aot_eager")
"""


def test_user_suite_passes_and_fails_with_names(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user=USER_TESTS)
    pytester.makeini("[pytest]\nrepliscope_rtol = 2e-3\n")
    result = pytester.runpytest(*_plugin_args(), "--strict-markers", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=6, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*test_gradients_unused_head*",
            "*assert_gradients_flow failed: 2 of 4 trainable parameters and 0 of 1 floating inputs*",
            "*parameter 'head.weight' (2, 4): no gradient*",
            "*parameter 'head.bias' (2,): no gradient*",
        ]
    )


def test_command_line_beats_ini_and_defaults(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_opts="""
        def test_values(model_check):
            assert (model_check.atol, model_check.rtol, model_check.compile_backend) == (0.25, 1e-4, "aot_eager")
    """
    )
    pytester.makeini("[pytest]\nrepliscope_atol = 0.125\n")
    result = pytester.runpytest(
        *_plugin_args(), "--repliscope-atol=0.25", "--repliscope-compile-backend", "aot_eager", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=1)


def test_unknown_marker_argument_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_bad="""
        import pytest

        @pytest.mark.repliscope_model(tolerance=1)
        def test_it(model_check):
            pass
    """
    )
    result = pytester.runpytest(*_plugin_args(), "-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*unknown argument(s) tolerance (allowed: atol, rtol, compile_backend)*"])


def test_help_lists_options_and_marker(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest(*_plugin_args(), "--help")
    result.stdout.fnmatch_lines(["*--repliscope-atol*", "*--repliscope-compile-backend*"])
    result = pytester.runpytest(*_plugin_args(), "--markers")
    result.stdout.fnmatch_lines(["*@pytest.mark.repliscope_model(atol=None, rtol=None, compile_backend=None)*"])


def test_loading_the_plugin_imports_no_framework() -> None:
    """pytest loads the plugin in every project that has repliscope installed: not even NumPy is imported."""
    code = (
        "import sys, repliscope.testkit.plugin, repliscope.testkit; "
        "print(sorted(m for m in ('torch', 'onnxruntime', 'onnx', 'keras', 'tensorflow', 'numpy', "
        "'repliscope.testkit.checks') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_entry_point_registration(pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A dist-info declaring the recommended entry point makes pytest autoload the plugin; ``-p`` on top of it
    and ``-p no:`` still behave (the entry point is named after the module, so neither clashes)."""
    site = tmp_path / "site"
    dist = site / "repliscope_entry_point_probe-0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: repliscope-entry-point-probe\nVersion: 0\n")
    (dist / "entry_points.txt").write_text(f"[pytest11]\n{PLUGIN} = {PLUGIN}\n")
    pytester.makepyfile(test_ep="def test_fixture(model_check):\n    assert model_check.atol == 1e-5\n")
    src = Path(__file__).resolve().parents[2] / "src"
    monkeypatch.setenv("PYTHONPATH", f"{site}:{src}")
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    pytester.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)
    pytester.runpytest_subprocess("-p", PLUGIN, "-p", "no:cacheprovider").assert_outcomes(passed=1)
    pytester.runpytest_subprocess("-p", f"no:{PLUGIN}", "-p", "no:cacheprovider").assert_outcomes(errors=1)


def test_the_readme_example_file_passes(pytester: pytest.Pytester) -> None:
    """examples/test_my_model.py, with the compile backend switched from the command line (Inductor's C++
    compilation takes ~10 s per new graph here; test_checks_torch covers it once); the ONNX and Keras tests are
    deselected (covered by test_checks_torch, test_lite0 and test_keras; Keras would be imported, then dropped)."""
    example = Path(__file__).resolve().parents[2] / "examples" / "test_my_model.py"
    pytester.makepyfile(test_my_model=example.read_text(encoding="utf-8"))
    result = pytester.runpytest(
        *_plugin_args(),
        "--repliscope-compile-backend=aot_eager",
        "-k",
        "not onnx and not keras",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(passed=10, deselected=2)
