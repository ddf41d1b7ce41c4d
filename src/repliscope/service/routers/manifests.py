"""``/api/v1/manifests``: upload (validated with the CLI's loader, stored immutable as name@version), list/search,
get (raw + resolved). Uploaded manifests may take their files only from ``package://`` and ``https://`` (with
sha256): the server never reads a path a client names; and their architecture code only from the packages the
admin allowed (:func:`check_code`)."""

from __future__ import annotations

import asyncio
import re
import tempfile
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool

from repliscope.errors import ManifestError
from repliscope.service.auth import require
from repliscope.service.errors import ERROR_RESPONSES, ApiError
from repliscope.service.routers.common import UtcDatetime, store_errors, store_of

router = APIRouter(prefix="/manifests", tags=["manifests"], responses=ERROR_RESPONSES)

YAML_TYPES = ("text/yaml", "application/yaml", "application/x-yaml", "text/x-yaml", "text/plain")
_SAFE_NAME = re.compile(r"[^A-Za-z0-9_.-]")


class ManifestSummary(BaseModel):
    ref: str
    name: str
    version: str
    sha256: str
    uploaded_at: UtcDatetime
    uploaded_by: str


class ManifestUploaded(ManifestSummary):
    created: bool
    """False: the same text was already stored under this name@version."""
    warnings: list[str]


class ManifestDetail(ManifestSummary):
    text: str
    resolved: dict[str, Any]
    """The validated manifest (every default filled in), as the CLI's loader reads it."""
    warnings: list[str]


def _summary(m: Any) -> dict[str, Any]:
    return {
        "ref": f"{m.name}@{m.version}",
        "name": m.name,
        "version": m.version,
        "sha256": m.sha256,
        "uploaded_at": m.uploaded_at,
        "uploaded_by": m.uploaded_by,
    }


def load_text(text: str, filename: str = "manifest.yaml") -> Any:
    """Validate ``text`` with the CLI's loader (the same messages, with ``filename`` for the file); a
    ManifestError (-> 422 naming the field) when it is not valid."""
    from repliscope.manifest.loader import load_manifest

    name = _SAFE_NAME.sub("_", Path(filename).name) or "manifest.yaml"
    with tempfile.TemporaryDirectory(prefix="repliscope-upload-") as tmp:
        path = Path(tmp) / name
        path.write_text(text, encoding="utf-8")
        try:
            loaded = load_manifest(path)
        except ManifestError as exc:
            raise ApiError(
                422, str(exc).replace(f"{tmp}/", ""), field=exc.field or "body", code="invalid_manifest"
            ) from None
        loaded.warnings = [w.replace(f"{tmp}/", "") for w in loaded.warnings]
        return loaded


VALIDATE_TIMEOUT_S = 30.0
"""Longest a manifest's validation may take before the upload is refused (503)."""
VALIDATIONS_AT_ONCE = 2
"""Validations running at once (the others wait): uploads cannot take every thread of the server."""
_validations: dict[int, asyncio.Semaphore] = {}


async def validate_off_loop(text: str, filename: str = "manifest.yaml", timeout: float = VALIDATE_TIMEOUT_S) -> Any:
    """:func:`load_text` in a worker thread (the event loop keeps answering, e.g. ``/health``), at most
    :data:`VALIDATIONS_AT_ONCE` at a time, refused (503, ``validation_timeout``) after ``timeout`` seconds (the
    loader's own limits bound the work; the thread finishes on its own)."""
    loop_id = id(asyncio.get_running_loop())
    gate = _validations.setdefault(loop_id, asyncio.Semaphore(VALIDATIONS_AT_ONCE))
    try:
        async with asyncio.timeout(timeout):
            async with gate:
                return await run_in_threadpool(load_text, text, filename)
    except TimeoutError:
        raise ApiError(
            503,
            f"validating the manifest took longer than {timeout:g} s; try again later or make it smaller",
            field="body",
            code="validation_timeout",
        ) from None


