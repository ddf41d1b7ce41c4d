"""The lazy command table of ``repliscope`` (repliscope.cli.main.COMMANDS) and its group (cli/lazy_group.py): the
table names exactly the commands the command modules register, each lazily built command is the one an eagerly
registered app builds, and help, suggestions and exit codes are those of an eager app."""

from __future__ import annotations

import importlib
import pkgutil
import sys
import textwrap
from pathlib import Path
from typing import Any, ClassVar

import pytest
import typer
import typer.main
from typer.testing import CliRunner

import repliscope.cli
from repliscope.cli.lazy_group import LazyCommands, LazyGroup
from repliscope.cli.main import COMMANDS, app

runner = CliRunner(env={"COLUMNS": "200"})


def _command_modules() -> list[str]:
    """Every module of repliscope.cli with a ``register(app)`` (found on disk, so a new one is not forgotten)."""
    names = []
    for info in pkgutil.iter_modules(repliscope.cli.__path__, "repliscope.cli."):
        if callable(getattr(importlib.import_module(info.name), "register", None)):
            names.append(info.name)
    return names


def _registered_by(*modules: str) -> dict[str, Any]:
    """The click commands of a Typer into which ``modules`` are registered eagerly (the old way)."""
    eager = typer.Typer()
    for module in modules:
        importlib.import_module(module).register(eager)
    return dict(typer.main.get_group(eager).commands)


def _own_commands() -> list[str]:
    return sorted((c.name or c.callback.__name__) for c in app.registered_commands if c.callback is not None)


def test_the_command_modules_are_the_expected_ones() -> None:
    assert _command_modules() == [
        f"repliscope.cli.{name}"
        for name in (
            "agent_cmd",
            "bench_cmd",
            "cluster_cmd",
            "convert_cmd",
            "db_cmd",
            "diff_cmd",
            "diffs_cmd",
            "manifest_cmd",
            "report_cmd",
            "runs_cmd",
            "serve_cmd",
            "stack_cmd",
            "token_cmd",
            "trace_cmd",
            "units_cmd",
        )
    ]


def test_the_table_names_exactly_what_the_modules_register() -> None:
    eager = _registered_by(*_command_modules())
    assert sorted(eager) == sorted(name for name, module in COMMANDS.items() if module is not None)
    assert len(COMMANDS) == 19
    # the commands defined in main.py itself are the table's None entries
    assert _own_commands() == ["evaluate", "pitfalls"]
    assert sorted(name for name, module in COMMANDS.items() if module is None) == ["evaluate", "pitfalls"]
    # each name's module registers it
    for name, module in COMMANDS.items():
        if module is not None:
            assert name in _registered_by(module), (name, module)


def test_every_lazy_command_is_the_one_an_eager_app_builds() -> None:
    eager = _registered_by(*_command_modules())
    root = typer.main.get_group(app)
    ctx = root.context_class(root, info_name="repliscope")
    assert root.list_commands(ctx) == list(COMMANDS)
    for name in COMMANDS:
        lazy = root.get_command(ctx, name)
        assert lazy is not None, name
        reference = eager.get(name) or typer.main.get_group(app).commands[name]
        assert type(lazy) is type(reference), name
        assert lazy.help == reference.help, name
        assert [p.name for p in lazy.params] == [p.name for p in reference.params], name
        assert sorted(getattr(lazy, "commands", {})) == sorted(getattr(reference, "commands", {})), name


def test_help_lists_every_command_in_the_table_order() -> None:
    res = runner.invoke(app, ["--help"])
    assert res.exit_code == 0, res.output
    rows = [line.strip("│ ").split()[0] for line in res.output.splitlines() if line.startswith("│ ") and "  " in line]
    listed = [row for row in rows if row in COMMANDS]
    assert listed == list(COMMANDS)
    assert "│ runs" in res.output and "Stored evaluation records." in res.output


def test_unknown_command_suggests_lazy_names() -> None:
    res = runner.invoke(app, ["stak"])
    assert res.exit_code == 2
    assert "No such command 'stak'. Did you mean 'stack', 'stacks'?" in res.output
    res = runner.invoke(app, ["rns"])
    assert res.exit_code == 2 and "No such command 'rns'. Did you mean 'runs'?" in res.output
    res = runner.invoke(app, ["runs", "lst"])
    assert res.exit_code == 2 and "No such command 'lst'. Did you mean 'list'?" in res.output


def test_a_sub_command_help_loads_only_its_module(capsys: pytest.CaptureFixture[str]) -> None:
    root = typer.main.get_group(app)
    assert isinstance(root.commands, LazyCommands)
    assert root.commands.loaded() == ["evaluate", "pitfalls"]
    assert "runs" in root.commands and "nope" not in root.commands and len(root.commands) == 19
    assert root.commands.loaded() == ["evaluate", "pitfalls"]  # membership and len import nothing
    assert root.main(["runs", "--help"], prog_name="repliscope", standalone_mode=False) == 0
    out = capsys.readouterr().out
    assert "Usage: repliscope runs [OPTIONS] COMMAND [ARGS]..." in out and "│ compare " in out
    assert root.commands.loaded() == ["evaluate", "pitfalls", "runs"]


