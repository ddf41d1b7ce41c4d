"""Bearer-token authentication: ``require(role)`` reads ``Authorization: Bearer <token>`` or the cookie
``repliscope_token`` and returns the caller (``Principal``); 401 without a valid token, 403 with too small a role.
Tokens are checked by :func:`repliscope.store.accounts.authenticate` (stored hashed). A cookie-authenticated unsafe
request also needs the CSRF token (:mod:`repliscope.service.csrf`) in ``X-CSRF-Token``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import Request

from repliscope.service.errors import ApiError

ROLES = ("viewer", "runner", "admin")
"""In increasing order: viewer reads, runner also submits jobs, admin also registers datasets and manages tokens."""
COOKIE = "repliscope_token"
UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def token_of(request: Request) -> str | None:
    """The token of a request: the Bearer header first, else the cookie."""
    header = request.headers.get("authorization")
    if header:
        scheme, _, value = header.partition(" ")
        if scheme.lower() != "bearer" or not value.strip():
            raise ApiError(
                401,
                "the Authorization header must be 'Bearer <token>'",
                field="header.authorization",
                code="unauthenticated",
            )
        return value.strip()
    return request.cookies.get(COOKIE) or None


def principal_of(request: Request) -> Any | None:
    """The authenticated caller of ``request``, or None (no token, or an unknown/revoked one)."""
    from repliscope.store.accounts import authenticate

    token = token_of(request)
    if token is None:
        return None
    return authenticate(request.app.state.store, token)


def require(role: str) -> Callable[[Request], Any]:
    """A FastAPI dependency admitting callers with at least ``role``."""
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r} (allowed: {', '.join(ROLES)})")
    needed = ROLES.index(role)

    def dependency(request: Request) -> Any:
        token = token_of(request)
        if token is None:
            raise ApiError(
                401,
                "authentication required: send 'Authorization: Bearer <token>' (create one with "
                "`repliscope token create --role ...`)",
                field="header.authorization",
                code="unauthenticated",
            )
        principal = principal_of(request)
        if principal is None:
            raise ApiError(401, "unknown or revoked token", field="header.authorization", code="unauthenticated")
        if request.method in UNSAFE_METHODS and "authorization" not in request.headers:
            from repliscope.service import csrf

            if not csrf.valid(request.headers.get(csrf.HEADER), csrf.token_for(principal)):
                raise ApiError(
                    403,
                    "a cookie-authenticated request that changes something needs the page's CSRF "
                    "token in the X-CSRF-Token header (or use 'Authorization: Bearer <token>')",
                    field="header.x-csrf-token",
                    code="csrf",
                )
        if ROLES.index(principal.role) < needed:
            raise ApiError(
                403,
                f"this needs the role '{role}' or above; the token '{principal.name}' has '{principal.role}'",
                field="header.authorization",
                code="forbidden",
            )
        return principal

    dependency.__name__ = f"require_{role}"
    return dependency
