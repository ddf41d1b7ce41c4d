"""The store's errors, every one a :class:`~repliscope.errors.StoreError`: what the per-domain stores raise, and
what :meth:`repliscope.store.database.Database.session` turns a database failure into (no SQLAlchemy exception
leaves a store, except where :mod:`repliscope.store.job_results` says why).

========================  ===============================================================  ==========================
error                     when                                                             the service answers
========================  ===============================================================  ==========================
:class:`NotFoundError`    a named object (dataset, manifest, job, token) does not exist    404 (422 inside a body)
:class:`ConflictError`    it exists with other content; a unique key taken concurrently     409
:class:`InvalidInputError` a value is not allowed (``field`` names it)                      422
:class:`UnknownIdError`   no stored id is, or starts with, the given id                    404
:class:`AmbiguousIdError` several stored ids start with the given prefix                   404 (the sweep filter: 422)
:class:`DatabaseError`    the database failed (unreachable, locked, full, read-only)       503
========================  ===============================================================  ==========================
"""

from __future__ import annotations

from collections.abc import Sequence

from repliscope.errors import StoreError


class FieldError(StoreError):
    """A store error about one input field (``field``: its name, None when it is not one field's)."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class NotFoundError(FieldError):
    """The named object does not exist (HTTP 404)."""


class ConflictError(FieldError):
    """The object exists with other content (HTTP 409)."""


class InvalidInputError(FieldError):
    """A value is not allowed (HTTP 422); ``field`` names it."""


class UnknownIdError(StoreError):
    """No stored ``what`` (run, sweep, benchmark, stack matrix, diff, trace) has the id ``given`` or an id
    starting with it."""

    def __init__(self, message: str, what: str, given: str) -> None:
        super().__init__(message)
        self.what, self.given = what, given


class AmbiguousIdError(StoreError):
    """Several stored ids start with the prefix ``given``; ``candidates``: the first ten of them."""

    def __init__(self, message: str, what: str, given: str, candidates: Sequence[str]) -> None:
        super().__init__(message)
        self.what, self.given, self.candidates = what, given, list(candidates)


class DatabaseError(StoreError):
    """The database failed under a store operation; the message names the operation, the database (password
    hidden) and ``reason`` (the driver's first line, e.g. ``database or disk is full``)."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason
