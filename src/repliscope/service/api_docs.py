"""``/docs`` (Swagger UI) and ``/redoc`` (ReDoc) with their JavaScript and CSS served by this app, not a CDN: the
API documentation works on a machine without internet access.

The assets are the distribution builds shipped by the PyPI package ``fastapi-offline`` (in the 'service' extra):
Swagger UI 5 (Apache-2.0) and ReDoc 2 (MIT), with a favicon. They are served under :data:`ASSETS_PREFIX` with
their content type and a one-day cache lifetime. As before, ``/docs``, ``/redoc``, ``/openapi.json`` and these
assets need no token: the OpenAPI document describes the API, it holds no data (every operation needs a token).

ReDoc's sidebar credit loads Redocly's logo from ``cdn.redoc.ly``; the page's CSP stays ``img-src 'self' data:``
and the served bundle carries the logo as a ``data:`` image instead (:data:`REDOC_LOGO`), so the page makes no
request elsewhere and none is refused. The OpenAPI document declares the bearer scheme
(:data:`repliscope.service.auth.BEARER`): every operation guarded by :func:`repliscope.service.auth.require`
carries it, so ``/docs`` has an Authorize button.
"""

from __future__ import annotations

import base64
import functools
from importlib.resources import files
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from repliscope.service.errors import ApiError

if TYPE_CHECKING:
    from fastapi import FastAPI

ASSETS_PREFIX = "/docs-assets"
ASSETS = {
    "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "swagger-ui.css": "text/css; charset=utf-8",
    "redoc.standalone.js": "text/javascript; charset=utf-8",
    "favicon.png": "image/png",
}
"""The served assets and their content types."""
ASSETS_PACKAGE = "fastapi_offline"
CACHE_CONTROL = "public, max-age=86400"
PAGE_CSP = (
    "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; font-src 'self' data:; worker-src 'self' blob:; frame-ancestors 'none'"
)
"""The docs pages' Content-Security-Policy: nothing but this server (the inline parts are FastAPI's own page
templates and the UIs' styles; ReDoc's logo is rewritten to a ``data:`` image, :data:`REDOC_LOGO`)."""
REDOC_CDN_LOGO = b"https://cdn.redoc.ly/redoc/logo-mini.svg"
"""Where ReDoc's bundle loads its sidebar logo from (the one remote URL it requests)."""
_LOGO_SVG = (
    b'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16" width="16" height="16">'
    b'<rect x="1" y="1" width="14" height="14" rx="3" fill="#32329f"/>'
    b'<path d="M5 4h4a2.5 2.5 0 0 1 0 5H7l3 3H8L5 9z" fill="#fff"/></svg>'
)
REDOC_LOGO = b"data:image/svg+xml;base64," + base64.b64encode(_LOGO_SVG)
"""The sidebar credit's logo as served: a local ``data:`` SVG the CSP allows (no request leaves the server)."""


@functools.cache
def asset_bytes(name: str) -> bytes:
    """The bytes of asset ``name`` (one of :data:`ASSETS`) from the installed package; read once."""
    try:
        data = files(ASSETS_PACKAGE).joinpath("static", name).read_bytes()
    except (ModuleNotFoundError, FileNotFoundError) as exc:
        raise ApiError(
            503,
            f"the API docs' {name} comes from the package fastapi-offline, which is not installed or has no "
            f"such file ({exc}): pip install 'repliscope[service]'",
            code="unavailable",
        ) from None
    return data.replace(REDOC_CDN_LOGO, REDOC_LOGO) if name == "redoc.standalone.js" else data


def install_docs(app: FastAPI, title: str) -> None:
    """Add ``/docs``, ``/redoc`` and the assets under :data:`ASSETS_PREFIX` to ``app`` (created with
    ``docs_url=None, redoc_url=None``)."""
    from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html

    def asset_url(request: Request, name: str) -> str:
        return f"{request.scope.get('root_path', '')}{ASSETS_PREFIX}/{name}"

    def openapi_url(request: Request) -> str:
        return f"{request.scope.get('root_path', '')}{app.openapi_url}"

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui(request: Request) -> HTMLResponse:
        page = get_swagger_ui_html(
            openapi_url=openapi_url(request),
            title=f"{title} - Swagger UI",
            swagger_js_url=asset_url(request, "swagger-ui-bundle.js"),
            swagger_css_url=asset_url(request, "swagger-ui.css"),
            swagger_favicon_url=asset_url(request, "favicon.png"),
            swagger_ui_parameters={"validatorUrl": None},  # Swagger UI's default asks validator.swagger.io
        )
        page.headers["Content-Security-Policy"] = PAGE_CSP
        return page

    @app.get("/redoc", include_in_schema=False)
    async def redoc(request: Request) -> HTMLResponse:
        page = get_redoc_html(
            openapi_url=openapi_url(request),
            title=f"{title} - ReDoc",
            redoc_js_url=asset_url(request, "redoc.standalone.js"),
            redoc_favicon_url=asset_url(request, "favicon.png"),
            with_google_fonts=False,
        )
        page.headers["Content-Security-Policy"] = PAGE_CSP
        return page

    @app.get(ASSETS_PREFIX + "/{name}", include_in_schema=False)
    def docs_asset(name: str) -> Response:
        if name not in ASSETS:
            raise ApiError(404, f"no such docs asset {name!r} (served: {', '.join(ASSETS)})", code="not_found")
        return Response(asset_bytes(name), media_type=ASSETS[name], headers={"Cache-Control": CACHE_CONTROL})
