"""``/api/v1``: a run's annotations (:mod:`repliscope.store.annotations`, what ``repliscope runs tag|untag|note|
rename|delete|audit`` call): read them (viewer), tag, untag and set the note (runner), rename and delete (admin),
and the audit (admin).

Every change is audited with the token's name and ``via`` = ``api`` (the web pages' forms: ``web``). A body is
JSON of at most :data:`MAX_BODY_BYTES`, checked from ``Content-Length`` (and while it streams) after the token and
its role, before a byte is read; the server-wide guard already refused an unauthenticated one.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Path, Query, Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.concurrency import run_in_threadpool

from repliscope.service.auth import require
from repliscope.service.errors import ERROR_RESPONSES, ApiError
from repliscope.service.routers.common import MAX_PAGE, UtcDatetime, store_errors, store_of
from repliscope.store.annotations import MAX_NAME_CHARS, MAX_NOTE_CHARS, TAG_RULE, check_tag

router = APIRouter(tags=["annotations"], responses=ERROR_RESPONSES)

MAX_BODY_BYTES = 64 * 1024
"""The largest JSON body of a note or a rename: a note of 10,000 characters each written ``\\uXXXX`` is 60,000."""
RunId = Annotated[str, Path(min_length=1, max_length=100, description="a run id or a unique prefix (6+ characters)")]
Tag = Annotated[str, Path(min_length=1, max_length=200, description=f"a tag: {TAG_RULE}")]
Action = Literal["tag", "untag", "note", "rename", "delete"]


class TagOut(BaseModel):
    tag: str
    added_by: str
    added_at: UtcDatetime


class NoteVersion(BaseModel):
    """One note the run had: its text, who wrote it and when (newest first)."""

    note: str
    by: str
    at: UtcDatetime


class AnnotationsOut(BaseModel):
    """A run's annotations: its display name (null: the record's own name), note, tags, and earlier notes."""

    run_id: str
    display_name: str | None
    named_by: str | None
    named_at: UtcDatetime | None
    note: str | None
    note_by: str | None
    note_at: UtcDatetime | None
    tags: list[TagOut]
    note_history: list[NoteVersion]


class NoteIn(BaseModel):
    """The run's new note ("" clears it; the earlier one stays in the history)."""

    model_config = ConfigDict(extra="forbid")
    note: str = Field(max_length=MAX_NOTE_CHARS)


class RenameIn(BaseModel):
    """The run's display name (null: back to the record's own name)."""

    model_config = ConfigDict(extra="forbid")
    display_name: str | None = Field(max_length=MAX_NAME_CHARS)


class AuditOut(BaseModel):
    id: int
    at: UtcDatetime
    actor: str
    via: str
    action: str
    run_id: str
    before: dict[str, Any] | None
    after: dict[str, Any] | None


class AuditPage(BaseModel):
    items: list[AuditOut]
    total: int
    page: int
    page_size: int


def annotations_of(store: Any, run_id: str, history: int = 20) -> dict[str, Any]:
    """A run's annotations with its last ``history`` notes (the audit's note entries), as :class:`AnnotationsOut`."""
    notes = store.annotations.get(run_id)
    entries = store.annotations.note_history(notes.run_id, limit=history)
    body: dict[str, Any] = notes.model_dump()
    body["note_history"] = [{"note": (e.after or {}).get("note") or "", "by": e.actor, "at": e.at} for e in entries]
    return body


def forget_deleted(store: Any, run_id: str) -> None:
    """Drop a deleted run from the pages' caches of recent records (the run page, its thumbnails, compare) and of
    drawn views (:data:`~repliscope.service.web.chart_cache.CHARTS`), so none of them serves it again, even to a
    run stored again under its id (they keep a few records and trust a run id to mean one record)."""
    from repliscope.service.web import artifacts
    from repliscope.service.web.chart_cache import CHARTS
    from repliscope.service.web.compare_cache import HEADS
    from repliscope.service.web.samples import RECENT

    CHARTS.forget(lambda key: key[:3] == ("run", store.url, run_id))
    artifacts.forget("run", run_id)

    for cache, record_of in ((RECENT, lambda v: v[0]), (HEADS, lambda v: v)):
        with cache.lock:
            for key in [k for k, v in cache.items.items() if k[0] == store.url and record_of(v).run_id == run_id]:
                del cache.items[key]


async def read_json(request: Request, model: type[BaseModel]) -> Any:
    """The request's JSON body as ``model``: a 415 for another content type, a 413 past :data:`MAX_BODY_BYTES`
    (from ``Content-Length`` before reading, else while streaming), a 422 naming ``body.<field>`` and the rule."""
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype != "application/json":
        raise ApiError(
            415,
            f"content type '{ctype or 'none'}' (allowed: application/json)",
            field="header.content-type",
            code="unsupported_media_type",
        )
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > MAX_BODY_BYTES:
        raise ApiError(413, f"the body is larger than {MAX_BODY_BYTES} bytes", field="body", code="too_large")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise ApiError(413, f"the body is larger than {MAX_BODY_BYTES} bytes", field="body", code="too_large")
        chunks.append(chunk)
    try:
        return model.model_validate_json(b"".join(chunks))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in ("body", *first["loc"]))
        raise ApiError(422, f"{where}: {first['msg']}", field=where, code="invalid") from None


