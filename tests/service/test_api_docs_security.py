"""Issue 36 item 9 (part): the OpenAPI document declares the bearer scheme and every protected operation carries it
(an Authorize button on ``/docs``), ``Bearer <token>`` survives markdown rendering, ``/favicon.ico`` is served and
linked, ReDoc's logo is a ``data:`` image under the strict CSP, and a run's provenance shows the manifest's file
name, never the job's temporary folder."""

from __future__ import annotations

import base64
import io
import re
from collections.abc import Callable
from html import unescape
from typing import Any

import pytest
from fastapi.testclient import TestClient

from repliscope.service.api_docs import ASSETS_PREFIX, PAGE_CSP, REDOC_CDN_LOGO
from tests.store.records import TOP1_A, make_record

BEARER_SCHEME = "bearer"
RUN = "e7" * 16
JOB_MANIFEST = "/tmp/repliscope-job-k3v9x1/efficientnet-lite0-1.0.0.yaml"


def _operations(schema: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method, path, op)
        for path, ops in schema["paths"].items()
        for method, op in ops.items()
        if method in ("get", "post", "put", "patch", "delete")
    ]


def test_the_openapi_declares_the_bearer_scheme_on_every_protected_operation(client: TestClient) -> None:
    schema = client.get("/openapi.json").json()
    scheme = schema["components"]["securitySchemes"][BEARER_SCHEME]
    assert scheme["type"] == "http" and scheme["scheme"] == "bearer"
    operations = _operations(schema)
    assert len(operations) >= 25
    unprotected = sorted(f"{m.upper()} {p}" for m, p, op in operations if "security" not in op)
    assert unprotected == ["GET /api/v1/health"]
    for method, path, op in operations:
        if "security" in op:
            assert op["security"] == [{BEARER_SCHEME: []}], (method, path)


def test_every_operation_declared_protected_refuses_a_call_without_a_token(client: TestClient) -> None:
    """What the document declares is what the server does: each GET without path parameters that carries the
    scheme is a 401 without a token, and the one without it (health) answers."""
    schema = client.get("/openapi.json").json()
    checked = 0
    for method, path, op in _operations(schema):
        if method != "get" or "{" in path:
            continue
        r = client.get(path)
        if "security" in op:
            assert r.status_code == 401, (path, r.status_code)
            assert r.json()["error"]["field"] == "header.authorization"
            checked += 1
        else:
            assert r.status_code == 200, path
    assert checked >= 8


def test_bearer_token_is_code_in_the_description_so_markdown_keeps_it(client: TestClient) -> None:
    schema = client.get("/openapi.json").json()
    description = schema["info"]["description"]
    assert "`Authorization: Bearer <token>`" in description
    outside_code = re.sub(r"`[^`]*`", "", description)
    assert "<" not in outside_code, outside_code  # a bare <token> renders as an HTML tag: "Bearer '"
    assert "`Authorization: Bearer <token>`" in schema["components"]["securitySchemes"][BEARER_SCHEME]["description"]


def test_the_favicon_is_served_without_a_token_and_every_page_links_it(
    client: TestClient, headers_for: Callable[[str], dict[str, str]]
) -> None:
    from PIL import Image

    r = client.get("/favicon.ico")
    assert r.status_code == 200
    assert r.headers["content-type"] == "image/x-icon"
    assert r.headers["cache-control"] == "public, max-age=86400"
    icon = Image.open(io.BytesIO(r.content))
    assert icon.format == "ICO" and {(16, 16), (32, 32)} <= set(icon.info["sizes"])
    for page in ("/login", "/runs"):
        html = client.get(page, headers=headers_for("viewer")).text
        assert '<link rel="icon" href="/favicon.ico"' in html, page


def test_redocs_logo_is_a_data_image_the_strict_csp_allows(client: TestClient) -> None:
    bundle = client.get(f"{ASSETS_PREFIX}/redoc.standalone.js").content
    assert REDOC_CDN_LOGO not in bundle and b"cdn.redoc.ly" not in bundle
    logo = re.search(rb'alt:"redocly logo",onError:[^,]+,src:"data:image/svg\+xml;base64,([A-Za-z0-9+/=]+)"', bundle)
    assert logo is not None
    assert base64.b64decode(logo.group(1)).startswith(b"<svg ")
    csp = client.get("/redoc").headers["content-security-policy"]
    assert csp == PAGE_CSP and "img-src 'self' data:;" in csp and "cdn" not in csp


def test_provenance_names_the_manifest_file_never_the_jobs_temporary_folder(
    service_app: Any, client: TestClient, headers_for: Callable[[str], dict[str, str]]
) -> None:
    record = make_record(RUN, TOP1_A)
    record.manifest.path = JOB_MANIFEST
    service_app.state.store.save(record)
    for role in ("viewer", "admin"):
        html = client.get(f"/runs/{RUN}", headers=headers_for(role)).text
        summary = re.search(r"<summary>Manifest text \((.*?)\)</summary>", html, re.S)
        assert summary is not None, role
        assert unescape(re.sub(r"<[^>]+>", "", summary.group(1))) == (
            "efficientnet-lite0-1.0.0.yaml, efficientnet-lite0@1.0.0"
        )
        assert "repliscope-job-k3v9x1" not in summary.group(1) and "/tmp" not in summary.group(1)


@pytest.mark.parametrize(
    ("stored", "shown"),
    [("examples/efficientnet-lite0.yaml", "efficientnet-lite0.yaml"), ("C:\\models\\lite0.yaml", "lite0.yaml")],
)
def test_provenance_shows_a_cli_runs_file_name(
    service_app: Any, client: TestClient, headers_for: Callable[[str], dict[str, str]], stored: str, shown: str
) -> None:
    record = make_record(RUN, TOP1_A)
    record.manifest.path = stored
    service_app.state.store.save(record)
    html = client.get(f"/runs/{RUN}", headers=headers_for("admin")).text
    assert f'<span id="manifest-file">{shown}</span>' in html
