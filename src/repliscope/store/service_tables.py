"""Server-side tables of the service, as plain functions over a :class:`RunStore`: the dataset registry (a client
refers to a dataset by its registered name, never by a path), the manifest store (name@version, immutable) and
the jobs table (status, progress, log, result ids)."""

from __future__ import annotations

import hashlib
import re
import uuid
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from repliscope.errors import RepliscopeError, StoreError
from repliscope.store.models import DatasetRegistryRow, JobRow, ManifestRow

if TYPE_CHECKING:
    from repliscope.store.repository import RunStore

JobKind = Literal["evaluate", "pitfalls", "bench", "diff"]
JobStatus = Literal["queued", "running", "succeeded", "failed", "cancelled"]
JOB_KINDS: tuple[str, ...] = get_args(JobKind)
JOB_STATUSES: tuple[str, ...] = get_args(JobStatus)
FINISHED: tuple[str, ...] = ("succeeded", "failed", "cancelled")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


class _FieldError(StoreError):
    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class NotFoundError(_FieldError):
    """The named object does not exist (HTTP 404)."""


class ConflictError(_FieldError):
    """The object exists with other content (HTTP 409)."""


class InvalidInputError(_FieldError):
    """A value is not allowed (HTTP 422); ``field`` names it."""


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def check_name(name: str, field: str = "name") -> str:
    """A registry name: letters, digits, ``_ . -``, at most 128 characters, starting with a letter or digit."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise InvalidInputError(
            f"{field} {name!r} is not allowed: use letters, digits, '_', '.', '-' (starting "
            f"with a letter or digit, at most 128 characters)",
            field,
        )
    return name


# ---- datasets registry -------------------------------------------------------------------------------------


class RegisteredDataset(BaseModel):
    """A dataset registered server-side; ``spec`` is what ``--dataset`` takes. ``declared_as``: what the data is,
    ``NAME/SPLIT`` (the CLI's ``--as``), set by ``declared_by`` at ``declared_at``; None: undeclared (claims on
    it are "not comparable"). ``annotates``: what its samples carry (:data:`ANNOTATIONS`); None when it was
    registered before the store recorded it."""

    model_config = ConfigDict(frozen=True, from_attributes=True)

    name: str
    spec: str
    description: str
    created_by: str
    created_at: datetime
    declared_as: str | None = None
    declared_by: str | None = None
    declared_at: datetime | None = None
    annotates: str | None = None

    @property
    def annotations(self) -> tuple[str, ...] | None:
        """``annotates`` as a tuple (None: not recorded)."""
        return None if self.annotates is None else tuple(a for a in self.annotates.split(",") if a)


ANNOTATIONS = ("labels", "boxes", "masks")
"""What a sample may carry: a class label (classification), boxes (detection), a label map (segmentation)."""
_DECLARATION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}/[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")


def check_declaration(text: str, field: str = "as") -> str:
    """``NAME/SPLIT`` as the CLI's ``--as`` takes it (e.g. ``imagenet-1k/val``): each part letters, digits,
    ``_ . -`` (at most 100 characters), else an InvalidInputError naming ``field``."""
    if not isinstance(text, str) or not _DECLARATION.match(text):
        raise InvalidInputError(
            f"{field} {text!r} must be NAME/SPLIT, e.g. imagenet-1k/val (letters, digits, '_', '.', '-' in each part)",
            field,
        )
    return text


def annotations_of(dataset: Any) -> tuple[str, ...]:
    """What the samples of ``dataset`` (a :class:`~repliscope.datasets.base.Dataset`) carry, in
    :data:`ANNOTATIONS` order: ``labels`` when any sample has a class label, ``boxes`` when any has box
    annotations, ``masks`` when any has a ground-truth label map."""
    found = {
        "labels": any(s.label is not None for s in dataset.samples),
        "boxes": any(s.objects is not None for s in dataset.samples),
        "masks": any(s.mask is not None for s in dataset.samples),
    }
    return tuple(a for a in ANNOTATIONS if found[a])


def register_dataset(
    store: RunStore,
    name: str,
    spec: str,
    description: str = "",
    created_by: str = "",
    declared_as: str | None = None,
) -> RegisteredDataset:
    """Register ``spec`` (a folder, a built-in dataset name or NAME:PATH, checked now by resolving it) as
    ``name``, declared to be ``declared_as`` (``NAME/SPLIT``, by ``created_by``) when given; what its samples
    annotate is recorded. A registered name is a ConflictError."""
    from repliscope.datasets.resolve import resolve_dataset

    check_name(name)
    if declared_as is not None:
        check_declaration(declared_as)
    if not spec or not spec.strip():
        raise InvalidInputError("spec is empty: give a folder, a built-in dataset name or NAME:PATH", "spec")
    try:
        dataset = resolve_dataset(spec)
    except RepliscopeError as exc:
        raise InvalidInputError(f"spec {spec!r} does not resolve: {exc}", "spec") from exc
    now = _now()
    row = DatasetRegistryRow(
        name=name,
        spec=spec,
        description=description,
        created_by=created_by,
        created_at=now,
        declared_as=declared_as,
        declared_by=created_by if declared_as is not None else None,
        declared_at=now if declared_as is not None else None,
        annotates=",".join(annotations_of(dataset)),
    )
    try:
        with Session(store.engine, expire_on_commit=False) as session, session.begin():
            if session.get(DatasetRegistryRow, name) is not None:
                raise ConflictError(f"dataset {name!r} is already registered; remove it first", "name")
            session.add(row)
    except IntegrityError as exc:
        raise ConflictError(f"dataset {name!r} is already registered", "name") from exc
    return RegisteredDataset.model_validate(row)


def declare_dataset(store: RunStore, name: str, declared_as: str | None, declared_by: str) -> RegisteredDataset:
    """Declare the registered dataset ``name`` to be ``declared_as`` (``NAME/SPLIT``; None withdraws the
    declaration), recording who and when. Runs already stored keep the declaration they ran with."""
    if declared_as is not None:
        check_declaration(declared_as)
    with Session(store.engine, expire_on_commit=False) as session, session.begin():
        row = session.get(DatasetRegistryRow, name, with_for_update=True)
        if row is None:
            raise NotFoundError(f"dataset {name!r} is not registered", "dataset")
        row.declared_as = declared_as
        row.declared_by = declared_by
        row.declared_at = _now()
    return RegisteredDataset.model_validate(row)


def list_datasets(store: RunStore) -> list[RegisteredDataset]:
    """Every registered dataset, by name."""
    with Session(store.engine) as session:
        rows = session.scalars(select(DatasetRegistryRow).order_by(DatasetRegistryRow.name)).all()
        return [RegisteredDataset.model_validate(r) for r in rows]


def get_dataset(store: RunStore, name: str) -> RegisteredDataset:
    with Session(store.engine) as session:
        row = session.get(DatasetRegistryRow, name)
        if row is None:
            known = ", ".join(d.name for d in list_datasets(store)) or "none"
            raise NotFoundError(f"dataset {name!r} is not registered (registered: {known})", "dataset")
        return RegisteredDataset.model_validate(row)


def remove_dataset(store: RunStore, name: str) -> None:
    with Session(store.engine) as session, session.begin():
        row = session.get(DatasetRegistryRow, name)
        if row is None:
            raise NotFoundError(f"dataset {name!r} is not registered", "dataset")
        session.delete(row)


# ---- manifest store ----------------------------------------------------------------------------------------


class StoredManifest(BaseModel):
    """An uploaded manifest's text, stored under name@version (immutable)."""

    model_config = ConfigDict(frozen=True, from_attributes=True)

    name: str
    version: str
    text: str
    sha256: str
    uploaded_at: datetime
    uploaded_by: str

    @property
    def ref(self) -> str:
        return f"{self.name}@{self.version}"


