"""A command group whose commands are imported only when one is asked for (start-up time).

``repliscope runs list`` imports ``repliscope.cli.runs_cmd`` and not the service, the agents or the benchmark
modules. The group knows a table ``command name -> module`` (:attr:`LazyGroup.lazy_commands`); a command module
keeps its plain ``register(app: typer.Typer)``, which adds its commands or sub-typers to ``app``. The first time a
name is asked for, the module is imported, registered into a throw-away :class:`typer.Typer` and converted to click
commands exactly as typer converts the real app (same markup mode, same suggestions), so help, completion and
exit codes are those of an eagerly registered app. ``repliscope --help`` lists every name, so it loads every
module; completion loads only the names that match what was typed.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from typing import TYPE_CHECKING, Any, ClassVar

import typer
import typer.main

from repliscope.cli.guard import GuardedGroup

if TYPE_CHECKING:
    from typer._click import Command


class LazyCommands(MutableMapping[str, "Command"]):
    """A group's commands by name, in the table's order (the order of ``--help``).

    A name mapped to a module is built on first access (``commands[name]``, ``.get``, ``.values()``); a name
    mapped to ``None`` is a command defined on the app itself and must be among ``defined``. Membership, ``len``
    and iteration read only the table: they import nothing.
    """

    def __init__(
        self,
        table: Mapping[str, str | None],
        defined: Mapping[str, Command],
        load: Callable[[str], Mapping[str, Command]],
    ) -> None:
        own = [name for name, module in table.items() if module is None]
        if sorted(own) != sorted(defined):
            raise RuntimeError(
                f"the lazy command table's own commands {sorted(own)} differ from the commands defined on the "
                f"app {sorted(defined)}: map every command of the app to None, and only those"
            )
        self._order = list(table)
        self._modules = {name: module for name, module in table.items() if module is not None}
        self._loaded: dict[str, Command] = dict(defined)
        self._load = load

    def __getitem__(self, name: str) -> Command:
        if name in self._loaded:
            return self._loaded[name]
        module = self._modules[name]  # KeyError: not a command of this group
        built = self._load(module)
        if name not in built:
            raise RuntimeError(f"{module}.register() does not add the command '{name}' (it adds {sorted(built)})")
        self._loaded[name] = built[name]
        return built[name]

    def __setitem__(self, name: str, command: Command) -> None:  # click's add_command
        if name not in self._modules and name not in self._loaded:
            self._order.append(name)
        self._modules.pop(name, None)
        self._loaded[name] = command

    def __delitem__(self, name: str) -> None:
        if name not in self:
            raise KeyError(name)
        self._order.remove(name)
        self._modules.pop(name, None)
        self._loaded.pop(name, None)

    def __contains__(self, name: object) -> bool:
        return name in self._loaded or name in self._modules

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._order))

    def __len__(self) -> int:
        return len(self._order)

    def loaded(self) -> list[str]:
        """The names built so far (the app's own commands, and each lazy one asked for)."""
        return [name for name in self._order if name in self._loaded]


class LazyGroup(GuardedGroup):
    """A guarded typer group whose commands come from :attr:`lazy_commands` (set it in a subclass).

    Pass the subclass as ``typer.Typer(cls=...)``; commands defined on that Typer itself (``@app.command()``) are
    mapped to ``None`` in the table. ``self.commands`` is a :class:`LazyCommands`, so typer's own uses of it (the
    "Did you mean ...?" suggestions of an unknown command) see every name. Typer builds a group (rather than a
    single command) only for a Typer with a callback, a sub-typer or two commands or more: an app defining fewer
    than two commands itself needs ``@app.callback()``.
    """

    lazy_commands: ClassVar[Mapping[str, str | None]] = {}
    """``command name -> module`` (dotted path, with a ``register(app: typer.Typer)``), or ``None`` for a command
    defined on the app itself; the order is the order of ``--help``."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        self._registered: dict[str, dict[str, Command]] = {}
        self.commands = LazyCommands(self.lazy_commands, self.commands, self._module_commands)

    def _module_commands(self, module: str) -> dict[str, Command]:
        """Every command ``module.register`` adds, built as typer builds the app's (cached per module)."""
        if module not in self._registered:
            registered = typer.Typer(rich_markup_mode=self.rich_markup_mode, suggest_commands=self.suggest_commands)
            importlib.import_module(module).register(registered)
            self._registered[module] = dict(typer.main.get_group(registered).commands)
        return self._registered[module]

    def get_command(self, ctx: Any, cmd_name: str) -> Command | None:
        """The command ``cmd_name``, importing its module on first use; None when there is no such command."""
        # not .get(): a KeyError raised while importing or registering the module must surface (the guard
        # reports it), not read as "No such command"
        if cmd_name not in self.commands:
            return None
        return self.commands[cmd_name]

    def list_commands(self, ctx: Any) -> list[str]:
        """Every command's name in the table's order, without importing any module."""
        return list(self.commands)
