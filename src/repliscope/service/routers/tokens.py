"""``/api/v1/tokens`` (admin): create (the plaintext is returned once), list (never the token), revoke."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Path, Request
from pydantic import BaseModel, ConfigDict, Field

from repliscope.service.auth import require
from repliscope.service.errors import ERROR_RESPONSES
from repliscope.service.routers.common import UtcDatetime, store_errors, store_of

router = APIRouter(prefix="/tokens", tags=["tokens"], responses=ERROR_RESPONSES)
Role = Literal["viewer", "runner", "admin"]


class TokenIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: Annotated[str, Field(min_length=1, max_length=100)]
    role: Role


class TokenInfoOut(BaseModel):
    id: int
    name: str
    role: Role
    created_at: UtcDatetime
    revoked_at: UtcDatetime | None


class TokenCreated(BaseModel):
    name: str
    role: Role
    token: str
    """Shown once: only its sha256 is stored."""


@router.post("", status_code=201, response_model=TokenCreated)
def create(request: Request, body: TokenIn, _: Annotated[Any, Depends(require("admin"))]) -> Any:
    from repliscope.store.accounts import create_token

    with store_errors():
        token = create_token(store_of(request), body.name, body.role)
    return {"name": body.name, "role": body.role, "token": token}


@router.get("", response_model=list[TokenInfoOut])
def list_all(request: Request, _: Annotated[Any, Depends(require("admin"))]) -> Any:
    from repliscope.store.accounts import list_tokens

    with store_errors():
        return [t.model_dump() for t in list_tokens(store_of(request))]


@router.post("/{token_id}/revoke", response_model=TokenInfoOut)
def revoke(
    request: Request, token_id: Annotated[int, Path(ge=1, le=2**62)], _: Annotated[Any, Depends(require("admin"))]
) -> Any:
    """Revoke a token (409 for the last unrevoked admin token: the server would have no admin left)."""
    from repliscope.service.auth import forget_principals
    from repliscope.store.accounts import revoke_token

    with store_errors("token_id"):
        revoked = revoke_token(store_of(request), token_id, keep_an_admin=True)
    forget_principals()  # the revoked token is refused from the next request on
    return revoked.model_dump()
