"""``repliscope db upgrade``: migrate a run database to the newest schema revision (Alembic)."""

from __future__ import annotations

import typer

from repliscope.cli.common import DbOption, JsonOption, emit_json, fail
from repliscope.cli.output import console

db_app = typer.Typer(help="The run database's schema.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    """Add the ``db`` command group to ``app``."""
    app.add_typer(db_app, name="db")


@db_app.command("upgrade")
def db_upgrade(db: DbOption = None, as_json: JsonOption = False) -> None:
    """Upgrade the run database to the newest revision (every RunStore open does the same); prints the
    revision before and after. A database created before migrations is stamped at the baseline first."""
    from sqlalchemy.exc import SQLAlchemyError

    from repliscope.errors import StoreError
    from repliscope.store.migrate import BASELINE, upgrade
    from repliscope.store.repository import _sqlite_folder, _user_data_url, default_url, hide_password

    url = db or default_url()
    try:
        _sqlite_folder(url, create=url == _user_data_url())
        try:
            result = upgrade(url)
        except (SQLAlchemyError, OSError, ImportError) as exc:
            raise StoreError(f"cannot upgrade the run database {hide_password(url)}: {exc}") from exc
    except StoreError as exc:
        fail(exc)
    if as_json:
        emit_json(
            {
                "database": hide_password(url),
                "from": result.from_revision,
                "to": result.to_revision,
                "legacy": result.legacy,
                "added": result.added,
            }
        )
        return
    if result.legacy:
        before = f"none (created before migrations; stamped {BASELINE})"
    elif result.from_revision is None:
        before = "none (empty database)"
    else:
        before = result.from_revision
    console.print(f"database: {hide_password(url)}", highlight=False, soft_wrap=True)
    console.print(f"from: {before}", highlight=False)
    if result.added:
        console.print(f"added (missing in the old store): {', '.join(result.added)}", highlight=False)
    suffix = "" if result.changed else " (already at the newest revision)"
    console.print(f"to: {result.to_revision}{suffix}", highlight=False)
