"""Run annotations: tags, a note, a display name, and the audit of every change, a run's deletion included
(migration 0009: ``run_tags``, ``run_labels``, ``run_audit``).

What a user of MLflow or W&B does to a run, done to a stored evaluation record without touching it: the record and
its result hash are immutable, so a *rename* sets a display name shown wherever the run is listed (the record's own
manifest name stays in its provenance); a *note* is one editable text per run (the current one in ``run_labels``,
every earlier one in the audit); *tags* are short words a run list filters by. Each change is written with who made
it and when, and an audit entry (``before`` / ``after``) in the same transaction.

**Deletion is a hard delete with an audit entry**, not a soft delete: the run row, its samples, tags, labels and
stored trace are removed in one transaction that writes the audit entry holding what was deleted (id, manifest
name, version and sha256, display name, runtime, dataset, result hash, headline metric with its interval, verdict,
tags, note) and who deleted it when. A soft-deleted row would have to be left out by every reader of the runs
table (lists, pages, compare, the models page, sweeps, reports, exports, job links, the API: more than fifteen
queries in several modules), and one reader that forgot would show a deleted run; removed rows are gone from all
of them by construction, and a deletion made to withdraw data (a leaked path, a wrong dataset) really withdraws it.
The audit keeps the summary, never the record or its samples.

Bounds (each refusal an :class:`~repliscope.store.errors.InvalidInputError` naming the field and the rule): a tag
is 1 to :data:`MAX_TAG_CHARS` characters of :data:`TAG_CHARS`, a run has at most :data:`MAX_TAGS` tags, a note at
most :data:`MAX_NOTE_CHARS` characters, a display name at most :data:`MAX_NAME_CHARS`; notes and names hold no
control characters (a note may hold line breaks and tabs).

:class:`AnnotationStore` is ``RunStore.annotations``; it returns pydantic models, never rows.
"""

from __future__ import annotations

import builtins
import contextlib
import re
import unicodedata
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict
from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from repliscope.store.database import Database, now, resolve_id
from repliscope.store.errors import InvalidInputError, NotFoundError, UnknownIdError
from repliscope.store.models import RunAuditRow, RunLabelRow, RunRow, RunTagRow, SampleRow, TraceRow

MAX_TAG_CHARS = 64
TAG_CHARS = "letters A-Z a-z, digits, '_', '.', ':' and '-'"
TAG_PATTERN = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
MAX_TAGS = 32
"""The most tags one run carries."""
MAX_NOTE_CHARS = 10_000
MAX_NAME_CHARS = 200
MAX_ACTOR_CHARS = 200
VIAS = ("cli", "api", "web")
"""How a change was made: the command line (local store access), the REST API, or the web UI."""
ACTIONS = ("tag", "untag", "note", "rename", "delete")
TAG_RULE = f"1 to {MAX_TAG_CHARS} characters: {TAG_CHARS}"
NOTE_RULE = f"at most {MAX_NOTE_CHARS} characters, no control characters but line breaks and tabs"
NAME_RULE = f"1 to {MAX_NAME_CHARS} characters, no control characters"
_NOTE_SPACING = frozenset("\n\r\t")
_DELETED_COLUMNS = (
    "run_id",
    "created_at",
    "kind",
    "manifest_name",
    "manifest_version",
    "manifest_sha256",
    "runtime",
    "dataset_name",
    "num_samples",
    "result_hash",
    "metric_name",
    "metric_value",
    "metric_low",
    "metric_high",
    "verdict",
    "sweep_id",
    "variant",
)
"""What a delete's audit entry keeps of the run's row (``before``), beside its display name, tags and note."""


class TagInfo(BaseModel):
    """One tag of a run, who added it and when (UTC)."""

    model_config = ConfigDict(frozen=True)
    tag: str
    added_by: str
    added_at: datetime


class RunAnnotations(BaseModel):
    """A run's annotations: ``display_name`` (None: the run was never renamed, or the name was cleared), its
    current ``note`` (None or "": none), tags in the order they were added; times UTC."""

    model_config = ConfigDict(frozen=True)
    run_id: str
    display_name: str | None = None
    named_by: str | None = None
    named_at: datetime | None = None
    note: str | None = None
    note_by: str | None = None
    note_at: datetime | None = None
    tags: list[TagInfo] = []


