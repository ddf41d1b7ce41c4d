""":class:`RequestGuard`, the outermost ASGI middleware: what every request goes through before any route reads
its body.

1. Every response gets ``X-Frame-Options: DENY``, ``Content-Security-Policy:`` :data:`PAGE_CSP` unless the route
   set a stricter or its own one (no inline or foreign script, no plugin, no ``<base>``, forms post only here, no
   framing: no click-jacking), ``X-Content-Type-Options: nosniff`` and ``Referrer-Policy: same-origin``, and
   ``Cache-Control: no-store`` unless the route set its own (static assets): no signed-in page or API answer stays
   in a browser's cache, so Back after logging out shows nothing of it.
2. An unsafe request (POST, PUT, PATCH, DELETE) that a browser may send on its own, i.e. one without an
   ``Authorization`` header (it rides on the login cookie, or it is the login itself), must come from this origin:
   its ``Origin`` (else ``Referer``) is this server's scheme://host, else 403 before anything runs. The CSRF token
   itself is checked where the form or header is read (:mod:`repliscope.service.csrf`).
3. An unsafe request needs a valid token (Bearer or cookie) before a byte of its body is read: 401 otherwise (the
   login form, whose token is its body, is the one exception), so an anonymous client cannot make the server
   buffer anything.
4. The body is limited to ``max_bytes`` while it streams: a declared ``Content-Length`` above it is a 413 at once,
   and a chunked body (no length) is answered 413 the moment it passes the limit; the route then sees the client
   as gone and its own answer is dropped. The server never holds more than the limit of one body.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from repliscope.service.errors import ApiError, error_json

UNSAFE = frozenset({"POST", "PUT", "PATCH", "DELETE"})
TOKENLESS = frozenset({"/login"})
"""Unsafe paths that need no token before their body (the login form carries the token in its body)."""
PAGE_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
"""The Content-Security-Policy of every page of the web UI (its error pages too) and of every other answer that
sets none: scripts only from this server's files (``/static/*.js``: no inline ``<script>``, no ``on*=`` handler, no
``javascript:`` URL, no other origin), so stored text that slipped past the escaping could still run nothing;
styles may be inline (``style=`` attributes, the charts' SVG ``<style>``); images from here or ``data:``; forms post
only here; no page may be framed. A route that sets its own policy keeps it: the API docs
(:data:`repliscope.service.api_docs.PAGE_CSP`, FastAPI's inline page scripts), a stored HTML report and the job log
download (sandboxed, stricter)."""
SECURITY_HEADERS = [
    (b"x-frame-options", b"DENY"),
    (b"content-security-policy", PAGE_CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
]


def own_origin(scope: Scope, headers: Any) -> str:
    """``scheme://host[:port]`` of this server as the client addressed it (the Host header)."""
    return f"{scope.get('scheme', 'http')}://{headers.get('host', '')}".lower()


def origin_problem(scope: Scope, headers: Any) -> str | None:
    """Why an unsafe browser request is not same-origin (None: it is)."""
    expected = own_origin(scope, headers)
    origin = headers.get("origin")
    if origin is None:
        referer = headers.get("referer")
        if not referer:
            return "a browser request that changes something must send Origin or Referer (none was sent)"
        parts = urlsplit(referer)
        origin = f"{parts.scheme}://{parts.netloc}"
    if origin.lower() != expected:
        return f"cross-site request refused: Origin {origin!r} is not this server ({expected!r})"
    return None


class RequestGuard:
    """See the module. ``max_bytes``: the largest request body."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        state = {"started": False, "answered": False}

        async def send_secured(message: Message) -> None:
            if state["answered"]:  # we answered (413) while the route read: its own answer is dropped
                return
            if message["type"] == "http.response.start":
                state["started"] = True
                present = {k.lower() for k, _ in message.get("headers", [])}
                message = {
                    **message,
                    "headers": [*message.get("headers", []), *(h for h in SECURITY_HEADERS if h[0] not in present)],
                }
            await send(message)

        refusal = await self._refusal(scope)
        if refusal is not None:
            await refusal(scope, receive, send_secured)
            return
        received = 0

        async def receive_limited() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    if not state["started"]:
                        response = error_json(
                            413, f"the request body is larger than {self.max_bytes} bytes", "body", "too_large"
                        )
                        await response(scope, receive, send_secured)
                    state["answered"] = True
                    return {"type": "http.disconnect"}
            return message

        try:
            await self.app(scope, receive_limited, send_secured)
        except Exception:
            if not state["answered"]:
                raise  # the route's own failure; after our 413 its reaction to the "disconnect" is moot

    async def _refusal(self, scope: Scope) -> Any | None:
        """The response refusing the request before its body is read, or None."""
        request = Request(scope)
        headers = request.headers
        if scope["method"] in UNSAFE:
            browser = "authorization" not in headers
            if browser and (scope["path"] in TOKENLESS or request.cookies):
                problem = origin_problem(scope, headers)
                if problem is not None:
                    return error_json(403, problem, "header.origin", "cross_origin")
            if scope["path"] not in TOKENLESS and not await _authenticated(request):
                if not scope["path"].startswith("/api/"):  # a page's form: to the login page
                    from starlette.responses import RedirectResponse

                    return RedirectResponse("/login", status_code=303)
                return error_json(
                    401,
                    "authentication required before the body is read: send 'Authorization: Bearer <token>' (or log in)",
                    "header.authorization",
                    "unauthenticated",
                    headers={"WWW-Authenticate": "Bearer"},
                )
        length = headers.get("content-length")
        if length is not None:
            size = int(length) if length.isdigit() else -1
            if size < 0:
                return error_json(400, "invalid Content-Length header", "header.content-length")
            if size > self.max_bytes:
                return error_json(413, f"the request body is larger than {self.max_bytes} bytes", "body", "too_large")
        return None


async def _authenticated(request: Request) -> bool:
    """Whether the request carries a valid, unrevoked token (a token accepted in the last seconds is remembered;
    otherwise the store is read off the event loop)."""
    from starlette.concurrency import run_in_threadpool

    from repliscope.service.auth import principal_of, remembered_principal, token_of

    try:
        token = token_of(request)
        if token is None:
            return False
        if remembered_principal(request, token) is not None:
            return True
        return await run_in_threadpool(principal_of, request) is not None
    except ApiError:  # a malformed Authorization header
        return False
