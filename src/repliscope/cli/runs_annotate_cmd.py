"""``repliscope runs tag|untag|note|rename|delete|audit``: annotate stored runs (:mod:`repliscope.store.annotations`).

The command line opens the store itself, so it has no roles: whoever can write the database can annotate and
delete (the service checks roles: tags and notes need a runner token, rename and delete an admin one). Each change
is audited with ``--by`` (default: the login name of the user running the command) and ``via`` = ``cli``.
"""

from __future__ import annotations

import getpass
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from repliscope.cli.common import DbOption, JsonOption, emit_json, fail
from repliscope.cli.output import console
from repliscope.errors import RepliscopeError

ByOption = Annotated[
    str | None,
    typer.Option("--by", help="Who makes the change, as the audit records it (default: your login name)."),
]
MAX_NOTE_FILE_BYTES = 64 * 1024
"""The largest ``--file`` a note is read from (a note holds at most 10,000 characters)."""


def _actor(by: str | None) -> str:
    if by is not None:
        return by
    try:
        return getpass.getuser()
    except (KeyError, OSError) as exc:  # no login name (a container without a passwd entry)
        raise RepliscopeError(f"cannot tell who you are ({exc}): name yourself with --by NAME") from None


def _store(db: str | None) -> Any:
    from repliscope.store.repository import RunStore

    return RunStore(db)


def _show(notes: Any, as_json: bool) -> None:
    """A run's annotations: JSON, or a few lines."""
    if as_json:
        emit_json(notes.model_dump(mode="json"))
        return
    # names, notes and who set them are text a token holder chose: never Rich markup (a "[/]" would crash the
    # command, a "[link=...]" print a terminal hyperlink)
    console.print(f"run [bold]{notes.run_id}[/]", highlight=False)  # a run id: letters, digits, _ and -
    if notes.display_name:
        console.print(
            f"  name: {notes.display_name} (by {notes.named_by}, {notes.named_at:%Y-%m-%d %H:%M} UTC)",
            highlight=False,
            markup=False,
        )
    tags = ", ".join(t.tag for t in notes.tags) or "none"
    console.print(f"  tags: {tags}", highlight=False, markup=False)
    if notes.note:
        console.print(
            f"  note (by {notes.note_by}, {notes.note_at:%Y-%m-%d %H:%M} UTC):", highlight=False, markup=False
        )
        console.print("    " + notes.note.replace("\n", "\n    "), highlight=False, markup=False)


def print_annotations(store: Any, run_id: str) -> None:
    """``runs show``: the run's display name, tags and note under its record (nothing when it has none)."""
    notes = store.annotations.get(run_id)
    if notes.display_name or notes.tags or notes.note:
        console.print("[bold]annotations[/] (runs tag / note / rename; runs audit RUN for their history)")
        _show(notes, as_json=False)


