"""Exception types. Every message says what was wrong, where, and what is allowed."""

from __future__ import annotations

from collections.abc import Iterable, Sequence


class RepliscopeError(Exception):
    """Base class of every error repliscope raises on purpose (the CLI prints these without a traceback)."""


class ManifestError(RepliscopeError):
    """A manifest is malformed: names the file, line, field path and the allowed values."""

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        line: int | None = None,
        field: str | None = None,
        allowed: Iterable[str] | None = None,
    ) -> None:
        self.file = file
        self.line = line
        self.field = field
        self.allowed = sorted(allowed) if allowed is not None else None
        where = ":".join(str(p) for p in (file, line) if p is not None)
        parts = [f"{where}: " if where else ""]
        if field:
            parts.append(f"field '{field}': ")
        parts.append(message)
        if self.allowed is not None:
            parts.append(f" (allowed: {', '.join(self.allowed)})")
        super().__init__("".join(parts))

    @property
    def errors(self) -> list[ManifestError]:
        """Every problem this error stands for (just itself; :class:`ManifestErrors` holds several)."""
        return [self]


class ManifestErrors(ManifestError):
    """Several problems of one manifest, reported at once, in line order. ``file``/``line``/``field``/
    ``allowed`` are those of the first problem; the message lists them all, one per line."""

    def __init__(self, errors: Sequence[ManifestError]) -> None:
        flat = [e for err in errors for e in err.errors]
        if not flat:
            raise ValueError("ManifestErrors needs at least one error")
        self._errors = sorted(flat, key=lambda e: e.line or 0)
        first = self._errors[0]
        self.file, self.line, self.field, self.allowed = first.file, first.line, first.field, first.allowed
        body = "\n".join(f"  {e}" for e in self._errors)
        RepliscopeError.__init__(
            self, f"{len(self._errors)} problems in the manifest:\n{body}" if len(self._errors) > 1 else str(first)
        )

    @property
    def errors(self) -> list[ManifestError]:
        return list(self._errors)


def raise_collected(errors: Sequence[ManifestError]) -> None:
    """Raise nothing for no errors, the error itself for one, :class:`ManifestErrors` for several."""
    if len(errors) == 1:
        raise errors[0]
    if errors:
        raise ManifestErrors(errors)


class UnknownNameError(RepliscopeError, KeyError):
    """A registry lookup failed; lists the known names and the closest matches."""

    def __init__(self, kind: str, name: str, known: Iterable[str], suggestions: Iterable[str]) -> None:
        self.kind = kind
        self.name = name
        self.known = sorted(known)
        self.suggestions = list(suggestions)
        hint = f" Did you mean {', '.join(repr(s) for s in self.suggestions)}?" if self.suggestions else ""
        super().__init__(f"unknown {kind} '{name}'.{hint} (allowed: {', '.join(self.known)})")

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


class SourceError(RepliscopeError):
    """A model, label or data source cannot be found or fetched."""


class NotCachedError(SourceError):
    """An https source is not in the cache and downloading was not allowed (``--download``)."""


class ChecksumError(SourceError):
    """A file's sha256 differs from the one the manifest declares; repliscope refuses to run it."""


class FrameworkError(RepliscopeError):
    """A framework is missing or its installed version is outside the manifest's constraint."""


class DatasetError(RepliscopeError):
    """A dataset is empty, unreadable, or its label rule matches nothing."""


class SampleError(RepliscopeError):
    """One sample could not be processed (corrupt, truncated, unreadable). Recorded, never dropped."""


class StoreError(RepliscopeError):
    """A run id is unknown or the database cannot be used."""


class StackError(RepliscopeError):
    """A stack spec, a stack's creation or a stack look-up failed (the message says which and why)."""


class OpSpecError(RepliscopeError):
    """An op spec (one entry of ``preprocess``/``postprocess``) is invalid.

    ``key`` is the offending key inside the op entry ("op" for an unknown op name, else the parameter
    name, possibly dotted for nested values); the manifest loader adds the file, line and full field path.
    """

    def __init__(self, key: str, message: str, allowed: Iterable[str] | None = None) -> None:
        self.key = key
        self.message = message
        self.allowed = sorted(allowed) if allowed is not None else None
        extra = f" (allowed: {', '.join(self.allowed)})" if self.allowed is not None else ""
        super().__init__(f"{key}: {message}{extra}")