class RunLabel(BaseModel):
    """What a run list shows beside a run: its display name and tag words."""

    model_config = ConfigDict(frozen=True)
    display_name: str | None = None
    tags: list[str] = []


class AuditEntry(BaseModel):
    """One audited change: who (``actor``, through ``via``), when (UTC), ``action`` on ``run_id``, the values
    ``before`` and ``after`` (a delete's ``before``: what was deleted, ``after`` None)."""

    model_config = ConfigDict(frozen=True)
    id: int
    at: datetime
    actor: str
    via: str
    action: str
    run_id: str
    before: dict[str, Any] | None = None
    after: dict[str, Any] | None = None


def _control_chars(text: str, allowed: frozenset[str] = frozenset()) -> list[str]:
    """The control / format characters of ``text`` (Unicode categories Cc, Cf, Cs, Co, Cn; ``allowed`` kept)."""
    return [c for c in text if c not in allowed and unicodedata.category(c).startswith("C")]


def check_tag(tag: str, field: str = "tag") -> str:
    """``tag`` when it follows :data:`TAG_RULE`, else an InvalidInputError naming ``field`` and the rule."""
    if not isinstance(tag, str) or not TAG_PATTERN.fullmatch(tag):
        shown = repr(tag[:80]) if isinstance(tag, str) else type(tag).__name__
        raise InvalidInputError(f"{field}: {shown} is not a tag (a tag is {TAG_RULE})", field)
    return tag


def check_note(text: str, field: str = "note") -> str:
    """``text`` when it follows :data:`NOTE_RULE`, else an InvalidInputError naming ``field`` and the rule."""
    if len(text) > MAX_NOTE_CHARS:
        raise InvalidInputError(f"{field}: {len(text)} characters; a note is {NOTE_RULE}", field)
    bad = _control_chars(text, _NOTE_SPACING)
    if bad:
        raise InvalidInputError(
            f"{field}: holds the control character U+{ord(bad[0]):04X}; a note is {NOTE_RULE}", field
        )
    return text


def check_display_name(name: str, field: str = "display_name") -> str:
    """``name`` stripped when it follows :data:`NAME_RULE`, else an InvalidInputError naming ``field``."""
    stripped = name.strip()
    if not stripped or len(stripped) > MAX_NAME_CHARS:
        raise InvalidInputError(f"{field}: {len(stripped)} characters; a display name is {NAME_RULE}", field)
    bad = _control_chars(stripped)
    if bad:
        raise InvalidInputError(
            f"{field}: holds the control character U+{ord(bad[0]):04X}; a display name is {NAME_RULE}", field
        )
    return stripped


def check_actor(actor: str, via: str) -> None:
    """Who made a change must be named (1 to :data:`MAX_ACTOR_CHARS` characters, no control characters) and
    ``via`` one of :data:`VIAS`."""
    if via not in VIAS:
        raise InvalidInputError(f"via: {via!r} is not allowed (allowed: {', '.join(VIAS)})", "via")
    if not actor.strip() or len(actor) > MAX_ACTOR_CHARS or _control_chars(actor):
        raise InvalidInputError(
            f"actor: {actor[:80]!r} is not a name (1 to {MAX_ACTOR_CHARS} characters, no control characters)", "actor"
        )


