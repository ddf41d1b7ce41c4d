"""``--label-rule``'s help is the datasets registry's words (issue 33 item 10), read from a static copy so that
starting the command line does not import the datasets package: the copy is compared with the registry here, and
each command offers ``csv`` only when it has ``--labels-csv``."""

from __future__ import annotations

import subprocess
import sys

import typer.main
from typer.core import TyperCommand, TyperGroup, TyperOption

from repliscope.cli.label_rules import LABEL_RULE_NAMES, label_rule_choices
from repliscope.cli.main import app
from repliscope.datasets import LABEL_RULES


def test_the_static_names_are_the_registry_in_its_order() -> None:
    assert sorted(LABEL_RULE_NAMES) == LABEL_RULES.names() and len(set(LABEL_RULE_NAMES)) == len(LABEL_RULE_NAMES)
    assert label_rule_choices(labels_csv=True) == "imagenet_wnid | filename_index | subfolders | csv | none"
    assert label_rule_choices(labels_csv=False) == "imagenet_wnid | filename_index | subfolders | none"


def _option(command: TyperCommand, name: str) -> TyperOption | None:
    return next((p for p in command.params if isinstance(p, TyperOption) and name in p.opts), None)


def test_every_label_rule_option_lists_the_rules_and_csv_only_with_labels_csv() -> None:
    group = typer.main.get_command(app)
    assert isinstance(group, TyperGroup)
    ctx = typer.Context(group)
    seen: dict[str, bool] = {}
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        subcommands = list(command.commands.values()) if isinstance(command, TyperGroup) else [command]
        for sub in subcommands:
            assert isinstance(sub, TyperCommand), (name, sub)
            rule = _option(sub, "--label-rule")
            if rule is None:
                continue
            has_csv = _option(sub, "--labels-csv") is not None
            seen[name] = has_csv
            assert rule.help is not None
            assert rule.help.startswith(label_rule_choices(labels_csv=has_csv) + " ("), (name, rule.help)
    # evaluate and pitfalls read --labels-csv; bench and stacks have no such option, so no csv in their help
    assert seen == {"evaluate": True, "pitfalls": True, "bench": False, "stacks": False}


def test_starting_the_command_line_does_not_import_the_datasets_package() -> None:
    probe = "import sys, repliscope.cli.main; print(sorted(m for m in sys.modules if m.startswith('repliscope.dat')))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
