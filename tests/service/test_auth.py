"""Accounts on the API: every mutating endpoint refuses without a token (401) and with too small a role (403),
endpoint by endpoint; reads need a viewer token; the cookie works like the header; revoked tokens are refused."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.conftest import LITE0

# (method, path, the smallest role allowed, a body the endpoint accepts from that role)
MUTATING: list[tuple[str, str, str]] = [
    ("POST", "/api/v1/manifests", "runner"),
    ("POST", "/api/v1/jobs", "runner"),
    ("POST", "/api/v1/jobs/{job_id}/cancel", "runner"),
    ("POST", "/api/v1/datasets", "admin"),
    ("PUT", "/api/v1/datasets/{name}/declaration", "admin"),
    ("POST", "/api/v1/tokens", "admin"),
    ("POST", "/api/v1/tokens/{token_id}/revoke", "admin"),
    ("PUT", "/api/v1/runs/{run_id}/tags/{tag}", "runner"),
    ("DELETE", "/api/v1/runs/{run_id}/tags/{tag}", "runner"),
    ("PUT", "/api/v1/runs/{run_id}/note", "runner"),
    ("PATCH", "/api/v1/runs/{run_id}", "admin"),
    ("DELETE", "/api/v1/runs/{run_id}", "admin"),
]
ROLES = ("viewer", "runner", "admin")


def _request(client: TestClient, method: str, path: str, headers: dict[str, str] | None = None) -> Any:
    path = path.replace("{job_id}", "0" * 32).replace("{token_id}", "1").replace("{name}", "foolbox_imagenet")
    path = path.replace("{run_id}", "f" * 32).replace("{tag}", "baseline")  # an unknown run: 404 once admitted
    if path == "/api/v1/manifests":
        return client.request(
            method, path, content=LITE0.read_text(), headers={**(headers or {}), "Content-Type": "text/yaml"}
        )
    return client.request(method, path, json={}, headers=headers)


def test_every_mutating_endpoint_is_in_the_table(service_app: Any) -> None:
    paths = service_app.openapi()["paths"]
    found = {
        (m.upper(), p)
        for p, ops in paths.items()
        if p.startswith("/api/v1")
        for m in ops
        if m in ("post", "put", "patch", "delete")
    }
    assert found == {(m, p) for m, p, _ in MUTATING}


@pytest.mark.parametrize(("method", "path", "role"), MUTATING)
def test_mutating_endpoint_refuses_without_token_and_with_smaller_role(
    client: TestClient, headers_for: Callable[[str], dict[str, str]], method: str, path: str, role: str
) -> None:
    r = _request(client, method, path)
    assert r.status_code == 401
    assert r.json()["error"]["code"] == "unauthenticated"
    assert r.json()["error"]["field"] == "header.authorization"
    assert r.headers["www-authenticate"] == "Bearer"
    for smaller in ROLES[: ROLES.index(role)]:
        r = _request(client, method, path, headers_for(smaller))
        assert r.status_code == 403, (smaller, r.text)
        assert r.json()["error"]["code"] == "forbidden"
        assert f"'{role}'" in r.json()["error"]["message"]
    r = _request(client, method, path, headers_for(role))  # admitted: whatever follows is not an auth error
    assert r.status_code not in (401, 403), r.text


READS = ["/api/v1/manifests", "/api/v1/models", "/api/v1/jobs", "/api/v1/runs", "/api/v1/datasets", "/api/v1/whoami"]


@pytest.mark.parametrize("path", READS)
def test_reads_need_a_viewer_token(client: TestClient, headers_for: Callable[[str], dict[str, str]], path: str) -> None:
    assert client.get(path).status_code == 401
    assert client.get(path, headers=headers_for("viewer")).status_code == 200


def test_token_admin_endpoints_refuse_a_runner(
    client: TestClient, headers_for: Callable[[str], dict[str, str]]
) -> None:
    assert client.get("/api/v1/tokens", headers=headers_for("runner")).status_code == 403
    assert client.get("/api/v1/tokens", headers=headers_for("admin")).status_code == 200


def test_cookie_and_bad_headers(client: TestClient, tokens: dict[str, str]) -> None:
    client.cookies.set("repliscope_token", tokens["runner"])
    assert client.get("/api/v1/whoami").json() == {"name": "test-runner", "role": "runner"}
    client.cookies.clear()
    r = client.get("/api/v1/whoami", headers={"Authorization": f"Basic {tokens['admin']}"})
    assert r.status_code == 401 and "Bearer" in r.json()["error"]["message"]
    r = client.get("/api/v1/whoami", headers={"Authorization": "Bearer rs_not-a-token"})
    assert r.status_code == 401 and r.json()["error"]["message"] == "unknown or revoked token"
    assert client.get("/api/v1/health").json()["status"] == "ok"  # the one unauthenticated route


def test_revoked_token_is_refused(client: TestClient, headers_for: Callable[[str], dict[str, str]]) -> None:
    admin = headers_for("admin")
    created = client.post("/api/v1/tokens", json={"name": "temp", "role": "viewer"}, headers=admin)
    assert created.status_code == 201 and created.json()["token"].startswith("rs_")
    temp = {"Authorization": f"Bearer {created.json()['token']}"}
    assert client.get("/api/v1/whoami", headers=temp).json() == {"name": "temp", "role": "viewer"}
    listed = client.get("/api/v1/tokens", headers=admin).json()
    token_id = next(t["id"] for t in listed if t["name"] == "temp")
    assert all("token" not in t for t in listed)
    revoked = client.post(f"/api/v1/tokens/{token_id}/revoke", headers=admin)
    assert revoked.status_code == 200 and revoked.json()["revoked_at"] is not None
    assert client.get("/api/v1/whoami", headers=temp).status_code == 401
    assert client.post("/api/v1/tokens/999999/revoke", headers=admin).status_code == 404
    r = client.post("/api/v1/tokens", json={"name": "x", "role": "root"}, headers=admin)
    assert r.status_code == 422 and r.json()["error"]["field"] == "body.role"