def runs_tag(
    run: Annotated[str, typer.Argument(help="A run id or a unique prefix of at least 6 characters.")],
    tags: Annotated[list[str], typer.Argument(help="Tags to add: 1-64 of A-Z a-z 0-9 _ . : - each; 32 a run.")],
    by: ByOption = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Add tags to a stored run (those it has stay as they are)."""
    try:
        _show(_store(db).annotations.add_tags(run, tags, _actor(by), "cli"), as_json)
    except RepliscopeError as exc:
        fail(exc)


def runs_untag(
    run: Annotated[str, typer.Argument(help="A run id or a unique prefix of at least 6 characters.")],
    tags: Annotated[list[str], typer.Argument(help="Tags to remove (each must be on the run).")],
    by: ByOption = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Remove tags from a stored run."""
    try:
        _show(_store(db).annotations.remove_tags(run, tags, _actor(by), "cli"), as_json)
    except RepliscopeError as exc:
        fail(exc)


def _note_text(text: str | None, file: Path | None) -> str:
    if (text is None) == (file is None):
        raise RepliscopeError("give the note as TEXT or with --file FILE (one of them); an empty TEXT clears it")
    if file is None:
        assert text is not None
        return text
    if str(file) == "-":
        data = sys.stdin.buffer.read(MAX_NOTE_FILE_BYTES + 1)
    else:
        import stat

        try:
            info = file.stat()
            if not stat.S_ISREG(info.st_mode):
                raise RepliscopeError(f"--file {file}: not a regular file")
            with file.open("rb") as handle:
                data = handle.read(MAX_NOTE_FILE_BYTES + 1)
        except OSError as exc:
            raise RepliscopeError(f"--file {file}: {exc.strerror or exc}") from None
    if len(data) > MAX_NOTE_FILE_BYTES:
        raise RepliscopeError(
            f"--file {file}: larger than {MAX_NOTE_FILE_BYTES} bytes (a note is at most 10000 characters)"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RepliscopeError(f"--file {file}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def runs_note(
    run: Annotated[str, typer.Argument(help="A run id or a unique prefix of at least 6 characters.")],
    text: Annotated[str | None, typer.Argument(help="The note (replaces the run's note; '' clears it).")] = None,
    file: Annotated[
        Path | None, typer.Option("--file", help="Read the note from this UTF-8 file ('-': standard input).")
    ] = None,
    by: ByOption = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Set a stored run's note (at most 10,000 characters; the earlier note stays in the audit)."""
    try:
        _show(_store(db).annotations.set_note(run, _note_text(text, file), _actor(by), "cli"), as_json)
    except RepliscopeError as exc:
        fail(exc)


def runs_rename(
    run: Annotated[str, typer.Argument(help="A run id or a unique prefix of at least 6 characters.")],
    name: Annotated[str | None, typer.Argument(help="The display name (1-200 characters).")] = None,
    clear: Annotated[bool, typer.Option("--clear", help="Remove the display name.")] = False,
    by: ByOption = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Give a stored run a display name, shown wherever it is listed; the record and its result hash are not
    changed (its manifest name stays in the provenance)."""
    try:
        if (name is None) == (not clear):
            raise RepliscopeError("give the NAME, or --clear to remove the display name (one of them)")
        _show(_store(db).annotations.rename(run, name, _actor(by), "cli"), as_json)
    except RepliscopeError as exc:
        fail(exc)


def runs_delete(
    run: Annotated[str, typer.Argument(help="A run id or a unique prefix of at least 6 characters.")],
    yes: Annotated[bool, typer.Option("--yes", help="Really delete (required: there is no undo).")] = False,
    by: ByOption = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Delete a stored run, its samples, tags, note and trace; the audit keeps its id, model, result hash,
    headline metric, name, tags and note, and who deleted it when (``runs audit RUN``)."""
    try:
        if not yes:
            raise RepliscopeError(f"deleting run {run} cannot be undone: add --yes to delete it")
        entry = _store(db).annotations.delete_run(run, _actor(by), "cli")
    except RepliscopeError as exc:
        fail(exc)
        return
    if as_json:
        emit_json(entry.model_dump(mode="json"))
        return
    kept = entry.before or {}
    console.print(
        f"deleted run {entry.run_id} ({kept.get('manifest_name')} {kept.get('manifest_version')}, result hash "
        f"{str(kept.get('result_hash'))[:12]}); audit entry {entry.id}",
        highlight=False,
        markup=False,
    )


def runs_audit(
    run: Annotated[
        str | None, typer.Argument(help="Only this run (an id or a unique prefix; deleted runs too).")
    ] = None,
    action: Annotated[str | None, typer.Option(help="tag | untag | note | rename | delete")] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="At most this many entries.")] = 50,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """The audit of run annotations and deletions, newest first: who, when, through what, before and after."""
    from repliscope.store.annotations import change_text

    try:
        entries, total = _store(db).annotations.audit(run_id=run, action=action, limit=limit)
    except RepliscopeError as exc:
        fail(exc)
        return
    if as_json:
        emit_json([e.model_dump(mode="json") for e in entries])
        return
    if not entries:
        console.print("no audit entries" + (f" of run {run}" if run else ""), highlight=False, markup=False)
        return
    console.print(f"{len(entries)} of {total} audit entries, newest first (UTC)", highlight=False)
    for e in entries:
        console.print(
            f"{e.at:%Y-%m-%d %H:%M:%S}  {e.action:<6}  {e.run_id[:12]}  by {e.actor} ({e.via})  {change_text(e)}",
            highlight=False,
            markup=False,
        )


COMMANDS: dict[str, Callable[..., None]] = {
    "tag": runs_tag,
    "untag": runs_untag,
    "note": runs_note,
    "rename": runs_rename,
    "delete": runs_delete,
    "audit": runs_audit,
}
"""The ``runs`` subcommands of this module by name (registered by :mod:`repliscope.cli.runs_cmd`)."""
