"""The command line's top-level guard: whatever goes wrong, the user never sees a Python traceback.

Exit codes (README, "Errors and exit codes"): 0 ok; 1 the command ran but its result is a failure; 2 bad input
(:class:`~repliscope.errors.RepliscopeError`, or a usage error of the command line); 3 an internal error (a bug:
the traceback is saved to a file whose path is printed); 130 interrupted (Ctrl-C).

:class:`GuardedGroup` is the click group class of the ``repliscope`` app, so the guard is active both for the
installed script and under typer's ``CliRunner`` (which calls the group's ``main`` directly).
"""

from __future__ import annotations

import errno
import os
import platform
import sys
import tempfile
import traceback
from datetime import datetime
from pathlib import Path
from typing import Any

import typer
from typer.core import TyperGroup

from repliscope.errors import RepliscopeError

LOG_DIR_ENV = "REPLISCOPE_LOG_DIR"
"""Folder for saved tracebacks (default: the user log folder of platformdirs)."""

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


def log_dir() -> Path:
    """``$REPLISCOPE_LOG_DIR``, else the user log folder (``~/.local/state/repliscope/log`` on Linux)."""
    env = os.environ.get(LOG_DIR_ENV)
    if env:
        return Path(env)
    import platformdirs

    return Path(platformdirs.user_log_dir("repliscope"))


def crash_report(exc: BaseException, argv: list[str]) -> str:
    """The text saved for an internal error: versions, platform, command line, then the full traceback."""
    from repliscope import __version__

    header = [
        f"repliscope {__version__} internal error, {datetime.now().astimezone():%Y-%m-%d %H:%M:%S %z}",
        f"python {platform.python_version()} on {platform.platform()}",
        f"command: {' '.join(argv)}",
        "",
    ]
    return "\n".join(header) + "".join(traceback.format_exception(exc))


def save_traceback(exc: BaseException, argv: list[str] | None = None) -> Path:
    """Write :func:`crash_report` to a new ``crash-YYYYmmdd-HHMMSS-*.txt`` in :func:`log_dir` (the system temp
    folder if that cannot be written); returns its path. Raises OSError only if neither can be written."""
    text = crash_report(exc, list(sys.argv if argv is None else argv))
    prefix = f"crash-{datetime.now():%Y%m%d-%H%M%S}-"
    last: OSError | None = None
    for folder in (log_dir(), Path(tempfile.gettempdir())):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            fd, name = tempfile.mkstemp(prefix=prefix, suffix=".txt", dir=folder)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            return Path(name)
        except OSError as err:
            last = err
    assert last is not None
    raise last


def _one_line(exc: BaseException, limit: int = 300) -> str:
    text = " ".join(str(exc).split())
    text = text if len(text) <= limit else text[: limit - 3] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def report_internal_error(exc: BaseException) -> None:
    """The short message of an internal error on stderr (the traceback goes to a file, never to the screen)."""
    try:
        where = f"The traceback is saved in {save_traceback(exc)}; please report it."
    except OSError as err:
        where = f"The traceback could not be saved ({err}); run with {LOG_DIR_ENV}=<a writable folder>."
    print(f"repliscope hit an internal error: {_one_line(exc)}. {where}", file=sys.stderr)


class GuardedGroup(TyperGroup):
    """The ``repliscope`` group: every command runs inside the guard (see the module docstring)."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort, typer.TyperException):  # exit codes and usage errors: typer prints
            raise
        except RepliscopeError as exc:  # a command that did not catch its own bad-input error
            print(f"error: {exc}", file=sys.stderr)
            raise typer.Exit(EXIT_BAD_INPUT) from None
        except KeyboardInterrupt:
            print("\nrepliscope: interrupted", file=sys.stderr)
            raise typer.Exit(EXIT_INTERRUPTED) from None
        except OSError as exc:
            if exc.errno == errno.EPIPE:  # stdout closed early (`| head`): typer exits quietly
                raise
            if exc.filename is None:
                report_internal_error(exc)
                raise typer.Exit(EXIT_INTERNAL) from None
            # a file the user named or the environment denies (permission, disk full): not a bug
            print(f"error: {exc.strerror or exc}: {exc.filename}", file=sys.stderr)
            raise typer.Exit(EXIT_BAD_INPUT) from None
        except Exception as exc:
            report_internal_error(exc)
            raise typer.Exit(EXIT_INTERNAL) from None
