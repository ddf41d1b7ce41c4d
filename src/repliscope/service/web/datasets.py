"""The datasets page: every registered dataset with what it is declared to be (``as``: NAME/SPLIT, the CLI's
``--as``), who declared it and when, what its samples annotate, and its runs; an admin registers a dataset and
changes a declaration here (the same registry functions as ``POST /api/v1/datasets`` and
``PUT /api/v1/datasets/{name}/declaration``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class DatasetLine:
    """One registered dataset as the page shows it (``spec`` already path-redacted for non-admins)."""

    name: str
    spec: str
    description: str
    declared_as: str | None
    declared: str
    """``by admin on 2026-11-27 06:10 UTC`` (or how it was withdrawn), ``""`` when never declared."""
    annotates: str
    registered: str
    runs: int


def dataset_lines(store: Any, hide: Any = None) -> list[DatasetLine]:
    """The registered datasets by name, each with its number of stored runs (recorded under its name);
    ``hide(text)``: the path redaction applied to specs (None: shown as stored, for admins)."""
    from repliscope.store.datasets import list_datasets

    registered = list_datasets(store)
    counts = store.runs.count_by_dataset([d.name for d in registered])
    lines = []
    for d in registered:
        declared = ""
        if d.declared_at is not None:
            verb = "declared" if d.declared_as else "declaration withdrawn"
            declared = f"{verb} by {d.declared_by or '?'} on {d.declared_at:%Y-%m-%d %H:%M} UTC"
        annotations = d.annotations
        lines.append(
            DatasetLine(
                name=d.name,
                spec=_shown_spec(d.spec, hide),
                description=d.description,
                declared_as=d.declared_as,
                declared=declared,
                annotates=", ".join(annotations)
                if annotations
                else ("nothing" if annotations == () else "not recorded"),
                registered=f"by {d.created_by or '?'} on {d.created_at:%Y-%m-%d %H:%M} UTC",
                runs=int(counts.get(d.name, 0)),
            )
        )
    return lines


def _shown_spec(spec: str, hide: Any) -> str:
    """``spec`` as the viewer may see it: ``hide`` applied to its path (for ``NAME:PATH``, to PATH)."""
    from repliscope.datasets.base import DATASETS

    if hide is None:
        return spec
    loader, sep, where = spec.partition(":")
    if sep and loader in DATASETS and where:
        return f"{loader}:{hide(where)}"
    return str(hide(spec))


class FormError(Exception):
    """A refused datasets form: ``field`` names the form field."""

    def __init__(self, status: int, field: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.field = field
        self.message = message


def register_from_form(store: Any, principal: Any, form: dict[str, str]) -> str:
    """Register the form's dataset (admin; the API's checks: folder bounds, name, declaration) -> its name."""
    from repliscope.service.errors import ApiError
    from repliscope.service.routers.datasets import register_bounded
    from repliscope.store.service_tables import ConflictError, InvalidInputError

    name, spec = form.get("name", "").strip(), form.get("spec", "").strip()
    declared_as = form.get("as", "").strip() or None
    if not name:
        raise FormError(422, "name", "give the dataset a name")
    if len(spec) > 1000 or len(form.get("description", "")) > 2000:
        raise FormError(422, "spec", "the spec has at most 1000 characters, the description 2000")
    try:
        register_bounded(store, name, spec, form.get("description", "").strip(), principal.name, declared_as)
    except ApiError as exc:
        raise FormError(exc.status, str(exc.field or "spec").removeprefix("body."), exc.message) from None
    except (InvalidInputError, ConflictError) as exc:
        raise FormError(409 if isinstance(exc, ConflictError) else 422, exc.field or "form", str(exc)) from None
    return name


def declare_from_form(store: Any, principal: Any, name: str, form: dict[str, str]) -> None:
    """Change (or, empty, withdraw) the declaration of ``name`` (admin)."""
    from repliscope.store.service_tables import InvalidInputError, NotFoundError, declare_dataset

    try:
        declare_dataset(store, name, form.get("as", "").strip() or None, principal.name)
    except NotFoundError as exc:
        raise FormError(404, "dataset", str(exc)) from None
    except InvalidInputError as exc:
        raise FormError(422, "as", str(exc)) from None
