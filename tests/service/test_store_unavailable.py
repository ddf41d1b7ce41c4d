"""A run database that refuses writes (SQLite's ``query_only``, as a read-only or full disk) is the server's
trouble, not the client's: a 503 ``unavailable`` naming the operation and "the run store" (never the server's
path); reads go on."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import event

from tests.conftest import LITE0


def _read_only(store: Any) -> None:
    def on_connect(dbapi_connection: Any, _: object) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA query_only = ON")
        cursor.close()

    event.listen(store.engine, "connect", on_connect)
    store.engine.dispose()


def test_a_write_the_database_refuses_is_a_503_without_the_servers_path(
    service_app: Any, client: TestClient, headers_for: Callable[[str], dict[str, str]], tmp_path: Path
) -> None:
    runner, admin = headers_for("runner"), headers_for("admin")  # the tokens are stored before the database locks
    _read_only(service_app.state.store)
    upload = client.post(
        "/api/v1/manifests", content=LITE0.read_text().encode(), headers={**runner, "Content-Type": "text/yaml"}
    )
    assert upload.status_code == 503, upload.text
    error = upload.json()["error"]
    assert error["code"] == "unavailable" and error["field"] is None
    refused = "the run database the run store: attempt to write a readonly database"
    assert error["message"] == f"manifest efficientnet-lite0@1.0.0 could not be written to {refused}"
    assert str(tmp_path) not in upload.text
    token = client.post("/api/v1/tokens", json={"name": "ci", "role": "viewer"}, headers=admin)
    assert token.status_code == 503, token.text
    assert token.json()["error"] == {
        "message": f"a token could not be written to {refused}",
        "field": None,
        "code": "unavailable",
    }
    listed = client.get("/api/v1/manifests", headers=runner)
    assert listed.status_code == 200 and listed.json() == []