PINNED_REMOTE_SCHEMES = ("https://", "pypi-wheel://", "pypi-sdist://")
"""Sources fetched from elsewhere (a URL, one file of a PyPI wheel or sdist): accepted with a sha256."""


def check_sources(loaded: Any) -> None:
    """Refuse (422) a manifest reading anything but ``package://`` files, ``builtin:`` label sets, or
    ``https://`` / ``pypi-wheel://`` / ``pypi-sdist://`` files with a sha256 (:data:`PINNED_REMOTE_SCHEMES`)."""
    m = loaded.manifest

    def remote(uri: str, sha256: str | None, field: str) -> None:
        if uri.startswith("package://"):
            return
        scheme = next((s for s in PINNED_REMOTE_SCHEMES if uri.startswith(s)), None)
        if scheme is not None:
            if not sha256:
                raise ApiError(
                    422,
                    f"{uri}: a {scheme} file needs a sha256",
                    field=field.rsplit(".", 1)[0] + ".sha256",
                    code="source_policy",
                )
            return
        raise ApiError(
            422,
            f"'{uri}': an uploaded manifest may only use package://, builtin: (labels) or https://, "
            "pypi-wheel://, pypi-sdist:// (with sha256) sources; local paths are refused on the server",
            field=field,
            code="source_policy",
        )

    remote(m.source.uri, m.source.sha256, "source.uri")
    if m.source.config is not None:
        remote(m.source.config.uri, m.source.config.sha256, "source.config.uri")
    if m.labels is not None and not m.labels.source.startswith("builtin:"):
        remote(m.labels.source, m.labels.sha256, "labels.source")


def check_code(loaded: Any, allowed: tuple[str, ...]) -> None:
    """Refuse (422, ``code_policy``) a manifest naming code this server does not load: an ``architecture.path``
    (a local module folder), an ``architecture.package`` outside ``allowed`` (the admin's allowlist,
    ``ServiceConfig.architecture_packages``) or a factory that is not a module of that package
    (:func:`repliscope.manifest.code_refs.check_allowlisted`: metadata only, nothing is imported)."""
    from repliscope.manifest.code_refs import CodeRefError, check_allowlisted

    arch = loaded.manifest.architecture
    if arch is None:
        return
    try:
        check_allowlisted(factory=arch.factory, package=arch.package, path=arch.path, allowed=allowed)
    except CodeRefError as exc:
        raise ApiError(422, str(exc), field=exc.field, code="code_policy") from None


async def _read_limited(request: Request, limit: int) -> bytes:
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ApiError(413, f"the upload is larger than {limit} bytes", field="body", code="too_large")
        chunks.append(chunk)
    return b"".join(chunks)


async def _upload_text(request: Request) -> tuple[str, str]:
    limit = request.app.state.config.max_upload_bytes
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype == "multipart/form-data":
        form = await request.form(max_files=1, max_fields=2)
        upload = form.get("file")
        if upload is None or isinstance(upload, str):
            raise ApiError(422, "multipart upload: expected a file field 'file'", field="body.file")
        data = await upload.read(limit + 1)
        if len(data) > limit:
            raise ApiError(413, f"the upload is larger than {limit} bytes", field="body.file", code="too_large")
        filename = upload.filename or "manifest.yaml"
    elif ctype in YAML_TYPES:
        data, filename = await _read_limited(request, limit), "manifest.yaml"
    else:
        raise ApiError(
            415,
            f"content type '{ctype or 'none'}' (allowed: {', '.join(YAML_TYPES)}, multipart/form-data with a 'file')",
            field="header.content-type",
            code="unsupported_media_type",
        )
    try:
        return data.decode("utf-8"), filename
    except UnicodeDecodeError:
        raise ApiError(422, "the manifest is not UTF-8 text", field="body") from None


