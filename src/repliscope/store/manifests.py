"""The manifest store (``manifests`` table): an uploaded manifest's text under name@version, immutable.
:class:`ManifestStore` is the store; the module functions take a :class:`~repliscope.store.repository.RunStore`
(anything holding a ``db``)."""

from __future__ import annotations

import hashlib
from datetime import datetime

from pydantic import BaseModel, ConfigDict
from sqlalchemy import select

from repliscope.store.database import Database, HasDatabase, now
from repliscope.store.errors import ConflictError, InvalidInputError, NotFoundError
from repliscope.store.models import ManifestRow


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


class ManifestStore:
    """The stored manifests of ``db``."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def _find(self, name: str, version: str) -> StoredManifest | None:
        with self.db.session() as session:
            row = session.scalars(
                select(ManifestRow).where(ManifestRow.name == name, ManifestRow.version == version)
            ).first()
            return None if row is None else StoredManifest.model_validate(row)

    def put(self, name: str, version: str, text: str, uploaded_by: str = "") -> tuple[StoredManifest, bool]:
        """Store ``text`` as name@version -> (stored, created). The same text again is fine (created False);
        another text under a stored name@version is a ConflictError (stored manifests are immutable)."""
        if not name or not version:
            raise InvalidInputError("a manifest needs a name and a version", "name" if not name else "version")
        digest = hashlib.sha256(text.encode()).hexdigest()
        for _ in range(2):  # a concurrent insert of the same name@version: look again
            existing = self._find(name, version)
            if existing is not None:
                if existing.sha256 != digest:
                    raise ConflictError(
                        f"manifest {name}@{version} is already stored with another text (sha256 "
                        f"{existing.sha256[:12]}); stored manifests are immutable: bump the "
                        f"version",
                        "version",
                    )
                return existing, False
            row = ManifestRow(
                name=name, version=version, text=text, sha256=digest, uploaded_at=now(), uploaded_by=uploaded_by
            )
            try:
                with self.db.session(write=True, failing=f"manifest {name}@{version} could not be written to") as s:
                    s.add(row)
            except ConflictError:
                continue
            return StoredManifest.model_validate(row), True
        raise ConflictError(f"manifest {name}@{version} could not be stored", "version")

    def get(self, ref: str) -> StoredManifest:
        """The manifest ``name@version``."""
        found = self._find(*parse_ref(ref))
        if found is None:
            raise NotFoundError(f"manifest {ref!r} is not stored", "manifest")
        return found

    def list(self, search: str | None = None) -> list[StoredManifest]:
        """Stored manifests by name and version; ``search``: a case-insensitive substring of the name."""
        query = select(ManifestRow).order_by(ManifestRow.name, ManifestRow.version)
        if search:
            query = query.where(ManifestRow.name.icontains(search, autoescape=True))
        with self.db.session() as session:
            return [StoredManifest.model_validate(r) for r in session.scalars(query).all()]


# ---- the function API ---------------------------------------------------------------------------------------


def put_manifest(
    store: HasDatabase, name: str, version: str, text: str, uploaded_by: str = ""
) -> tuple[StoredManifest, bool]:
    """:meth:`ManifestStore.put`."""
    return ManifestStore(store.db).put(name, version, text, uploaded_by)


def get_manifest(store: HasDatabase, ref: str) -> StoredManifest:
    """The manifest ``name@version``."""
    return ManifestStore(store.db).get(ref)


def list_manifests(store: HasDatabase, search: str | None = None) -> list[StoredManifest]:
    """:meth:`ManifestStore.list`."""
    return ManifestStore(store.db).list(search)