def _body_doc(model: type[BaseModel]) -> dict[str, Any]:
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": model.model_json_schema()}}}}


@router.get("/runs/{run_id}/annotations", response_model=AnnotationsOut)
def get_annotations(request: Request, run_id: RunId, _principal: Annotated[Any, Depends(require("viewer"))]) -> Any:
    """The run's display name, note, tags (who and when of each) and its last 20 notes."""
    store = store_of(request)
    with store_errors("run_id"):
        return annotations_of(store, run_id)


@router.put("/runs/{run_id}/tags/{tag}", response_model=AnnotationsOut)
def put_tag(request: Request, run_id: RunId, tag: Tag, principal: Annotated[Any, Depends(require("runner"))]) -> Any:
    """Add ``tag`` to the run (nothing changes when it has it); at most 32 tags a run."""
    store = store_of(request)
    with store_errors("run_id"):
        check_tag(tag, "path.tag")
        notes = store.annotations.add_tags(run_id, [tag], principal.name, "api")
        return annotations_of(store, notes.run_id)


@router.delete("/runs/{run_id}/tags/{tag}", response_model=AnnotationsOut)
def delete_tag(request: Request, run_id: RunId, tag: Tag, principal: Annotated[Any, Depends(require("runner"))]) -> Any:
    """Remove ``tag`` from the run (404 naming ``tag`` when the run does not have it)."""
    store = store_of(request)
    with store_errors("run_id"):
        check_tag(tag, "path.tag")
        notes = store.annotations.remove_tags(run_id, [tag], principal.name, "api")
        return annotations_of(store, notes.run_id)


@router.put("/runs/{run_id}/note", response_model=AnnotationsOut, openapi_extra=_body_doc(NoteIn))
async def put_note(request: Request, run_id: RunId, principal: Annotated[Any, Depends(require("runner"))]) -> Any:
    """Replace the run's note (JSON ``{"note": "..."}``, at most 10,000 characters, no control characters but
    line breaks and tabs; "" clears it). The note is text: pages show it as text, never as HTML."""
    body = await read_json(request, NoteIn)
    store = store_of(request)

    def change() -> Any:
        with store_errors("run_id", body_refs=True):
            notes = store.annotations.set_note(run_id, body.note, principal.name, "api")
        with store_errors("run_id"):
            return annotations_of(store, notes.run_id)

    return await run_in_threadpool(change)


@router.patch("/runs/{run_id}", response_model=AnnotationsOut, openapi_extra=_body_doc(RenameIn))
async def rename_run(request: Request, run_id: RunId, principal: Annotated[Any, Depends(require("admin"))]) -> Any:
    """Set the run's display name (JSON ``{"display_name": "..."}``, 1 to 200 characters; null: back to the
    record's own name). The record and its result hash are not changed."""
    body = await read_json(request, RenameIn)
    store = store_of(request)

    def change() -> Any:
        with store_errors("run_id", body_refs=True):
            notes = store.annotations.rename(run_id, body.display_name, principal.name, "api")
        with store_errors("run_id"):
            return annotations_of(store, notes.run_id)

    return await run_in_threadpool(change)


def delete_stored_run(store: Any, run_id: str, actor: str, via: str) -> Any:
    """Delete the run (:meth:`AnnotationStore.delete_run`) and forget it in the pages' caches: the audit entry."""
    with store_errors("run_id"):
        entry = store.annotations.delete_run(run_id, actor, via)
    forget_deleted(store, entry.run_id)
    return entry


@router.delete("/runs/{run_id}", response_model=AuditOut)
def delete_run(request: Request, run_id: RunId, principal: Annotated[Any, Depends(require("admin"))]) -> Any:
    """Delete the run, its samples, tags, note and trace. The answer is the audit entry, whose ``before`` keeps
    what was deleted (id, model, result hash, headline metric, name, tags, note)."""
    return delete_stored_run(store_of(request), run_id, principal.name, "api").model_dump()


@router.get("/audit", response_model=AuditPage)
def get_audit(
    request: Request,
    _principal: Annotated[Any, Depends(require("admin"))],
    run_id: Annotated[
        str | None, Query(max_length=100, description="one run id or a unique prefix (deleted runs too)")
    ] = None,
    action: Action | None = None,
    page: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 1,
    page_size: Annotated[int, Query(ge=1, le=500)] = 100,
) -> Any:
    """The audit of annotations and deletions, newest first: who, when, through what, the values before/after."""
    store = store_of(request)
    with store_errors():
        entries, total = store.annotations.audit(
            run_id=run_id, action=action, limit=page_size, offset=(page - 1) * page_size
        )
    return {"items": [e.model_dump() for e in entries], "total": total, "page": page, "page_size": page_size}
