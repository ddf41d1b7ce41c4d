"""``repliscope token create|list|revoke``: the service's API tokens (stored hashed in the run database)."""

from __future__ import annotations

from typing import Annotated

import typer

from repliscope.cli.common import DbOption, JsonOption, emit_json, fail
from repliscope.cli.output import console, print_table

token_app = typer.Typer(help="API tokens of `repliscope serve` (viewer < runner < admin).", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    """Add the ``token`` command group to ``app``."""
    app.add_typer(token_app, name="token")


@token_app.command("create")
def token_create(
    role: Annotated[
        str,
        typer.Option(
            help="viewer (reads) | runner (also submits jobs) | admin (also registers datasets and manages tokens)"
        ),
    ],
    name: Annotated[str, typer.Option(help="Who or what uses the token.")] = "cli",
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Create a token and print it ONCE (only its sha256 is stored)."""
    from repliscope.errors import RepliscopeError
    from repliscope.store.accounts import authenticate, create_token
    from repliscope.store.repository import RunStore

    try:
        with RunStore(db) as store:
            token = create_token(store, name, role)
            principal = authenticate(store, token)
    except RepliscopeError as exc:
        fail(exc)
    token_id = principal.token_id if principal else None
    if as_json:
        emit_json({"id": token_id, "name": name, "role": role, "token": token})
        return
    console.print(f"token {token_id} ({role}, {name}); shown once, store it now:", highlight=False)
    print(token)


@token_app.command("list")
def token_list(db: DbOption = None, as_json: JsonOption = False) -> None:
    """List tokens (id, name, role, created, revoked); never the tokens themselves."""
    from repliscope.errors import RepliscopeError
    from repliscope.store.accounts import list_tokens
    from repliscope.store.repository import RunStore

    try:
        with RunStore(db) as store:
            tokens = list_tokens(store)
    except RepliscopeError as exc:
        fail(exc)
    if as_json:
        emit_json([t.model_dump(mode="json") for t in tokens])
        return
    if not tokens:
        console.print("no tokens; create one with: repliscope token create --role admin")
        return
    print_table(
        "tokens",
        ["id", "name", "role", "created (UTC)", "revoked (UTC)"],
        [
            [
                str(t.id),
                t.name,
                t.role,
                t.created_at.strftime("%Y-%m-%d %H:%M:%S"),
                t.revoked_at.strftime("%Y-%m-%d %H:%M:%S") if t.revoked_at else "-",
            ]
            for t in tokens
        ],
    )


@token_app.command("revoke")
def token_revoke(
    token_id: Annotated[int, typer.Argument(help="The id `token list` shows.")], db: DbOption = None
) -> None:
    """Revoke a token: requests with it are refused from now on."""
    from repliscope.errors import RepliscopeError
    from repliscope.store.accounts import revoke_token
    from repliscope.store.repository import RunStore

    try:
        with RunStore(db) as store:
            info = revoke_token(store, token_id)
    except RepliscopeError as exc:
        fail(exc)
    console.print(f"token {info.id} ({info.role}, {info.name}) revoked", highlight=False)
