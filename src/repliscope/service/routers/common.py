"""Helpers shared by the routers: the store of the app, the store errors mapped to the API's errors."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import Request
from pydantic import AfterValidator

from repliscope.errors import StoreError
from repliscope.service.errors import ApiError

if TYPE_CHECKING:
    from repliscope.service.executor import JobExecutor


MAX_PAGE = 1_000_000
"""The highest page number any route takes (the API's ``page``, the web pages' ``page`` and ``samples_page``):
past it a 422 naming the parameter, never an offset the database cannot hold (``page=2**62`` was a 500)."""


def store_of(request: Request) -> Any:
    return request.app.state.store


def executor_of(request: Request) -> JobExecutor:
    """The app's job executor as a :class:`~repliscope.service.executor.JobExecutor` (one set without ``check``
    accepts every job: :func:`~repliscope.service.executor.as_job_executor`)."""
    from repliscope.service.executor import as_job_executor

    return as_job_executor(request.app.state.executor)


@contextmanager
def store_errors(not_found_field: str | None = None, body_refs: bool = False) -> Iterator[None]:
    """Map the store's errors (:mod:`repliscope.store.errors`): NotFoundError -> 404 (422 with ``body_refs``: a
    reference inside a request body), ConflictError -> 409, InvalidInputError -> 422, DatabaseError (the database
    failed) -> 503, any other StoreError (e.g. an unknown or ambiguous run id) -> 404 naming ``not_found_field``."""
    from repliscope.store.errors import ConflictError, DatabaseError, InvalidInputError, NotFoundError

    try:
        yield
    except DatabaseError as exc:
        raise ApiError(503, str(exc), code="unavailable") from None
    except NotFoundError as exc:
        field = f"body.{exc.field}" if body_refs and exc.field else exc.field
        raise ApiError(
            422 if body_refs else 404, str(exc), field=field, code="unknown_reference" if body_refs else "not_found"
        ) from None
    except ConflictError as exc:
        raise ApiError(409, str(exc), field=exc.field, code="conflict") from None
    except InvalidInputError as exc:
        field = f"body.{exc.field}" if body_refs and exc.field else exc.field
        raise ApiError(422, str(exc), field=field, code="invalid") from None
    except StoreError as exc:
        raise ApiError(404, str(exc), field=not_found_field, code="not_found") from None


def _as_utc(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


UtcDatetime = Annotated[datetime, AfterValidator(_as_utc)]
"""A datetime served with its offset (RFC 3339): the store keeps UTC without one (SQLite has no time zones)."""


def utc_bound(value: datetime | None, field: str) -> datetime | None:
    """A date filter in UTC (one without an offset is UTC); a 422 naming ``field`` when it has no UTC equivalent
    (e.g. ``0001-01-01T00:00:00+00:01`` or ``9999-12-31T23:59:59-14:00``: outside the years 1..9999)."""
    if value is None:
        return None
    try:
        return _as_utc(value).astimezone(UTC)
    except OverflowError:
        raise ApiError(
            422,
            f"{value.isoformat()} is outside the representable dates (years 1 to 9999 in UTC)",
            field=field,
            code="invalid",
        ) from None


DATE_RULE = (
    "an ISO 8601 date (YYYY-MM-DD: midnight UTC) or date and time (YYYY-MM-DDTHH:MM[:SS[.ffffff]] with Z or "
    "+HH:MM, UTC without one); numbers such as Unix timestamps are refused"
)
"""The one rule of the API's date filters (``created_from``, ``created_to``), shown in their descriptions."""
_ISO_8601 = re.compile(r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,6})?)?(?:Z|[+-]\d{2}:\d{2})?)?")


def iso_datetime(value: str | None, field: str) -> datetime | None:
    """A date filter of :data:`DATE_RULE` in UTC; a 422 naming ``field`` and the rule for anything else. A number
    is never a timestamp: ``253402300800`` (read as milliseconds) and ``20000000000`` (read as seconds) were read
    two ways by pydantic's datetime parsing; both are refused."""
    if value is None:
        return None
    if not _ISO_8601.fullmatch(value):
        raise ApiError(422, f"{value[:60]!r} is not a date: the filter takes {DATE_RULE}", field=field, code="invalid")
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError as exc:
        raise ApiError(422, f"{value!r} is not a date ({exc}): the filter takes {DATE_RULE}", field=field) from None
    return utc_bound(parsed, field)
