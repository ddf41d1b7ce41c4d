"""``/api/v1/datasets``: the datasets registered server-side (name -> folder or built-in spec). Only an admin
registers one; jobs name a registered dataset, never a path."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field

from repliscope.service.auth import require
from repliscope.service.errors import ERROR_RESPONSES, ApiError
from repliscope.service.routers.common import UtcDatetime, store_errors, store_of

router = APIRouter(prefix="/datasets", tags=["datasets"], responses=ERROR_RESPONSES)

DECLARATION_HELP = (
    "what the data is, NAME/SPLIT as the CLI's --as takes it (e.g. imagenet-1k/val): runs of this dataset are "
    "judged against the manifest's claims on NAME/SPLIT (admin only)"
)


class DatasetIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: Annotated[str, Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_.-]+$")]
    spec: Annotated[
        str,
        Field(
            min_length=1,
            max_length=1000,
            description="a folder on the server, or a dataset spec as the CLI's --dataset takes it",
        ),
    ]
    description: Annotated[str, Field(max_length=2000)] = ""
    declared_as: Annotated[str | None, Field(alias="as", max_length=201, description=DECLARATION_HELP)] = None


class DeclarationIn(BaseModel):
    """A new declaration of a registered dataset (``null`` withdraws it)."""

    model_config = ConfigDict(extra="forbid")

    declared_as: Annotated[str | None, Field(alias="as", max_length=201, description=DECLARATION_HELP)]


class DatasetOut(BaseModel):
    name: str
    spec: str
    description: str
    created_by: str
    created_at: UtcDatetime
    declared_as: Annotated[str | None, Field(alias="as", description=DECLARATION_HELP)]
    declared_by: str | None = Field(description="the admin token that set (or withdrew) the declaration")
    declared_at: UtcDatetime | None
    annotates: list[str] | None = Field(
        description="what its samples carry: labels, boxes, masks (null: registered before this was recorded)"
    )


def _out(dataset: Any) -> dict[str, Any]:
    out: dict[str, Any] = dataset.model_dump(exclude={"declared_as", "annotates"})
    annotations = dataset.annotations
    return {**out, "as": dataset.declared_as, "annotates": None if annotations is None else list(annotations)}


PSEUDO_FILESYSTEMS = ("/proc", "/sys", "/dev", "/run")
"""Folders that are never datasets (kernel and device views: endless, or reading them has effects)."""
MAX_WALK_FILES = 200_000
MAX_WALK_DEPTH = 12
MAX_WALK_SECONDS = 10.0
"""The walk bounds of a registration (:func:`register_bounded`): entries, levels below the folder, seconds."""


def check_folder(spec: str) -> None:
    """A spec that names a folder (it has a ``/``, or starts with ``.`` or ``~``; for ``NAME:PATH`` with NAME a
    registered dataset loader, e.g. ``coco:/data/coco-val``, its PATH) must be absolute, not inside a
    pseudo-filesystem (after resolving symlinks), and small enough to walk within the walk bounds in force
    (under :func:`register_bounded`: :data:`MAX_WALK_FILES` entries, :data:`MAX_WALK_DEPTH` levels,
    :data:`MAX_WALK_SECONDS` seconds; this walk never follows a symlink); else a 422 naming the limit."""
    import os
    from pathlib import Path

    from repliscope.datasets.base import DATASETS
    from repliscope.datasets.walk import Walk, WalkLimitError

    loader, sep, where = spec.partition(":")
    if sep and loader in DATASETS and where:
        spec = where
    if "/" not in spec and not spec.startswith((".", "~")):
        return  # a built-in dataset spec (e.g. foolbox_imagenet)
    if not spec.startswith("/"):
        raise ApiError(
            422,
            f"'{spec}': give an absolute folder on the server (a relative path would depend on the "
            "server's working directory)",
            field="body.spec",
            code="invalid",
        )
    folder = Path(spec).resolve()
    for pseudo in PSEUDO_FILESYSTEMS:
        if folder == Path(pseudo) or Path(pseudo) in folder.parents:
            raise ApiError(
                422,
                f"'{spec}' is in {pseudo}, a pseudo-filesystem: not a dataset folder",
                field="body.spec",
                code="invalid",
            )
    if not folder.is_dir():
        return  # the registry says what is wrong with it
    walk = Walk(folder)
    root_depth = len(folder.parts)
    try:
        for here, dirs, files in os.walk(folder, followlinks=False):
            walk.step(len(dirs) + len(files), len(Path(here).parts) - root_depth + (1 if dirs else 0))
    except WalkLimitError as exc:
        raise ApiError(422, f"'{spec}': {exc}", field="body.spec", code="too_large") from None


def register_bounded(
    store: Any, name: str, spec: str, description: str, created_by: str, declared_as: str | None
) -> Any:
    """:func:`check_folder`, then :func:`repliscope.store.service_tables.register_dataset`, every walk of the
    folder (this check's and the dataset loader's) under the bounds :data:`MAX_WALK_FILES`,
    :data:`MAX_WALK_DEPTH`, :data:`MAX_WALK_SECONDS` (a walk past them, or stopped because the server is stopping,
    is a 422 naming the bound). Called in a worker thread (the API's sync route, the web form's threadpool call),
    never on the event loop."""
    from repliscope.datasets.walk import WalkBounds, bounded
    from repliscope.store.service_tables import register_dataset

    with bounded(WalkBounds(MAX_WALK_FILES, MAX_WALK_DEPTH, MAX_WALK_SECONDS)):
        check_folder(spec)
        return register_dataset(store, name, spec, description, created_by=created_by, declared_as=declared_as)


@router.post("", status_code=201, response_model=DatasetOut)
def register(request: Request, body: DatasetIn, principal: Annotated[Any, Depends(require("admin"))]) -> Any:
    """Register a dataset (admin); the spec is resolved now (a folder that does not load is refused). A folder
    must be absolute, outside /proc, /sys, /dev and /run, and bounded (:func:`register_bounded`); the folder's
    symlinks out of it are never followed (listed as not followed). Runs in a worker thread (a sync route), never
    on the event loop."""
    with store_errors():
        return _out(
            register_bounded(
                store_of(request), body.name, body.spec, body.description, principal.name, body.declared_as
            )
        )


@router.get("", response_model=list[DatasetOut])
def list_all(request: Request, _: Annotated[Any, Depends(require("viewer"))]) -> Any:
    """The registered datasets, by name."""
    from repliscope.store.service_tables import list_datasets

    with store_errors():
        return [_out(d) for d in list_datasets(store_of(request))]


@router.get("/{name}", response_model=DatasetOut)
def get_one(request: Request, name: str, _: Annotated[Any, Depends(require("viewer"))]) -> Any:
    """One registered dataset and its declaration."""
    from repliscope.store.service_tables import get_dataset

    with store_errors("dataset"):
        return _out(get_dataset(store_of(request), name))


@router.put("/{name}/declaration", response_model=DatasetOut)
def declare(
    request: Request, name: str, body: DeclarationIn, principal: Annotated[Any, Depends(require("admin"))]
) -> Any:
    """Declare what a registered dataset is (admin): ``{"as": "imagenet-1k/val"}``, or ``{"as": null}`` to
    withdraw it. Who and when are recorded; runs already stored keep the declaration they ran with."""
    from repliscope.store.service_tables import declare_dataset

    with store_errors("dataset"):
        return _out(declare_dataset(store_of(request), name, body.declared_as, principal.name))
