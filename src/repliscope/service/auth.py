"""Bearer-token authentication: ``require(role)`` reads ``Authorization: Bearer <token>`` or the cookie
``repliscope_token`` and returns the caller (``Principal``); 401 without a valid token, 403 with too small a role.
Tokens are checked by :func:`repliscope.store.accounts.authenticate` (stored hashed); an accepted one is remembered
for :data:`PRINCIPAL_TTL_SECONDS` (a revocation through this server forgets it at once). A cookie-authenticated unsafe
request also needs the CSRF token (:mod:`repliscope.service.csrf`) in ``X-CSRF-Token``."""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from fastapi import Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from repliscope.service.errors import ApiError

ROLES = ("viewer", "runner", "admin")
"""In increasing order: viewer reads, runner also submits jobs, admin also registers datasets and manages tokens."""
COOKIE = "repliscope_token"
UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
BEARER = HTTPBearer(
    scheme_name="bearer",
    auto_error=False,  # require() answers a missing or bad token itself (401 naming the header; or the cookie)
    description="A token from `repliscope token create --role viewer|runner|admin` (or the one-time admin token "
    "`repliscope serve` prints on its first start), sent as `Authorization: Bearer <token>`.",
)
"""The OpenAPI security scheme every :func:`require` route declares (``/docs`` gets an Authorize button)."""


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


PRINCIPAL_TTL_SECONDS = 2.0
"""How long a token the store accepted is trusted without asking the store again. A token revoked through this
server is refused at once (:func:`forget_principals`); one revoked by another process (``repliscope token
revoke``) at most this long after. Unknown and revoked tokens are never remembered."""
MAX_REMEMBERED = 10_000


class _Principals:
    """Accepted tokens: (store URL, sha256 of the token) -> (monotonic expiry, principal); thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[tuple[str, str], tuple[float, Any]] = {}

    @staticmethod
    def _key(store_url: str, token: str) -> tuple[str, str]:
        return store_url, hashlib.sha256(token.encode()).hexdigest()

    def get(self, store_url: str, token: str) -> Any | None:
        key = self._key(store_url, token)
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            if entry[0] <= time.monotonic():
                del self._entries[key]
                return None
            return entry[1]

    def put(self, store_url: str, token: str, principal: Any) -> None:
        key = self._key(store_url, token)
        with self._lock:
            if len(self._entries) >= MAX_REMEMBERED:
                self._entries.clear()
            self._entries[key] = (time.monotonic() + PRINCIPAL_TTL_SECONDS, principal)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


_PRINCIPALS = _Principals()


def forget_principals() -> None:
    """Forget every remembered token (after a revocation: the next request asks the store)."""
    _PRINCIPALS.clear()


def remembered_principal(request: Request, token: str) -> Any | None:
    """The principal of ``token`` when it was accepted within :data:`PRINCIPAL_TTL_SECONDS` (no store query:
    safe on the event loop), else None."""
    return _PRINCIPALS.get(request.app.state.store.url, token)


def principal_of(request: Request) -> Any | None:
    """The authenticated caller of ``request``, or None (no token, or an unknown/revoked one); the store is asked
    at most once per :data:`PRINCIPAL_TTL_SECONDS` for an accepted token."""
    from repliscope.store.accounts import authenticate

    token = token_of(request)
    if token is None:
        return None
    store = request.app.state.store
    principal = _PRINCIPALS.get(store.url, token)
    if principal is None:
        principal = authenticate(store, token)
        if principal is not None:
            _PRINCIPALS.put(store.url, token, principal)
    return principal


def require(role: str) -> Callable[[Request], Awaitable[Any]]:
    """A FastAPI dependency admitting callers with at least ``role``. It runs on the event loop: a token accepted
    within :data:`PRINCIPAL_TTL_SECONDS` costs no thread hop and no query; otherwise the store is read in the
    thread pool."""
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r} (allowed: {', '.join(ROLES)})")
    needed = ROLES.index(role)

    async def dependency(
        request: Request, _bearer: Annotated[HTTPAuthorizationCredentials | None, Security(BEARER)] = None
    ) -> Any:
        token = token_of(request)
        if token is None:
            raise ApiError(
                401,
                "authentication required: send 'Authorization: Bearer <token>' (create one with "
                "`repliscope token create --role ...`)",
                field="header.authorization",
                code="unauthenticated",
            )
        principal = remembered_principal(request, token)
        if principal is None:
            from starlette.concurrency import run_in_threadpool

            principal = await run_in_threadpool(principal_of, request)
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