_MANIFEST_LINKS = {  # OpenAPI links: what a client (and the stateful fuzz test) can do with an upload's ref
    "GetManifest": {
        "operationRef": "#/paths/~1api~1v1~1manifests~1{ref}/get",
        "parameters": {"ref": "$response.body#/ref"},
    },
    "GetManifestRaw": {
        "operationRef": "#/paths/~1api~1v1~1manifests~1{ref}~1raw/get",
        "parameters": {"ref": "$response.body#/ref"},
    },
}
_UPLOAD_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "text/yaml": {"schema": {"type": "string"}},
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["file"],
                    "properties": {"file": {"type": "string", "format": "binary"}},
                }
            },
        },
    }
}


@router.post(
    "",
    status_code=201,
    response_model=ManifestUploaded,
    openapi_extra=_UPLOAD_BODY,
    responses={
        200: {"model": ManifestUploaded, "description": "the same text was already stored"},
        201: {"links": _MANIFEST_LINKS},
    },
)
async def upload_manifest(request: Request, principal: Annotated[Any, Depends(require("runner"))]) -> Any:
    """Upload a manifest (YAML as ``text/yaml``, or multipart ``file``): validated with the CLI's loader (the same
    error messages), stored as name@version. Immutable: the same text again is 200, another text 409."""
    text, filename = await _upload_text(request)
    body = await store_upload(request, principal, text, filename)
    return JSONResponse(body.model_dump(mode="json"), status_code=201 if body.created else 200)


async def store_upload(request: Request, principal: Any, text: str, filename: str) -> ManifestUploaded:
    """An uploaded manifest's checks and storage, shared by this API and the wizard's upload form
    (:func:`repliscope.service.web.wizard.upload_manifest`): validated off the event loop with the CLI's loader
    (:func:`validate_off_loop`), its sources (:func:`check_sources`) and code (:func:`check_code`) checked, then
    stored as name@version; an ApiError (422 naming the field, 409 another text under that name@version, 503)
    otherwise, and nothing stored."""
    from repliscope.store.service_tables import put_manifest

    loaded = await validate_off_loop(text, filename)
    check_sources(loaded)
    check_code(loaded, request.app.state.config.architecture_packages)
    m = loaded.manifest
    with store_errors():
        stored, created = await run_in_threadpool(
            put_manifest, store_of(request), m.name, m.version, text, uploaded_by=principal.name
        )
    return ManifestUploaded(**_summary(stored), created=created, warnings=loaded.warnings)


@router.get("", response_model=list[ManifestSummary])
def list_manifests(
    request: Request,
    _: Annotated[Any, Depends(require("viewer"))],
    search: Annotated[str | None, Query(max_length=200, description="name substring")] = None,
) -> Any:
    """Stored manifests (name substring search, case-insensitive), by name and version."""
    from repliscope.store.service_tables import list_manifests as list_stored

    with store_errors():
        return [_summary(m) for m in list_stored(store_of(request), search)]


@router.get("/{ref}", response_model=ManifestDetail)
def get_manifest(request: Request, ref: str, _: Annotated[Any, Depends(require("viewer"))]) -> Any:
    """One manifest ``name@version``: the stored text and the resolved (validated) manifest."""
    from repliscope.store.service_tables import get_manifest as get_stored

    with store_errors("manifest"):
        stored = get_stored(store_of(request), ref)
    loaded = load_text(stored.text)
    return {
        **_summary(stored),
        "text": stored.text,
        "resolved": loaded.manifest.model_dump(mode="json"),
        "warnings": loaded.warnings,
    }


@router.get("/{ref}/raw", responses={200: {"content": {"text/yaml": {"schema": {"type": "string"}}}}})
def get_manifest_raw(request: Request, ref: str, _: Annotated[Any, Depends(require("viewer"))]) -> Any:
    """The stored YAML text, byte for byte."""
    from repliscope.store.service_tables import get_manifest as get_stored

    with store_errors("manifest"):
        stored = get_stored(store_of(request), ref)
    return PlainTextResponse(stored.text, media_type="text/yaml")
