"""API tokens: created on the command line (``repliscope token create``), shown once, stored as sha256 only.
Roles are ordered viewer < runner < admin (viewer reads, runner submits jobs, admin registers datasets and
manages tokens). :class:`TokenStore` is the store; the module functions take a
:class:`~repliscope.store.repository.RunStore` (anything holding a ``db``)."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from datetime import datetime
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict
from sqlalchemy import select

from repliscope.store.database import Database, HasDatabase, now
from repliscope.store.errors import ConflictError, InvalidInputError, NotFoundError
from repliscope.store.models import TokenRow

Role = Literal["viewer", "runner", "admin"]
ROLES: tuple[str, ...] = get_args(Role)
PREFIX = "rs_"


def check_role(role: str, field: str = "role") -> str:
    if role not in ROLES:
        raise InvalidInputError(f"role {role!r} is not a role (allowed: {', '.join(ROLES)})", field)
    return role


def role_allows(have: str, need: str) -> bool:
    """True when role ``have`` may do what ``need`` may (viewer < runner < admin)."""
    return ROLES.index(check_role(have)) >= ROLES.index(check_role(need))


class Principal(BaseModel):
    """Who a valid token belongs to."""

    model_config = ConfigDict(frozen=True)

    token_id: int
    name: str
    role: Role

    def allows(self, need: str) -> bool:
        return role_allows(self.role, need)


class TokenInfo(BaseModel):
    """A token as listed (never the token itself)."""

    model_config = ConfigDict(frozen=True, from_attributes=True)

    id: int
    name: str
    role: Role
    created_at: datetime
    revoked_at: datetime | None


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class TokenStore:
    """The API tokens of ``db``."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def create(self, name: str, role: str) -> str:
        """A new token for ``name`` with ``role``: returned once in plain text (``rs_`` + 43 URL-safe
        characters); only its sha256 is stored."""
        check_role(role)
        if not name or not name.strip():
            raise InvalidInputError("a token needs a name (who or what uses it)", "name")
        token = PREFIX + secrets.token_urlsafe(32)
        row = TokenRow(name=name.strip(), role=role, token_sha256=_digest(token), created_at=now(), revoked_at=None)
        with self.db.session(write=True, failing="a token could not be written to") as session:
            session.add(row)
        return token

    def authenticate(self, token: str | None) -> Principal | None:
        """The principal of an unrevoked ``token``; None for a missing, malformed, unknown or revoked one."""
        if not token or not token.startswith(PREFIX) or len(token) > 200:
            return None
        digest = _digest(token)
        with self.db.session() as session:
            row = session.scalars(select(TokenRow).where(TokenRow.token_sha256 == digest)).first()
            if row is None or row.revoked_at is not None or not hmac.compare_digest(row.token_sha256, digest):
                return None
            return Principal(token_id=row.id, name=row.name, role=check_role(row.role))  # type: ignore[arg-type]

    def revoke(self, token_id: int, keep_an_admin: bool = False) -> TokenInfo:
        """Revoke token ``token_id`` (revoking a revoked token keeps its first revocation time). ``keep_an_admin``
        (the service): the last unrevoked admin token is refused (ConflictError), so the server keeps an admin."""
        with self.db.session(write=True, failing=f"token {token_id} could not be revoked in") as session:
            row = session.get(TokenRow, token_id)
            if row is None:
                raise NotFoundError(f"token {token_id} does not exist", "token")
            if keep_an_admin and row.revoked_at is None and row.role == "admin":
                others = (
                    select(TokenRow.id)
                    .where(TokenRow.role == "admin", TokenRow.revoked_at.is_(None), TokenRow.id != token_id)
                    .limit(1)
                )
                if session.scalar(others) is None:
                    raise ConflictError(
                        f"token {token_id} is the last admin token: create another admin token before revoking it",
                        "token_id",
                    )
            if row.revoked_at is None:
                row.revoked_at = now()
        return TokenInfo.model_validate(row)

    def list(self) -> list[TokenInfo]:
        """Every token (revoked ones too), oldest first."""
        with self.db.session() as session:
            return [TokenInfo.model_validate(r) for r in session.scalars(select(TokenRow).order_by(TokenRow.id))]

    def has_admin(self) -> bool:
        """Whether an unrevoked admin token exists (``repliscope serve`` prints a new one when not)."""
        with self.db.session() as session:
            query = select(TokenRow.id).where(TokenRow.role == "admin", TokenRow.revoked_at.is_(None)).limit(1)
            return session.scalar(query) is not None


# ---- the function API ---------------------------------------------------------------------------------------


def create_token(store: HasDatabase, name: str, role: str) -> str:
    """:meth:`TokenStore.create`."""
    return TokenStore(store.db).create(name, role)


def authenticate(store: HasDatabase, token: str | None) -> Principal | None:
    """:meth:`TokenStore.authenticate`."""
    return TokenStore(store.db).authenticate(token)


def revoke_token(store: HasDatabase, token_id: int, keep_an_admin: bool = False) -> TokenInfo:
    """:meth:`TokenStore.revoke`."""
    return TokenStore(store.db).revoke(token_id, keep_an_admin)


revoke = revoke_token


def list_tokens(store: HasDatabase) -> list[TokenInfo]:
    """Every token (revoked ones too), oldest first."""
    return TokenStore(store.db).list()


def has_admin(store: HasDatabase) -> bool:
    """:meth:`TokenStore.has_admin`."""
    return TokenStore(store.db).has_admin()
