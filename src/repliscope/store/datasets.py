"""The dataset registry (``datasets_registry`` table): a client refers to a dataset by its registered name, never
by a path. :class:`DatasetStore` is the store; the module functions take a
:class:`~repliscope.store.repository.RunStore` (anything holding a ``db``)."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict
from sqlalchemy import select

from repliscope.errors import RepliscopeError
from repliscope.store.database import Database, HasDatabase, now
from repliscope.store.errors import ConflictError, InvalidInputError, NotFoundError
from repliscope.store.models import DatasetRegistryRow

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
ANNOTATIONS = ("labels", "boxes", "masks")
"""What a sample may carry: a class label (classification), boxes (detection), a label map (segmentation)."""
_DECLARATION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}/[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")


def check_name(name: str, field: str = "name") -> str:
    """A registry name: letters, digits, ``_ . -``, at most 128 characters, starting with a letter or digit."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise InvalidInputError(
            f"{field} {name!r} is not allowed: use letters, digits, '_', '.', '-' (starting "
            f"with a letter or digit, at most 128 characters)",
            field,
        )
    return name


def check_declaration(text: str, field: str = "as") -> str:
    """``NAME/SPLIT`` as the CLI's ``--as`` takes it (e.g. ``imagenet-1k/val``): each part letters, digits,
    ``_ . -`` (at most 100 characters), else an InvalidInputError naming ``field``."""
    if not isinstance(text, str) or not _DECLARATION.match(text):
        raise InvalidInputError(
            f"{field} {text!r} must be NAME/SPLIT, e.g. imagenet-1k/val (letters, digits, '_', '.', '-' in each part)",
            field,
        )
    return text


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


class DatasetStore:
    """The registered datasets of ``db``."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def register(
        self,
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
        at = now()
        row = DatasetRegistryRow(
            name=name,
            spec=spec,
            description=description,
            created_by=created_by,
            created_at=at,
            declared_as=declared_as,
            declared_by=created_by if declared_as is not None else None,
            declared_at=at if declared_as is not None else None,
            annotates=",".join(annotations_of(dataset)),
        )
        try:
            with self.db.session(write=True, failing=f"dataset {name!r} could not be registered in") as session:
                if session.get(DatasetRegistryRow, name) is not None:
                    raise ConflictError(f"dataset {name!r} is already registered; remove it first", "name")
                session.add(row)
        except ConflictError as exc:
            if exc.field is None:  # a concurrent registration of the same name (the primary key)
                raise ConflictError(f"dataset {name!r} is already registered", "name") from exc
            raise
        return RegisteredDataset.model_validate(row)

    def declare(self, name: str, declared_as: str | None, declared_by: str) -> RegisteredDataset:
        """Declare the registered dataset ``name`` to be ``declared_as`` (``NAME/SPLIT``; None withdraws the
        declaration), recording who and when. Runs already stored keep the declaration they ran with."""
        if declared_as is not None:
            check_declaration(declared_as)
        with self.db.session(write=True, failing=f"dataset {name!r} could not be declared in") as session:
            row = session.get(DatasetRegistryRow, name, with_for_update=True)
            if row is None:
                raise NotFoundError(f"dataset {name!r} is not registered", "dataset")
            row.declared_as = declared_as
            row.declared_by = declared_by
            row.declared_at = now()
        return RegisteredDataset.model_validate(row)

    def list(self) -> list[RegisteredDataset]:
        """Every registered dataset, by name."""
        with self.db.session() as session:
            rows = session.scalars(select(DatasetRegistryRow).order_by(DatasetRegistryRow.name)).all()
            return [RegisteredDataset.model_validate(r) for r in rows]

    def get(self, name: str) -> RegisteredDataset:
        """The registered dataset ``name`` (NotFoundError listing the registered ones)."""
        with self.db.session() as session:
            row = session.get(DatasetRegistryRow, name)
            if row is not None:
                return RegisteredDataset.model_validate(row)
        known = ", ".join(d.name for d in self.list()) or "none"
        raise NotFoundError(f"dataset {name!r} is not registered (registered: {known})", "dataset")

    def remove(self, name: str) -> None:
        with self.db.session(write=True, failing=f"dataset {name!r} could not be removed from") as session:
            row = session.get(DatasetRegistryRow, name)
            if row is None:
                raise NotFoundError(f"dataset {name!r} is not registered", "dataset")
            session.delete(row)


# ---- the function API ---------------------------------------------------------------------------------------


def register_dataset(
    store: HasDatabase,
    name: str,
    spec: str,
    description: str = "",
    created_by: str = "",
    declared_as: str | None = None,
) -> RegisteredDataset:
    """:meth:`DatasetStore.register`."""
    return DatasetStore(store.db).register(name, spec, description, created_by, declared_as)


def declare_dataset(store: HasDatabase, name: str, declared_as: str | None, declared_by: str) -> RegisteredDataset:
    """:meth:`DatasetStore.declare`."""
    return DatasetStore(store.db).declare(name, declared_as, declared_by)


def list_datasets(store: HasDatabase) -> list[RegisteredDataset]:
    """Every registered dataset, by name."""
    return DatasetStore(store.db).list()


def get_dataset(store: HasDatabase, name: str) -> RegisteredDataset:
    """:meth:`DatasetStore.get`."""
    return DatasetStore(store.db).get(name)


def remove_dataset(store: HasDatabase, name: str) -> None:
    """:meth:`DatasetStore.remove`."""
    DatasetStore(store.db).remove(name)