class AnnotationStore:
    """Tags, notes, display names, deletions and their audit in ``db`` (see the module)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def _resolve(self, session: Session, run_id: str) -> str:
        return resolve_id(
            session, RunRow.run_id, run_id, "run", newest_first=RunRow.created_at, recent_in=self.db.shown_url
        )

    # ---- reading ----

    def get(self, run_id: str) -> RunAnnotations:
        """The annotations of run ``run_id`` (full id or unique prefix; unknown: UnknownIdError)."""
        with self.db.session() as session:
            return _annotations(session, self._resolve(session, run_id))

    def labels(self, run_ids: Iterable[str]) -> dict[str, RunLabel]:
        """Display names and tags of the runs ``run_ids`` (full ids) that have any: what a run list shows."""
        ids = builtins.list(dict.fromkeys(run_ids))
        if not ids:
            return {}
        names: dict[str, str | None] = {}
        tags: dict[str, builtins.list[str]] = {}
        with self.db.session() as session:
            for rid, name in session.execute(
                select(RunLabelRow.run_id, RunLabelRow.display_name).where(
                    RunLabelRow.run_id.in_(ids), RunLabelRow.display_name.is_not(None)
                )
            ):
                names[rid] = name
            for rid, tag in session.execute(
                select(RunTagRow.run_id, RunTagRow.tag)
                .where(RunTagRow.run_id.in_(ids))
                .order_by(RunTagRow.run_id, RunTagRow.added_at, RunTagRow.tag)
            ):
                tags.setdefault(rid, []).append(tag)
        return {rid: RunLabel(display_name=names.get(rid), tags=tags.get(rid, [])) for rid in {*names, *tags}}

    def ensure_stored(self, run_ids: Sequence[str]) -> None:
        """UnknownIdError for the first of ``run_ids`` (full ids) no longer stored: a page that caches records
        (compare) asks before showing them, as a run deleted by another process stays in its cache."""
        wanted = builtins.list(dict.fromkeys(run_ids))
        with self.db.session() as session:
            found = set(session.scalars(select(RunRow.run_id).where(RunRow.run_id.in_(wanted))))
        for run_id in wanted:
            if run_id not in found:
                raise UnknownIdError(f"unknown run id '{run_id}' (deleted)", "run", run_id)

    def deleted(self, run_ids: Iterable[str]) -> dict[str, datetime]:
        """Of ``run_ids`` (full ids), each deleted and not stored again, with when (UTC) it was last deleted (two
        queries): a page that links runs (a job's results) shows those as deleted, without a link."""
        wanted = builtins.list(dict.fromkeys(run_ids))
        with self.db.session() as session:
            stored = set(session.scalars(select(RunRow.run_id).where(RunRow.run_id.in_(wanted))))
            gone = [r for r in wanted if r not in stored]
            rows = session.execute(
                select(RunAuditRow.run_id, func.max(RunAuditRow.at))
                .where(RunAuditRow.action == "delete", RunAuditRow.run_id.in_(gone))
                .group_by(RunAuditRow.run_id)
            )
            return {rid: at for rid, at in rows}

    def audit(
        self, run_id: str | None = None, action: str | None = None, limit: int = 100, offset: int = 0
    ) -> tuple[builtins.list[AuditEntry], int]:
        """Audit entries, newest first (``run_id``: of that run id, or the one run id of the audit it uniquely
        starts (6+ characters; deleted runs included: their ids are no longer in the runs table); ``action``: one
        of :data:`ACTIONS`) -> (one page, total)."""
        if action is not None and action not in ACTIONS:
            raise InvalidInputError(f"action: {action!r} is not an action (allowed: {', '.join(ACTIONS)})", "action")
        if not 1 <= limit <= 1000:
            raise InvalidInputError(f"limit {limit} must be 1..1000", "limit")
        if offset < 0:
            raise InvalidInputError(f"offset {offset} must be at least 0", "offset")
        with self.db.session() as session:
            conditions = []
            if run_id is not None:
                with contextlib.suppress(UnknownIdError):  # no entry of that run: an empty page
                    run_id = resolve_id(session, RunAuditRow.run_id, run_id, "run", distinct=True)
                conditions.append(RunAuditRow.run_id == run_id)
            if action is not None:
                conditions.append(RunAuditRow.action == action)
            rows = session.scalars(
                select(RunAuditRow)
                .where(*conditions)
                .order_by(RunAuditRow.at.desc(), RunAuditRow.id.desc())
                .offset(offset)
                .limit(limit)
            ).all()
            total = int(session.scalar(select(func.count()).select_from(RunAuditRow).where(*conditions)) or 0)
            return [_entry(r) for r in rows], total

    def note_history(self, run_id: str, limit: int = 20) -> builtins.list[AuditEntry]:
        """The newest ``limit`` note entries of the stored run ``run_id`` (a full id) written since it was last
        deleted: a run stored again under a deleted run's id (``runs import`` keeps ids) starts with no history,
        so its readers never see the notes the deletion withdrew (the admin's :meth:`audit` keeps them)."""
        if not 1 <= limit <= 1000:
            raise InvalidInputError(f"limit {limit} must be 1..1000", "limit")
        with self.db.session() as session:
            last_delete = session.scalar(
                select(func.max(RunAuditRow.id)).where(RunAuditRow.run_id == run_id, RunAuditRow.action == "delete")
            )
            rows = session.scalars(
                select(RunAuditRow)
                .where(
                    RunAuditRow.run_id == run_id,
                    RunAuditRow.action == "note",
                    RunAuditRow.id > (last_delete or 0),
                )
                .order_by(RunAuditRow.at.desc(), RunAuditRow.id.desc())
                .limit(limit)
            ).all()
            return [_entry(r) for r in rows]

    def deletion(self, run_id: str) -> AuditEntry | None:
        """The audit entry of the deletion of run ``run_id`` (an exact id), None when it was not deleted."""
        entries, _ = self.audit(run_id=run_id, action="delete", limit=1)
        return entries[0] if entries else None

    # ---- changing ----

    def add_tags(self, run_id: str, tags: Sequence[str], actor: str, via: str) -> RunAnnotations:
        """Add ``tags`` to the run (those it has already are left as they are); one audit entry when any is new.
        More than :data:`MAX_TAGS` on the run: InvalidInputError naming ``tags``."""
        check_actor(actor, via)
        wanted = _checked_tags(tags)
        with self.db.session(write=True, failing="the tags could not be written to") as session:
            full_id = self._resolve(session, run_id)
            have = _tags_of(session, full_id)
            new = [t for t in wanted if t not in have]
            if len(have) + len(new) > MAX_TAGS:
                raise InvalidInputError(
                    f"tags: run {full_id} has {len(have)} tags; {len(new)} more would pass the limit of {MAX_TAGS}",
                    "tags",
                )
            if new:
                at = now()
                session.add_all(RunTagRow(run_id=full_id, tag=t, added_by=actor, added_at=at) for t in new)
                _audit(session, actor, via, "tag", full_id, {"tags": have}, {"tags": have + new}, at)
                session.flush()
            return _annotations(session, full_id)

    def remove_tags(self, run_id: str, tags: Sequence[str], actor: str, via: str) -> RunAnnotations:
        """Remove ``tags`` from the run; a tag the run does not have is a NotFoundError naming ``tag``."""
        check_actor(actor, via)
        unwanted = _checked_tags(tags)
        with self.db.session(write=True, failing="the tags could not be written to") as session:
            full_id = self._resolve(session, run_id)
            have = _tags_of(session, full_id)
            missing = [t for t in unwanted if t not in have]
            if missing:
                raise NotFoundError(f"tag: run {full_id} has no tag {missing[0]!r}", "tag")
            session.execute(delete(RunTagRow).where(RunTagRow.run_id == full_id, RunTagRow.tag.in_(unwanted)))
            after = [t for t in have if t not in unwanted]
            _audit(session, actor, via, "untag", full_id, {"tags": have}, {"tags": after}, now())
            session.flush()
            return _annotations(session, full_id)

    def set_note(self, run_id: str, text: str, actor: str, via: str) -> RunAnnotations:
        """Replace the run's note by ``text`` ("" clears it); the previous note stays in the audit."""
        check_actor(actor, via)
        check_note(text)
        with self.db.session(write=True, failing="the note could not be written to") as session:
            full_id = self._resolve(session, run_id)
            labels = _labels_row(session, full_id)
            before = labels.note or ""
            if before != text:
                at = now()
                labels.note, labels.note_by, labels.note_at = text, actor, at
                _audit(session, actor, via, "note", full_id, {"note": before}, {"note": text}, at)
                session.flush()
            return _annotations(session, full_id)

    def rename(self, run_id: str, name: str | None, actor: str, via: str) -> RunAnnotations:
        """Set the run's display name (None: back to the record's own name); the record is not changed."""
        check_actor(actor, via)
        shown = None if name is None else check_display_name(name)
        with self.db.session(write=True, failing="the display name could not be written to") as session:
            full_id = self._resolve(session, run_id)
            labels = _labels_row(session, full_id)
            before = labels.display_name
            if before != shown:
                at = now()
                labels.display_name, labels.named_by, labels.named_at = shown, actor, at
                _audit(session, actor, via, "rename", full_id, {"display_name": before}, {"display_name": shown}, at)
                session.flush()
            return _annotations(session, full_id)

    def delete_run(self, run_id: str, actor: str, via: str) -> AuditEntry:
        """Delete the run, its samples, tags, labels and stored trace in one transaction, and write the audit
        entry of what was deleted (see the module: why this is not a soft delete)."""
        check_actor(actor, via)
        with self.db.session(write=True, failing=f"run {run_id} could not be deleted from") as session:
            full_id = self._resolve(session, run_id)
            row = session.execute(
                select(*(getattr(RunRow, c) for c in _DELETED_COLUMNS)).where(RunRow.run_id == full_id)
            ).one()
            kept: dict[str, Any] = dict(zip(_DELETED_COLUMNS, row, strict=True))
            kept["created_at"] = kept["created_at"].isoformat()
            notes = _annotations(session, full_id)
            kept.update(display_name=notes.display_name, note=notes.note, tags=[t.tag for t in notes.tags])
            for table in (RunTagRow, RunLabelRow, SampleRow):
                session.execute(delete(table).where(table.run_id == full_id))
            session.execute(delete(TraceRow).where(TraceRow.run_id == full_id))
            session.execute(delete(RunRow).where(RunRow.run_id == full_id))
            entry = _audit(session, actor, via, "delete", full_id, kept, None, now())
            session.flush()
            return _entry(entry)


def _labels_row(session: Session, run_id: str) -> RunLabelRow:
    row = session.get(RunLabelRow, run_id)
    if row is None:
        row = RunLabelRow(run_id=run_id)
        session.add(row)
    return row


def _annotations(session: Session, run_id: str) -> RunAnnotations:
    labels = session.get(RunLabelRow, run_id)
    tags = session.scalars(
        select(RunTagRow).where(RunTagRow.run_id == run_id).order_by(RunTagRow.added_at, RunTagRow.tag)
    ).all()
    found = [TagInfo(tag=t.tag, added_by=t.added_by, added_at=t.added_at) for t in tags]
    if labels is None:
        return RunAnnotations(run_id=run_id, tags=found)
    return RunAnnotations(
        run_id=run_id,
        display_name=labels.display_name,
        named_by=labels.named_by,
        named_at=labels.named_at,
        note=labels.note,
        note_by=labels.note_by,
        note_at=labels.note_at,
        tags=found,
    )


def _audit(
    session: Session,
    actor: str,
    via: str,
    action: str,
    run_id: str,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
    at: datetime,
) -> RunAuditRow:
    row = RunAuditRow(at=at, actor=actor, via=via, action=action, run_id=run_id, before=before, after=after)
    session.add(row)
    return row


def _entry(row: RunAuditRow) -> AuditEntry:
    return AuditEntry(
        id=row.id,
        at=row.at,
        actor=row.actor,
        via=row.via,
        action=row.action,
        run_id=row.run_id,
        before=row.before,
        after=row.after,
    )


def change_text(entry: AuditEntry) -> str:
    """One line of what an audit entry changed (a note shortened to 60 characters)."""
    before, after = entry.before or {}, entry.after or {}
    if entry.action in ("tag", "untag"):
        added = [t for t in after.get("tags", []) if t not in before.get("tags", [])]
        removed = [t for t in before.get("tags", []) if t not in after.get("tags", [])]
        return " ".join([*(f"+{t}" for t in added), *(f"-{t}" for t in removed)])
    if entry.action == "rename":
        return f"{before.get('display_name') or '(record name)'} -> {after.get('display_name') or '(record name)'}"
    if entry.action == "note":
        text = " ".join(str(after.get("note") or "").split())
        return f"note: {text[:60]}{'…' if len(text) > 60 else ''}" if text else "note cleared"
    if entry.action == "delete":
        metric = before.get("metric_value")
        shown = "" if metric is None else f", {before.get('metric_name')} {metric:.4f}"
        return (
            f"deleted {before.get('manifest_name')} {before.get('manifest_version')}{shown}, result hash "
            f"{str(before.get('result_hash'))[:12]}"
        )
    return ""


def _checked_tags(tags: Sequence[str]) -> list[str]:
    """``tags`` checked (:func:`check_tag`), duplicates dropped, in order; none, or more than :data:`MAX_TAGS` at
    once (refused before any is matched, so a long list costs no work): InvalidInputError naming ``tags``."""
    if len(tags) > MAX_TAGS:
        raise InvalidInputError(f"tags: {len(tags)} given; a run carries at most {MAX_TAGS} tags", "tags")
    checked = builtins.list(dict.fromkeys(check_tag(t) for t in tags))
    if not checked:
        raise InvalidInputError("tags: give at least one tag", "tags")
    return checked


def _tags_of(session: Session, run_id: str) -> list[str]:
    """The run's tags in the order they were added."""
    query = select(RunTagRow.tag).where(RunTagRow.run_id == run_id).order_by(RunTagRow.added_at, RunTagRow.tag)
    return builtins.list(session.scalars(query))
