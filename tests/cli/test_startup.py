"""Start-up of ``repliscope``: each command imports only its own module (cli/lazy_group.py), whichever way the
app is started (the script, ``python -m repliscope.cli.main``, an import); ``--help`` still lists every command."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

from repliscope.cli.main import COMMANDS

SCRIPT = str(Path(sys.executable).parent / "repliscope")
LAZY = sorted({module for module in COMMANDS.values() if module is not None})
MAIN_IMPORTS = ["repliscope.cli.cluster_cmd", "repliscope.cli.trace_cmd"]
"""Command modules main.py imports for the options evaluate/pitfalls share with them."""

PROBE = """
import runpy, sys
sys.argv = ["repliscope", *sys.argv[1:]]
code = 0
try:
    runpy.run_module("repliscope.cli.main", run_name="__main__", alter_sys=True)  # = python -m repliscope.cli.main
except SystemExit as exc:
    code = exc.code
print("exit", code)
print(sorted(name for name in sys.modules if name.startswith("repliscope.cli.") and name.endswith("_cmd")))
"""


def _run_module(*args: str) -> tuple[str, list[str]]:
    """The help ``python -m repliscope.cli.main ARGS`` prints, and the command modules it imported."""
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env={**os.environ, "COLUMNS": "200"},
    )
    *out, code, imported = proc.stdout.splitlines()
    assert code == "exit 0", proc.stdout + proc.stderr
    return "\n".join(out), ast.literal_eval(imported)


def test_importing_the_app_imports_no_lazy_command_module() -> None:
    probe = "import sys, repliscope.cli.main; print(*sorted(n for n in {lazy!r} if n in sys.modules))"
    for argv in (["repliscope", "runs", "list"], [SCRIPT, "--help"], ["pytest"]):
        proc = subprocess.run(
            [sys.executable, "-c", f"import sys; sys.argv = {argv!r}; " + probe.format(lazy=LAZY)],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        assert proc.stdout.split() == MAIN_IMPORTS, argv


RUNS_MODULES = ("repliscope.cli.runs_cmd", "repliscope.cli.runs_annotate_cmd", "repliscope.cli.runs_chart_cmd")
"""The runs group: runs_cmd, its annotation commands (tag, note, rename, delete, audit) and `runs chart`."""


def test_runs_help_imports_only_the_runs_module() -> None:
    out, imported = _run_module("runs", "--help")
    assert "Usage: python -m repliscope.cli.main runs [OPTIONS] COMMAND [ARGS]..." in out and "│ compare " in out
    assert imported == sorted([*RUNS_MODULES, *MAIN_IMPORTS])
    for absent in ("serve_cmd", "bench_cmd", "agent_cmd", "report_cmd", "stack_cmd"):
        assert f"repliscope.cli.{absent}" not in imported


def test_evaluate_help_imports_no_other_command_module() -> None:
    out, imported = _run_module("evaluate", "--help")
    assert "Usage: python -m repliscope.cli.main evaluate [OPTIONS] {manifest}" in out and "--batch-size" in out
    assert imported == MAIN_IMPORTS


def test_help_lists_every_command_and_imports_every_module() -> None:
    out, imported = _run_module("--help")
    for name in COMMANDS:
        assert f"\n│ {name} " in out, name
    assert set(LAZY) <= set(imported)


def test_evaluate_help_runs_from_the_script() -> None:
    proc = subprocess.run([SCRIPT, "evaluate", "--help"], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0
    assert "Usage: repliscope evaluate [OPTIONS]" in proc.stdout and "--batch-size" in proc.stdout


def test_an_unknown_command_from_the_script_suggests_close_names() -> None:
    proc = subprocess.run([SCRIPT, "agnet"], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2
    assert "No such command 'agnet'. Did you mean 'agent', 'agents', 'manifest'?" in proc.stderr


COMPLETE = """
import sys
from repliscope.cli import main
code = 0
try:
    main.app(prog_name="repliscope")  # the script's name: completion reads $_REPLISCOPE_COMPLETE
except SystemExit as exc:
    code = exc.code
print("exit", code)
print(sorted(name for name in sys.modules if name.startswith("repliscope.cli.") and name.endswith("_cmd")))
"""


def test_completion_loads_only_the_commands_that_match() -> None:
    """bash completion of ``repliscope ru`` offers ``runs`` and imports only its module."""
    env = {**os.environ, "_REPLISCOPE_COMPLETE": "complete_bash", "COMP_WORDS": "repliscope ru", "COMP_CWORD": "1"}
    proc = subprocess.run([sys.executable, "-c", COMPLETE], capture_output=True, text=True, timeout=120, env=env)
    *out, code, imported = proc.stdout.splitlines()
    assert out == ["runs"] and code == "exit 0", proc.stdout + proc.stderr
    assert ast.literal_eval(imported) == sorted([*RUNS_MODULES, *MAIN_IMPORTS])


def test_runs_list_formats_its_numbers_without_the_task_registry(tmp_path: Path) -> None:
    """``runs list`` writes top-1 as ``88.90 %`` (the house's rule) through repliscope.number_text: no module of
    repliscope.tasks is imported, so listing runs never loads the task registry."""
    from repliscope.evaluation.record import MetricValue
    from repliscope.store.repository import RunStore
    from tests.cli._records import pred, record

    db = f"sqlite:///{tmp_path / 'runs.db'}"
    top1 = MetricValue(name="top1", value=0.889, ci_low=0.868, ci_high=0.907, n=1000, successes=889)
    with RunStore(db) as store:
        store.save(record([pred("a.jpg", 1, [1, 2])]).model_copy(update={"metrics": [top1]}))
    modules = 'name.startswith("repliscope.cli.") and name.endswith("_cmd")'
    probe = PROBE.replace(modules, 'name.startswith("repliscope.t")')
    proc = subprocess.run(
        [sys.executable, "-c", probe, "runs", "list", "--db", db],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env={**os.environ, "COLUMNS": "200"},
    )
    *out, code, imported = proc.stdout.splitlines()
    assert code == "exit 0" and out[-1].rstrip().endswith(" 88.90 %"), proc.stdout + proc.stderr
    assert [m for m in ast.literal_eval(imported) if m.startswith("repliscope.tasks")] == []
