"""The command line's help is made from the registries (issue 35, "Importers and help"): every ``--runtime``
lists every registered runtime (before: 3 of 9 in some), every ``--dataset`` every registered dataset and
``NAME:PATH`` scheme (before: no ``coco:`` / ``voc_seg:``), ``report`` every kind of id it resolves (diffs
included) and ``convert`` every route it takes. Static copies are compared with their registry here."""

from __future__ import annotations

import typer.main
from typer.core import TyperCommand, TyperGroup, TyperOption

from repliscope.backends import CONVERSIONS, runtime_names
from repliscope.cli.common import DATASET_NAMES, DATASET_SCHEMES, dataset_help
from repliscope.cli.main import app
from repliscope.datasets.resolve import bare_names, path_names
from repliscope.store.diffs import DIFF_KINDS


def _commands() -> dict[str, TyperCommand]:
    group = typer.main.get_command(app)
    assert isinstance(group, TyperGroup)
    ctx = typer.Context(group)
    out: dict[str, TyperCommand] = {}
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        subs = command.commands.items() if isinstance(command, TyperGroup) else [(None, command)]
        for sub_name, sub in subs:
            assert isinstance(sub, TyperCommand)
            out[name if sub_name is None else f"{name} {sub_name}"] = sub
    return out


COMMANDS = _commands()


def _options(flag: str) -> dict[str, str]:
    """Command -> the help of its option ``flag``."""
    found = {}
    for name, command in COMMANDS.items():
        for p in command.params:
            if isinstance(p, TyperOption) and flag in p.opts:
                found[name] = p.help or ""
    return found


def test_the_static_dataset_words_are_the_registry() -> None:
    assert sorted(DATASET_NAMES) == bare_names()
    assert sorted(n for n, _ in DATASET_SCHEMES) == path_names()


def test_every_runtime_option_lists_every_registered_runtime() -> None:
    every = " | ".join(runtime_names())
    assert len(runtime_names()) == 9
    helps = {**_options("--runtime"), **_options("--runtimes"), **_options("--model-runtime")}
    assert set(helps) == {"evaluate", "pitfalls", "bench", "stacks", "diff", "runs chart"}
    missing = {name: h for name, h in helps.items() if every not in h}
    assert missing == {}
    assert every in _options("--model-runtime")["diff"]


def test_every_dataset_option_names_every_dataset_and_scheme() -> None:
    helps = _options("--dataset")
    assert {"evaluate", "pitfalls", "bench", "stacks", "diff", "convert"} <= set(helps)
    words = [*bare_names(), *(f"{n}:" for n in path_names())]
    assert "coco:PATH" in dataset_help() and "voc_seg:PATH" in dataset_help() and "dlib_xml:FILE.xml" in dataset_help()
    for name in ("evaluate", "pitfalls", "bench", "stacks", "diff", "convert"):
        assert [w for w in words if w not in helps[name]] == [], name


def test_report_help_names_every_kind_of_id_and_every_diff_kind() -> None:
    report = COMMANDS["report"]
    assert report.help is not None
    for word in ("run", "sweep", "benchmark", "stack matrix", "diff", *DIFF_KINDS):
        assert word in report.help, word
    (object_id,) = [p for p in report.params if p.name == "object_id"]
    assert getattr(object_id, "help", "").startswith("A run, sweep, benchmark, stack matrix or diff id")


def test_convert_help_describes_every_route_and_registered_conversion() -> None:
    convert = COMMANDS["convert"]
    assert convert.help is not None
    for route in ("pytorch_state_dict --to keras", "darknet --to onnx", "darknet --to keras", *CONVERSIONS.names()):
        assert route in convert.help, route
    assert "torch weights into a Keras port" not in convert.help  # the one-route help of before
    (to,) = [p for p in convert.params if isinstance(p, TyperOption) and "--to" in p.opts]
    assert to.help is not None and "onnx (a darknet source)" in to.help
