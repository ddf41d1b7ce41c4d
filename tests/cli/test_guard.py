"""The top-level guard: an unexpected exception is a short message + a saved traceback file (exit 3), never a
traceback on the screen; Ctrl-C is exit 130; a RepliscopeError that escapes a command is exit 2."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from repliscope.cli.guard import LOG_DIR_ENV, save_traceback
from repliscope.cli.main import app
from repliscope.errors import DatasetError
from repliscope.store.repository import RunStore
from tests.conftest import REPO

runner = CliRunner(env={"COLUMNS": "200"})
SAVED = re.compile(
    r"^repliscope hit an internal error: RuntimeError: boom, deliberately broken\. The traceback is "
    r"saved in (?P<path>\S+\.txt); please report it\.$"
)


def _broken(*args: object, **kwargs: object) -> None:
    raise RuntimeError("boom, deliberately broken")


def test_internal_error_is_a_message_and_a_saved_traceback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(LOG_DIR_ENV, str(tmp_path / "logs"))
    monkeypatch.setattr(RunStore, "list", _broken)
    res = runner.invoke(app, ["runs", "list"])
    assert res.exit_code == 3
    assert "Traceback" not in res.stderr and "Traceback" not in res.stdout
    match = SAVED.match(res.stderr.strip())
    assert match, res.stderr
    saved = Path(match["path"])
    assert saved.parent == tmp_path / "logs" and saved.name.startswith("crash-")
    text = saved.read_text()
    assert text.startswith("repliscope 0.1.0 internal error, ")
    assert "Traceback (most recent call last):" in text and "in _broken" in text
    assert text.rstrip().endswith("RuntimeError: boom, deliberately broken")


def test_internal_error_in_a_real_subprocess(tmp_path: Path) -> None:
    """The installed script: the core is broken from a sitecustomize module on PYTHONPATH."""
    script = Path(sys.executable).parent / "repliscope"
    if not script.is_file():
        pytest.skip(f"{script} is not installed")
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "from repliscope.store.repository import RunStore\n\n"
        "def _broken(*args, **kwargs):\n    raise RuntimeError('boom, deliberately broken')\n\n"
        "RunStore.list = _broken\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": str(hook),
        LOG_DIR_ENV: str(tmp_path / "logs"),
        "REPLISCOPE_DB": f"sqlite:///{tmp_path / 'runs.db'}",
    }
    proc = subprocess.run([str(script), "runs", "list"], env=env, capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 3, proc.stderr
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout
    match = SAVED.match(proc.stderr.strip())
    assert match, proc.stderr
    text = Path(match["path"]).read_text()
    assert "Traceback (most recent call last):" in text and "command: " in text and "runs list" in text


def test_keyboard_interrupt_exits_130(monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(RunStore, "list", interrupted)
    res = runner.invoke(app, ["runs", "list"])
    assert res.exit_code == 130
    assert res.stderr.strip() == "repliscope: interrupted"


def test_escaped_repliscope_error_is_bad_input(monkeypatch: pytest.MonkeyPatch) -> None:
    from repliscope.cli import runs_cmd

    def bad(*args: object) -> None:
        raise DatasetError("the dataset is gone")

    monkeypatch.setattr(runs_cmd, "run_cells", bad)
    runs_cmd_store = RunStore(None)
    from tests.cli._records import pred, record

    runs_cmd_store.save(record([pred("a", 1, [1])]))
    res = runner.invoke(app, ["runs", "list"])
    assert res.exit_code == 2 and res.stderr == "error: the dataset is gone\n"


def test_os_error_on_a_named_file_is_bad_input(monkeypatch: pytest.MonkeyPatch) -> None:
    def denied(*args: object, **kwargs: object) -> None:
        raise PermissionError(13, "Permission denied", "/srv/runs.db")

    monkeypatch.setattr(RunStore, "list", denied)
    res = runner.invoke(app, ["runs", "list"])
    assert res.exit_code == 2 and res.stderr == "error: Permission denied: /srv/runs.db\n"


def test_traceback_falls_back_to_the_temp_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    monkeypatch.setenv(LOG_DIR_ENV, str(blocker / "logs"))
    try:
        raise ValueError("inner")
    except ValueError as exc:
        path = save_traceback(exc, ["repliscope", "evaluate", "m.yaml"])
    try:
        assert path.parent == Path(tempfile.gettempdir())
        text = path.read_text()
        assert "command: repliscope evaluate m.yaml" in text and text.rstrip().endswith("ValueError: inner")
    finally:
        path.unlink()


def test_usage_errors_keep_their_message_and_exit_2() -> None:
    res = runner.invoke(app, ["runs", "list", "--limit", "zero"])
    assert res.exit_code == 2 and "Invalid value for '--limit'" in res.output and "internal error" not in res.output
