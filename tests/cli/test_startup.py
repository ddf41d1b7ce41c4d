"""Start-up of `repliscope evaluate`: the script running one of main's own commands does not import the other
commands' modules; every other entry (help, other commands, python -m, tests) registers them all."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from repliscope.cli.main import _runs_own_command

SCRIPT = str(Path(sys.executable).parent / "repliscope")
PROBE = (
    "import sys; sys.argv = {argv!r}; import repliscope.cli.main as m; "
    "print(sorted(n for n in ('repliscope.cli.diff_cmd', 'repliscope.cli.serve_cmd', 'repliscope.cli.convert_cmd') "
    "if n in sys.modules)); print(sorted(c.name for c in m.app.registered_commands if c.name) or "
    "sorted(c.callback.__name__ for c in m.app.registered_commands))"
)


def test_only_the_script_running_evaluate_or_pitfalls_skips_the_other_commands() -> None:
    assert _runs_own_command([SCRIPT, "evaluate", "m.yaml"])
    assert _runs_own_command(["repliscope", "pitfalls", "--list"])
    assert not _runs_own_command([SCRIPT, "runs", "list"])
    assert not _runs_own_command([SCRIPT, "--help"])
    assert not _runs_own_command([SCRIPT])
    assert not _runs_own_command(["/usr/lib/python3/pytest", "evaluate"])


def _imported(argv: list[str]) -> list[str]:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE.format(argv=argv)], capture_output=True, text=True, timeout=120, check=True
    )
    return proc.stdout.splitlines()


def test_evaluate_imports_no_other_command_module() -> None:
    assert _imported([SCRIPT, "evaluate", "--help"]) == ["[]", "['evaluate', 'pitfalls']"]
    loaded, _ = _imported([SCRIPT, "runs", "--help"])
    assert loaded == "['repliscope.cli.convert_cmd', 'repliscope.cli.diff_cmd', 'repliscope.cli.serve_cmd']"


def test_evaluate_help_runs_from_the_script() -> None:
    proc = subprocess.run([SCRIPT, "evaluate", "--help"], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0
    assert "Usage: repliscope evaluate [OPTIONS]" in proc.stdout and "--batch-size" in proc.stdout