def parse_ref(ref: str, field: str = "manifest") -> tuple[str, str]:
    """``"name@version"`` -> (name, version); anything else is an InvalidInputError naming ``field``."""
    name, sep, version = (ref or "").rpartition("@")
    if not sep or not name or not version:
        raise InvalidInputError(f"{field} {ref!r} must be NAME@VERSION, e.g. efficientnet-lite0@1.0.0", field)
    return name, version


def put_manifest(
    store: RunStore, name: str, version: str, text: str, uploaded_by: str = ""
) -> tuple[StoredManifest, bool]:
    """Store ``text`` as name@version -> (stored, created). The same text again is fine (created False);
    another text under a stored name@version is a ConflictError (stored manifests are immutable)."""
    if not name or not version:
        raise InvalidInputError("a manifest needs a name and a version", "name" if not name else "version")
    digest = hashlib.sha256(text.encode()).hexdigest()
    for _ in range(2):  # a concurrent insert of the same name@version: look again
        with Session(store.engine, expire_on_commit=False) as session:
            existing = session.scalars(
                select(ManifestRow).where(ManifestRow.name == name, ManifestRow.version == version)
            ).first()
        if existing is not None:
            if existing.sha256 != digest:
                raise ConflictError(
                    f"manifest {name}@{version} is already stored with another text (sha256 "
                    f"{existing.sha256[:12]}); stored manifests are immutable: bump the "
                    f"version",
                    "version",
                )
            return StoredManifest.model_validate(existing), False
        row = ManifestRow(
            name=name, version=version, text=text, sha256=digest, uploaded_at=_now(), uploaded_by=uploaded_by
        )
        try:
            with Session(store.engine, expire_on_commit=False) as session, session.begin():
                session.add(row)
        except IntegrityError:
            continue
        return StoredManifest.model_validate(row), True
    raise ConflictError(f"manifest {name}@{version} could not be stored", "version")


def get_manifest(store: RunStore, ref: str) -> StoredManifest:
    """The manifest ``name@version``."""
    name, version = parse_ref(ref)
    with Session(store.engine) as session:
        row = session.scalars(
            select(ManifestRow).where(ManifestRow.name == name, ManifestRow.version == version)
        ).first()
        if row is None:
            raise NotFoundError(f"manifest {ref!r} is not stored", "manifest")
        return StoredManifest.model_validate(row)


