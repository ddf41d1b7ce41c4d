"""The web UI's run annotations (:mod:`repliscope.store.annotations`, the same calls as ``repliscope runs tag|note|
rename|delete`` and ``/api/v1``): the run page's annotations panel (``run_annotations.html``: display name, tag
chips, the note as plain text, who and when of each), its forms, and the admin's audit page ``/audit``.

Roles: a viewer reads; a runner adds and removes tags and edits the note; an admin also renames and deletes a run
and reads the audit. Every form is a POST with the page's CSRF token (checked after the role, before anything
changes), bounded (:data:`MAX_FORM_FIELDS` fields, the server's body limit); a refused value is the error page
naming the field and the rule. A delete needs its confirmation box ticked (the browser asks for it: ``required``;
the server checks it too) and lands on ``/runs?deleted=<id>`` with a notice read from the audit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from repliscope.errors import StoreError
from repliscope.service.web import page_kit as kit
from repliscope.service.web.page_kit import (
    CSRF_REFUSED,
    SignedIn,
    page_number_problem,
)

router = APIRouter(include_in_schema=False)

MAX_FORM_FIELDS = 4
AUDIT_PAGE_SIZE = 50
NOTE_HISTORY = 20
"""Earlier notes the run page lists."""
_RUN_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
"""A stored run id (``EvaluationRecord.run_id``'s alphabet): what ``/runs?deleted=`` may name."""


@dataclass(frozen=True)
class NoteVersion:
    text: str
    by: str
    at: str


@dataclass(frozen=True)
class AnnotationPanel:
    """What the run page shows of a run's annotations (times as ``YYYY-MM-DD HH:MM`` UTC)."""

    run_id: str
    display_name: str | None
    named: str
    """``by NAME, TIME`` of the rename ("" without one)."""
    note: str
    note_by: str
    tags: list[tuple[str, str]]
    """(tag, ``added by NAME, TIME``)."""
    history: list[NoteVersion] = field(default_factory=list)


def _when(value: Any) -> str:
    return "" if value is None else f"{value:%Y-%m-%d %H:%M}"


def annotation_panel(store: Any, run_id: str) -> AnnotationPanel:
    """The annotations of the stored run ``run_id`` (a full id): a StoreError when it is not stored (deleted
    since the page's record was cached), so the page answers 404 rather than show a deleted run."""
    notes = store.annotations.get(run_id)
    entries = store.annotations.note_history(notes.run_id, limit=NOTE_HISTORY + 1)
    history = [NoteVersion((e.after or {}).get("note") or "", e.actor, _when(e.at)) for e in entries[1:]]
    return AnnotationPanel(
        run_id=notes.run_id,
        display_name=notes.display_name,
        named=f"by {notes.named_by}, {_when(notes.named_at)} UTC" if notes.named_by else "",
        note=notes.note or "",
        note_by=f"by {notes.note_by}, {_when(notes.note_at)} UTC" if notes.note_by else "",
        tags=[(t.tag, f"added by {t.added_by}, {_when(t.added_at)} UTC") for t in notes.tags],
        history=history,
    )


def deleted_notice(store: Any, value: str, principal: Any) -> str | None:
    """The runs page's notice after a delete (``/runs?deleted=<id>``): read from the audit, so a link cannot make
    the page claim a deletion that did not happen; None for anything else. Only an admin deletes and reads the
    audit, so only an admin gets the notice: a viewer sent the link learns nothing of the deleted run (its name,
    model, who deleted it)."""
    if not kit.role_at_least(principal, "admin"):
        return None
    if not value or not _RUN_ID.fullmatch(value):
        return None
    try:
        entry = store.annotations.deletion(value)
    except StoreError:
        return None
    if entry is None:
        return None
    kept = entry.before or {}
    name = kept.get("display_name") or f"{kept.get('manifest_name')} {kept.get('manifest_version')}"
    return (
        f"Run {entry.run_id[:12]} ({name}) was deleted by {entry.actor} at {_when(entry.at)} UTC; the audit keeps "
        "its summary."
    )


def _back(run_id: str, anchor: str = "annotations") -> RedirectResponse:
    return RedirectResponse(f"/runs/{quote(run_id, safe='')}#{anchor}", status_code=303)


async def _form(request: Request, principal: Any, role: str, what: str) -> tuple[Any, Response | None]:
    """The form of an annotation POST when ``principal`` has ``role`` and the form its CSRF token; else the
    refusal page (the role is checked before the body is read)."""
    if not kit.role_at_least(principal, role):
        return None, kit.error_page(
            principal, 403, f"{what} needs the role '{role}'; the token '{principal.name}' has '{principal.role}'"
        )
    form = await request.form(max_files=0, max_fields=MAX_FORM_FIELDS)
    if not kit.form_csrf_ok(form, principal):
        return None, kit.error_page(principal, 403, CSRF_REFUSED)
    return form, None


async def _change(principal: Any, call: Any) -> Response | None:
    """Run a store change off the event loop; its refusal as the error page (404 unknown run, 422 a bad value
    naming the field and the rule, 503 the database)."""
    from repliscope.service.errors import ApiError
    from repliscope.service.routers.common import store_errors

    def run() -> None:
        with store_errors("run_id"):
            call()

    try:
        await run_in_threadpool(run)
    except ApiError as exc:
        return kit.error_page(principal, exc.status, exc.message)
    return None


@router.post("/runs/{run_id}/tags")
async def add_tag(request: Request, run_id: str, principal: SignedIn) -> Response:
    """The run page's "Add tags" form (runner): ``tags``, one or more separated by spaces or commas."""
    form, refusal = await _form(request, principal, "runner", "tagging a run")
    if refusal is not None:
        return refusal
    words = [w for w in re.split(r"[\s,]+", str(form.get("tags") or "")) if w]
    store = kit.store_of(request)
    refused = await _change(principal, lambda: store.annotations.add_tags(run_id, words, principal.name, "web"))
    return refused or _back(run_id)


@router.post("/runs/{run_id}/tags/remove")
async def remove_tag(request: Request, run_id: str, principal: SignedIn) -> Response:
    """A tag chip's remove button (runner): ``tag``."""
    form, refusal = await _form(request, principal, "runner", "untagging a run")
    if refusal is not None:
        return refusal
    tag = str(form.get("tag") or "")
    store = kit.store_of(request)
    refused = await _change(principal, lambda: store.annotations.remove_tags(run_id, [tag], principal.name, "web"))
    return refused or _back(run_id)


@router.post("/runs/{run_id}/note")
async def edit_note(request: Request, run_id: str, principal: SignedIn) -> Response:
    """The note form (runner): ``note`` replaces the run's note ("" clears it; the earlier one stays listed)."""
    form, refusal = await _form(request, principal, "runner", "editing a run's note")
    if refusal is not None:
        return refusal
    text = str(form.get("note") or "").replace("\r\n", "\n")  # a textarea sends CRLF line breaks
    store = kit.store_of(request)
    refused = await _change(principal, lambda: store.annotations.set_note(run_id, text, principal.name, "web"))
    return refused or _back(run_id)


@router.post("/runs/{run_id}/rename")
async def rename(request: Request, run_id: str, principal: SignedIn) -> Response:
    """The rename form (admin): ``display_name`` ("" goes back to the record's own name)."""
    form, refusal = await _form(request, principal, "admin", "renaming a run")
    if refusal is not None:
        return refusal
    name = str(form.get("display_name") or "").strip() or None
    store = kit.store_of(request)
    refused = await _change(principal, lambda: store.annotations.rename(run_id, name, principal.name, "web"))
    return refused or _back(run_id)


@router.post("/runs/{run_id}/delete")
async def delete(request: Request, run_id: str, principal: SignedIn) -> Response:
    """The delete form (admin): ``confirm`` must be ``yes`` (its box ticked); then the run is deleted and the
    browser lands on the runs list with a notice."""
    from repliscope.service.errors import ApiError
    from repliscope.service.routers.annotations import delete_stored_run

    form, refusal = await _form(request, principal, "admin", "deleting a run")
    if refusal is not None:
        return refusal
    if form.get("confirm") != "yes":
        return kit.error_page(principal, 422, "confirm: tick the box that confirms the deletion (it cannot be undone)")
    store = kit.store_of(request)
    try:
        entry = await run_in_threadpool(delete_stored_run, store, run_id, principal.name, "web")
    except ApiError as exc:
        return kit.error_page(principal, exc.status, exc.message)
    return RedirectResponse(f"/runs?deleted={quote(entry.run_id, safe='')}", status_code=303)


@router.get("/audit", response_class=HTMLResponse)
def audit_page(request: Request, principal: SignedIn, run_id: str = "", action: str = "", page: str = "1") -> Response:
    """The audit of tags, notes, renames and deletions, newest first (admin); it lists every stored text, under the
    pages' Content-Security-Policy (:data:`repliscope.service.guard.PAGE_CSP`)."""
    return _audit(request, principal, run_id, action, page)


def _audit(request: Request, principal: Any, run_id: str, action: str, page: str) -> Response:
    from repliscope.store.annotations import ACTIONS, change_text

    if not kit.role_at_least(principal, "admin"):
        return kit.error_page(
            principal, 403, f"the audit needs the role 'admin'; the token '{principal.name}' has '{principal.role}'"
        )
    if (problem := page_number_problem(page, "page")) is not None:
        return kit.error_page(principal, 422, problem)
    if action and action not in ACTIONS:
        return kit.error_page(principal, 422, f"action must be one of {', '.join(ACTIONS)}, not '{action[:40]}'")
    if len(run_id) > 100:
        return kit.error_page(principal, 422, "run_id must be at most 100 characters")
    number = int(page)
    entries, total = kit.store_of(request).annotations.audit(
        run_id=run_id or None, action=action or None, limit=AUDIT_PAGE_SIZE, offset=(number - 1) * AUDIT_PAGE_SIZE
    )
    rows = [
        {
            "at": _when(e.at),
            "actor": e.actor,
            "via": e.via,
            "action": e.action,
            "run_id": e.run_id,
            "change": change_text(e),
            "deleted": e.action == "delete",
        }
        for e in entries
    ]
    base = "&".join(f"{k}={quote(v, safe='')}" for k, v in (("run_id", run_id), ("action", action)) if v)
    return kit.page(
        principal,
        "audit.html",
        title="Audit of run annotations",
        rows=rows,
        total=total,
        page=number,
        pages=max(1, -(-total // AUDIT_PAGE_SIZE)),
        run_id=run_id,
        action=action,
        actions=ACTIONS,
        query=base,
    )
