"""The JSON error model of the API: ``{"error": {"message", "field", "code"}}``, and the handlers that map every
client mistake to a 4xx with that body (never a 500 for bad input)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

from repliscope.errors import ManifestError, RepliscopeError


class ErrorBody(BaseModel):
    message: str
    field: str | None = None
    code: str
    reasons: dict[str, list[str]] | None = None
    """``no_agent_matches``: why each agent does not qualify for the job (agent id -> reasons)."""


class ErrorResponse(BaseModel):
    """Every 4xx/5xx response of ``/api/v1``."""

    error: ErrorBody


class ApiError(Exception):
    """A client mistake: HTTP ``status``, a ``code`` (``not_found``, ``conflict``, ``invalid``, ...) and the
    ``field`` it is about (a JSON path such as ``body.runtime`` or ``query.page``)."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        field: str | None = None,
        code: str = "invalid",
        reasons: dict[str, list[str]] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.field = field
        self.code = code
        self.reasons = reasons


_CODES = {
    400: "bad_request",
    401: "unauthenticated",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "too_large",
    415: "unsupported_media_type",
    422: "invalid",
}

ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorResponse, "description": code.replace("_", " ")}
    for status, code in _CODES.items()
    if status in (400, 401, 403, 404, 409, 413, 415, 422)
}
"""The documented error responses (OpenAPI) of every API route."""


_DB_URL = re.compile(
    r"\b(?:sqlite|postgres(?:ql)?|mysql|mariadb|oracle|mssql)(?:\+\w+)?://[^\s'\"<>;,)]*[^\s'\"<>;,):.]",
    re.IGNORECASE,
)
RUN_STORE = "the run store"


def redact(message: str) -> str:
    """``message`` without database URLs (a store error names its database for the CLI user; a client of the
    service must not learn the server's file paths, hosts or user names): each becomes "the run store"."""
    return _DB_URL.sub(RUN_STORE, message)


def error_json(
    status: int,
    message: str,
    field: str | None = None,
    code: str | None = None,
    headers: dict[str, str] | None = None,
    reasons: dict[str, list[str]] | None = None,
) -> JSONResponse:
    """The JSON error response (its message :func:`redact`-ed)."""
    error: dict[str, Any] = {"message": redact(message), "field": field, "code": code or _CODES.get(status, "error")}
    if reasons is not None:
        error["reasons"] = reasons
    return JSONResponse({"error": error}, status_code=status, headers=headers)


def _loc(loc: Sequence[Any]) -> str:
    return ".".join(str(p) for p in loc)


def install(app: FastAPI) -> None:
    """Register the handlers on ``app``."""

    @app.exception_handler(ApiError)
    async def _api_error(_request: Request, exc: ApiError) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        return error_json(exc.status, exc.message, exc.field, exc.code, headers, exc.reasons)

    @app.exception_handler(RequestValidationError)
    async def _validation(_request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        first = errors[0] if errors else {"loc": (), "msg": "invalid request"}
        message = "; ".join(f"{_loc(e.get('loc', ()))}: {e.get('msg')}" for e in errors) or "invalid request"
        return error_json(422, message, _loc(first.get("loc", ())) or None, "invalid")

    @app.exception_handler(StarletteHTTPException)
    async def _http(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return error_json(exc.status_code, str(exc.detail), None, None, getattr(exc, "headers", None))

    @app.exception_handler(ManifestError)
    async def _manifest(_request: Request, exc: ManifestError) -> JSONResponse:
        return error_json(422, str(exc), exc.field, "invalid_manifest")

    @app.exception_handler(RepliscopeError)
    async def _repliscope(_request: Request, exc: RepliscopeError) -> JSONResponse:
        from repliscope.store.errors import DatabaseError

        if isinstance(exc, DatabaseError):  # the run database failed: not the client's mistake
            return error_json(503, str(exc), None, "unavailable")
        return error_json(422, str(exc), None, "invalid")
