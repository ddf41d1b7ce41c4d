"""CSRF tokens (the HMAC synchronizer-token pattern, stateless): a cookie-authenticated unsafe request must carry
``csrf_token`` (form field) or ``X-CSRF-Token`` (header) equal to HMAC-SHA256(server secret, what the page was
made for): the signed-in token's id, or before login the random ``repliscope_csrf`` cookie. A page of another site
can neither read it nor compute it. Bearer-token requests need none (a browser never adds that header by itself).
The secret is random per server process (``REPLISCOPE_CSRF_SECRET`` sets one, e.g. for several workers): after a
restart a form opened before it is refused once and works when reloaded."""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from typing import Any

FIELD = "csrf_token"
HEADER = "x-csrf-token"
NONCE_COOKIE = "repliscope_csrf"
"""The login form's binding (random, HttpOnly, SameSite=Strict) before there is a signed-in token."""

_SECRET = (os.environ.get("REPLISCOPE_CSRF_SECRET") or "").encode() or secrets.token_bytes(32)


def _mac(binding: str) -> str:
    return hmac.new(_SECRET, f"repliscope-csrf:{binding}".encode(), hashlib.sha256).hexdigest()


def token_for(principal: Any) -> str:
    """The CSRF token of a signed-in caller's pages (bound to its token's id)."""
    return _mac(f"token:{principal.token_id}")


def login_token(nonce: str) -> str:
    """The CSRF token of the login form, bound to the browser's ``repliscope_csrf`` cookie."""
    return _mac(f"login:{nonce}")


def new_nonce() -> str:
    return secrets.token_urlsafe(24)


def valid(given: str | None, expected: str) -> bool:
    """``given`` equals ``expected`` (constant time); None/empty never does."""
    return bool(given) and hmac.compare_digest(str(given), expected)
