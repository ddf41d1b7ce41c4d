"""``/docs`` (Swagger UI) and ``/redoc`` (ReDoc) with their JavaScript and CSS served by this app, not a CDN: the
API documentation works on a machine without internet access.

The assets are the distribution builds shipped by the PyPI package ``fastapi-offline`` (in the 'service' extra):
Swagger UI 5 (Apache-2.0) and ReDoc 2 (MIT), with a favicon. They are served under :data:`ASSETS_PREFIX` with
their content type and a one-day cache lifetime. As before, ``/docs``, ``/redoc``, ``/openapi.json`` and these
assets need no token: the OpenAPI document describes the API, it holds no data (every operation needs a token).
"""

from __future__ import annotations

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
"""The docs pages' Content-Security-Policy: nothing but this server (ReDoc's sidebar credit otherwise loads its
logo from Redocly's CDN; the inline parts are FastAPI's own page templates and the UIs' styles)."""


@functools.cache
def asset_bytes(name: str) -> bytes:
    """The bytes of asset ``name`` (one of :data:`ASSETS`) from the installed package; read once."""
    try:
        return files(ASSETS_PACKAGE).joinpath("static", name).read_bytes()
    except (ModuleNotFoundError, FileNotFoundError) as exc:
        raise ApiError(
            503,
            f"the API docs' {name} comes from the package fastapi-offline, which is not installed or has no "
            f"such file ({exc}): pip install 'repliscope[service]'",
            code="unavailable",
        ) from None


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
