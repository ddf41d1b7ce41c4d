"""Accepted tokens are remembered for :data:`repliscope.service.auth.PRINCIPAL_TTL_SECONDS` (no store query, no
thread hop per request); a revocation through the server takes effect at once, one by another process within
the TTL; unknown tokens are never remembered."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from repliscope.service import auth


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[list[str], Clock]]:
    """Store lookups of tokens (the names asked for) and the cache's clock; the cache starts empty."""
    import repliscope.store.accounts as accounts

    auth.forget_principals()
    clock = Clock()
    monkeypatch.setattr(auth, "time", clock)
    asked: list[str] = []
    real = accounts.authenticate

    def authenticate(store: Any, token: str | None) -> Any:
        asked.append(token or "")
        return real(store, token)

    monkeypatch.setattr(accounts, "authenticate", authenticate)
    yield asked, clock
    auth.forget_principals()


def test_an_accepted_token_is_checked_once_per_ttl(
    client: TestClient, headers_for: Callable[[str], dict[str, str]], counted: tuple[list[str], Clock]
) -> None:
    asked, clock = counted
    for _ in range(3):
        assert client.get("/api/v1/whoami", headers=headers_for("viewer")).json() == {
            "name": "test-viewer",
            "role": "viewer",
        }
    assert len(asked) == 1
    clock.now += auth.PRINCIPAL_TTL_SECONDS + 0.01
    assert client.get("/api/v1/whoami", headers=headers_for("viewer")).status_code == 200
    assert len(asked) == 2


def test_unknown_tokens_are_never_remembered(client: TestClient, counted: tuple[list[str], Clock]) -> None:
    asked, _ = counted
    bad = {"Authorization": "Bearer rs_" + "x" * 43}
    for _ in range(2):
        r = client.get("/api/v1/whoami", headers=bad)
        assert r.status_code == 401 and r.json()["error"]["message"] == "unknown or revoked token"
    assert len(asked) == 2


def test_a_revocation_through_the_server_is_at_once(
    client: TestClient, tokens: dict[str, str], counted: tuple[list[str], Clock]
) -> None:
    from repliscope.store.accounts import create_token

    store = client.app.state.store  # type: ignore[attr-defined]
    doomed = create_token(store, "doomed", "viewer")
    headers = {"Authorization": f"Bearer {doomed}"}
    assert client.get("/api/v1/whoami", headers=headers).status_code == 200  # remembered now
    admin = {"Authorization": f"Bearer {tokens['admin']}"}
    token_id = next(t["id"] for t in client.get("/api/v1/tokens", headers=admin).json() if t["name"] == "doomed")
    assert client.post(f"/api/v1/tokens/{token_id}/revoke", headers=admin).status_code == 200
    assert client.get("/api/v1/whoami", headers=headers).status_code == 401


def test_a_revocation_by_another_process_takes_effect_within_the_ttl(
    client: TestClient, counted: tuple[list[str], Clock]
) -> None:
    from repliscope.store.accounts import create_token, list_tokens, revoke_token

    _, clock = counted
    store = client.app.state.store  # type: ignore[attr-defined]
    doomed = create_token(store, "doomed", "viewer")
    headers = {"Authorization": f"Bearer {doomed}"}
    assert client.get("/api/v1/whoami", headers=headers).status_code == 200
    revoke_token(store, next(t.id for t in list_tokens(store) if t.name == "doomed"))  # as `repliscope token revoke`
    clock.now += auth.PRINCIPAL_TTL_SECONDS / 2
    assert client.get("/api/v1/whoami", headers=headers).status_code == 200  # still remembered
    clock.now += auth.PRINCIPAL_TTL_SECONDS / 2 + 0.01
    assert client.get("/api/v1/whoami", headers=headers).status_code == 401


def test_an_unsafe_request_with_a_remembered_token_asks_the_store_nothing(
    client: TestClient, headers_for: Callable[[str], dict[str, str]], counted: tuple[list[str], Clock]
) -> None:
    """The guard (before the body) and the route's dependency both use the remembered token."""
    asked, _ = counted
    admin = headers_for("admin")
    assert client.get("/api/v1/whoami", headers=admin).status_code == 200
    r = client.post("/api/v1/tokens", headers=admin, json={"name": "x", "role": "emperor"})
    assert r.status_code == 422 and r.json()["error"]["field"] == "body.role"
    assert len(asked) == 1