# ------------------------------------------------------------------ the group class on a throw-away command module

PLUGIN = """
import typer

from repliscope.errors import RepliscopeError

tools = typer.Typer(help="Some tools.")


@tools.command("fine")
def fine() -> None:
    print("fine ran")


@tools.command("bad-input")
def bad_input() -> None:
    raise RepliscopeError("no such thing")


def register(app: typer.Typer) -> None:
    app.add_typer(tools, name="tools")
    app.command("crash")(crash)


def crash() -> None:
    \"\"\"Always crashes.\"\"\"
    raise ValueError("deliberately broken")
"""


@pytest.fixture()
def plugin_app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> typer.Typer:
    (tmp_path / "lazy_plugin_cmd.py").write_text(textwrap.dedent(PLUGIN), encoding="utf-8")
    (tmp_path / "lazy_broken_cmd.py").write_text("raise ImportError('a missing dependency')\n", encoding="utf-8")
    (tmp_path / "lazy_silent_cmd.py").write_text("def register(app):\n    pass\n", encoding="utf-8")
    (tmp_path / "lazy_keyerror_cmd.py").write_text(
        "import os\nHOME = os.environ['NO_SUCH_VARIABLE']\n", encoding="utf-8"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("REPLISCOPE_LOG_DIR", str(tmp_path / "logs"))
    monkeypatch.delenv("NO_SUCH_VARIABLE", raising=False)
    for name in ("lazy_plugin_cmd", "lazy_broken_cmd", "lazy_silent_cmd", "lazy_keyerror_cmd"):
        monkeypatch.delitem(sys.modules, name, raising=False)

    class Group(LazyGroup):
        lazy_commands: ClassVar[dict[str, str | None]] = {
            "own": None,
            "tools": "lazy_plugin_cmd",
            "crash": "lazy_plugin_cmd",
            "broken": "lazy_broken_cmd",
            "silent": "lazy_silent_cmd",
            "keyerror": "lazy_keyerror_cmd",
        }

    plugin = typer.Typer(cls=Group, no_args_is_help=True)

    @plugin.callback()  # one own command and no sub-typer: typer builds a group only with a callback
    def root() -> None:
        pass

    @plugin.command()
    def own() -> None:
        print("own ran")

    return plugin


def test_the_group_imports_a_module_when_its_command_runs(plugin_app: typer.Typer) -> None:
    assert runner.invoke(plugin_app, ["own"]).output == "own ran\n"
    assert "lazy_plugin_cmd" not in sys.modules
    res = runner.invoke(plugin_app, ["tools", "fine"])
    assert (res.exit_code, res.output) == (0, "fine ran\n")
    assert "lazy_plugin_cmd" in sys.modules and "lazy_broken_cmd" not in sys.modules


def test_the_guard_applies_to_lazy_commands(plugin_app: typer.Typer) -> None:
    res = runner.invoke(plugin_app, ["tools", "bad-input"])
    assert (res.exit_code, res.stderr) == (2, "error: no such thing\n")
    res = runner.invoke(plugin_app, ["crash"])
    assert res.exit_code == 3
    assert res.stderr.startswith("repliscope hit an internal error: ValueError: deliberately broken.")
    res = runner.invoke(plugin_app, ["broken"])  # a module that cannot be imported: an internal error, no traceback
    assert res.exit_code == 3
    assert res.stderr.startswith("repliscope hit an internal error: ImportError: a missing dependency.")
    res = runner.invoke(plugin_app, ["silent"])  # a table entry its module does not register
    assert res.exit_code == 3
    assert "RuntimeError: lazy_silent_cmd.register() does not add the command 'silent' (it adds [])" in res.stderr
    res = runner.invoke(plugin_app, ["keyerror"])  # a KeyError inside the module is a crash, not "No such command"
    assert res.exit_code == 3 and "No such command" not in res.output + res.stderr
    assert res.stderr.startswith("repliscope hit an internal error: KeyError: 'NO_SUCH_VARIABLE'.")


def test_the_table_must_name_the_apps_own_commands(plugin_app: typer.Typer) -> None:
    class Forgetful(LazyGroup):
        lazy_commands: ClassVar[dict[str, str | None]] = {"tools": "lazy_plugin_cmd"}

    forgetful = typer.Typer(cls=Forgetful)

    @forgetful.command()
    def own() -> None:
        pass

    @forgetful.command()
    def other() -> None:
        pass

    with pytest.raises(RuntimeError, match=r"own commands \[\] differ from the commands defined on the app"):
        typer.main.get_command(forgetful)
