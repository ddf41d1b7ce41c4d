"""The invoking user's own code named on their own command line (``--pipeline``, ``--augment``, ``--loss``,
``--candidate``): ``path/to/file.py:NAME`` or ``module:NAME`` -> the object, imported, never called here.

This is like ``python file.py``: the user runs their own code on their machine. It is never a manifest or a
service field (a manifest names code only through :mod:`repliscope.manifest.code_refs`' checked references; the
service accepts none). The attribute path follows code_refs' rules (public names only, no module reached as an
attribute), and every failure is one line naming the flag: a missing file, a module that does not import (its
exception's type and first line), a missing attribute.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import uuid
from pathlib import Path
from types import ModuleType
from typing import Any

from repliscope.errors import RepliscopeError

__all__ = ["import_user_module", "load_user_object"]


def _first_line(exc: BaseException) -> str:
    text = str(exc)
    return text.splitlines()[0] if text else ""


def import_user_module(where: str, flag: str, spec: str) -> ModuleType:
    """``where`` (a ``.py`` file or a module name) imported; a file's folder is importable while it loads."""
    path = Path(where)
    try:
        if where.endswith(".py") or path.is_file():
            if not path.is_file():
                raise RepliscopeError(f"{flag} {spec}: no such file {where}")
            name = f"_repliscope_user_{uuid.uuid4().hex[:8]}"
            module_spec = importlib.util.spec_from_file_location(name, path)
            if module_spec is None or module_spec.loader is None:
                raise RepliscopeError(f"{flag} {spec}: cannot import {where}")
            module = importlib.util.module_from_spec(module_spec)
            folder = str(path.resolve().parent)
            sys.path.insert(0, folder)
            sys.modules[name] = module
            try:
                module_spec.loader.exec_module(module)
            except BaseException:
                sys.modules.pop(name, None)
                raise
            finally:
                sys.path.remove(folder)
            return module
        return importlib.import_module(where)
    except RepliscopeError:
        raise
    except SyntaxError as exc:
        raise RepliscopeError(
            f"{flag} {spec}: {where} does not import: SyntaxError: {exc.msg} (line {exc.lineno})"
        ) from None
    except BaseException as exc:  # the user's code: anything it raises is a bad input, said in one line
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise RepliscopeError(
            f"{flag} {spec}: {where} does not import: {type(exc).__name__}: {_first_line(exc)}"
        ) from None


def load_user_object(spec: str, flag: str) -> Any:
    """``FILE.py:NAME`` / ``module:NAME`` (``NAME`` may be dotted: ``obj.attr``) -> the object."""
    from repliscope.manifest.code_refs import CodeRefError, check_public

    where, sep, attr = spec.rpartition(":")
    if not sep or not where or not attr:
        raise RepliscopeError(f"{flag} {spec}: give FILE.py:NAME or module:NAME")
    parts = attr.split(".")
    if not all(p.isidentifier() for p in parts):
        raise RepliscopeError(f"{flag} {spec}: '{attr}' is not a (dotted) Python name")
    try:
        check_public(parts, spec, flag, "")
    except CodeRefError as exc:
        raise RepliscopeError(str(exc)) from None
    obj: Any = import_user_module(where, flag, spec)
    for i, part in enumerate(parts):
        if isinstance(obj, ModuleType) and i > 0:
            raise RepliscopeError(f"{flag} {spec}: '{'.'.join(parts[:i])}' is a module; name an object in it")
        if not hasattr(obj, part):
            raise RepliscopeError(f"{flag} {spec}: {where} has no attribute '{'.'.join(parts[: i + 1])}'")
        obj = getattr(obj, part)
    return obj
