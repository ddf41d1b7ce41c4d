"""``/api/v1/datasets``: the datasets registered server-side (name -> folder or built-in spec). Only an admin
registers one; jobs name a registered dataset, never a path."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field

from repliscope.service.auth import require
from repliscope.service.errors import ERROR_RESPONSES
from repliscope.service.routers.common import UtcDatetime, store_errors, store_of

router = APIRouter(prefix="/datasets", tags=["datasets"], responses=ERROR_RESPONSES)


class DatasetIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: Annotated[str, Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_.-]+$")]
    spec: Annotated[str, Field(min_length=1, max_length=1000,
                               description="a folder on the server, or a dataset spec as the CLI's --dataset takes it")]
    description: Annotated[str, Field(max_length=2000)] = ""


class DatasetOut(BaseModel):
    name: str
    spec: str
    description: str
    created_by: str
    created_at: UtcDatetime


@router.post("", status_code=201, response_model=DatasetOut)
def register(request: Request, body: DatasetIn, principal: Annotated[Any, Depends(require("admin"))]) -> Any:
    """Register a dataset (admin); the spec is resolved now (a folder that does not load is refused)."""
    from repliscope.store.registry import register_dataset

    with store_errors():
        return register_dataset(store_of(request), body.name, body.spec, body.description,
                                created_by=principal.name).model_dump()


@router.get("", response_model=list[DatasetOut])
def list_all(request: Request, _: Annotated[Any, Depends(require("viewer"))]) -> Any:
    """The registered datasets, by name."""
    from repliscope.store.registry import list_datasets

    with store_errors():
        return [d.model_dump() for d in list_datasets(store_of(request))]