def list_manifests(store: RunStore, search: str | None = None) -> list[StoredManifest]:
    """Stored manifests by name and version; ``search``: a case-insensitive substring of the name."""
    query = select(ManifestRow).order_by(ManifestRow.name, ManifestRow.version)
    if search:
        query = query.where(ManifestRow.name.icontains(search, autoescape=True))
    with Session(store.engine) as session:
        return [StoredManifest.model_validate(r) for r in session.scalars(query).all()]


# ---- jobs --------------------------------------------------------------------------------------------------


class Job(BaseModel):
    """A background job and its progress (``progress_total`` None until known)."""

    model_config = ConfigDict(frozen=True, from_attributes=True)

    id: str
    kind: str
    manifest: str
    runtime: str | None
    dataset: str | None
    options: dict[str, Any]
    status: str
    progress_done: int
    progress_total: int | None
    log: str
    result_ids: list[str]
    error: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    created_by: str


def new_job_id() -> str:
    """A new job id (32 hex digits)."""
    return uuid.uuid4().hex


def create_job(
    store: RunStore,
    kind: str,
    manifest: str,
    runtime: str | None,
    dataset: str | None,
    options: dict[str, Any],
    created_by: str = "",
    job_id: str | None = None,
) -> Job:
    """A queued job (``manifest`` is ``name@version``); ``job_id``: its id (default: a new one)."""
    if kind not in JOB_KINDS:
        raise InvalidInputError(f"kind {kind!r} is not a job kind (allowed: {', '.join(JOB_KINDS)})", "kind")
    parse_ref(manifest)
    row = JobRow(
        id=job_id or new_job_id(),
        kind=kind,
        manifest=manifest,
        runtime=runtime,
        dataset=dataset,
        options=dict(options),
        status="queued",
        progress_done=0,
        progress_total=None,
        log="",
        result_ids=[],
        error=None,
        created_at=_now(),
        started_at=None,
        finished_at=None,
        created_by=created_by,
    )
    with Session(store.engine, expire_on_commit=False) as session, session.begin():
        session.add(row)
    return Job.model_validate(row)


def update_job(
    store: RunStore,
    job_id: str,
    *,
    status: str | None = None,
    progress_done: int | None = None,
    progress_total: int | None = None,
    append_log: str | None = None,
    result_ids: list[str] | None = None,
    error: str | None = None,
) -> Job:
    """Change a job: ``status`` running sets ``started_at``, a finished status sets ``finished_at``;
    ``append_log`` adds one line to the log. A write that fails (a full disk, a read-only database, a lost
    server) is a StoreError naming the job, the database and the reason; nothing of the change is written."""
    from sqlalchemy.exc import SQLAlchemyError

    from repliscope.store.repository import hide_password

    if status is not None and status not in JOB_STATUSES:
        raise InvalidInputError(f"status {status!r} is not a job status (allowed: {', '.join(JOB_STATUSES)})", "status")
    try:
        with Session(store.engine, expire_on_commit=False) as session, session.begin():
            row = session.get(JobRow, job_id, with_for_update=True)
            if row is None:
                raise NotFoundError(f"job {job_id!r} does not exist", "job")
            if status is not None:
                row.status = status
                if status == "running" and row.started_at is None:
                    row.started_at = _now()
                if status in FINISHED:
                    row.finished_at = _now()
            if progress_done is not None:
                row.progress_done = progress_done
            if progress_total is not None:
                row.progress_total = progress_total
            if append_log is not None:
                row.log = row.log + append_log.rstrip("\n") + "\n"
            if result_ids is not None:
                row.result_ids = list(result_ids)
            if error is not None:
                row.error = error
    except (SQLAlchemyError, OSError) as exc:
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        raise StoreError(
            f"job {job_id} could not be updated in the run database {hide_password(store.url)}: {reason}"
        ) from exc
    return Job.model_validate(row)


def get_job(store: RunStore, job_id: str) -> Job:
    with Session(store.engine) as session:
        row = session.get(JobRow, job_id)
        if row is None:
            raise NotFoundError(f"job {job_id!r} does not exist", "job")
        return Job.model_validate(row)


def list_jobs(
    store: RunStore,
    status: str | None = None,
    limit: int = 100,
    *,
    kind: str | None = None,
    created_by: str | None = None,
) -> list[Job]:
    """Jobs, newest first; optionally of one status, one kind, one submitter (token name), all exact."""
    if status is not None and status not in JOB_STATUSES:
        raise InvalidInputError(f"status {status!r} is not a job status (allowed: {', '.join(JOB_STATUSES)})", "status")
    query = select(JobRow).order_by(JobRow.created_at.desc(), JobRow.id).limit(limit)
    for value, column in ((status, JobRow.status), (kind, JobRow.kind), (created_by, JobRow.created_by)):
        if value is not None:
            query = query.where(column == value)
    with Session(store.engine) as session:
        return [Job.model_validate(r) for r in session.scalars(query).all()]
