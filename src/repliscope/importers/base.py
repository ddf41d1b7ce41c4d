"""The importer interface: a foreign model config -> a repliscope manifest (as a mapping) + warnings.

An importer never runs code from the file it reads (no Python hooks, no downloads). Everything it cannot
translate exactly becomes an :class:`ImportWarning` with a stable ``code``; it raises :class:`ConfigImportError` only
when the pipeline would be undefined. The result carries ``provenance.imported_from`` (format, file, sha256,
importer version) and renders as YAML with the warnings as comments.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import yaml

import repliscope
from repliscope.errors import RepliscopeError
from repliscope.registry import Registry

if TYPE_CHECKING:
    from repliscope.manifest.schema import Manifest


class ConfigImportError(RepliscopeError):
    """The foreign config cannot be translated: the pipeline it describes is undefined. Names file and field.

    ``reason`` is a stable word per kind of refusal (an importer's ``REFUSAL_REASONS``; ``invalid`` when the
    file breaks the format itself, ``limits`` when it exceeds the reading limits), so a folder import can count
    refusals by reason."""

    def __init__(self, message: str, reason: str = "invalid") -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class ImportWarning:
    """Something translated inexactly or not at all. ``code`` is stable (documented per importer), ``field`` the
    path in the SOURCE file (e.g. ``inputs[0].parameters.mean``)."""

    code: str
    field: str
    message: str


@dataclass
class ImportResult:
    """The translated manifest (a plain mapping, ready for YAML), the warnings, and the source file."""

    manifest: dict[str, Any]
    warnings: list[ImportWarning] = field(default_factory=list)
    source: Path | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "manifest": self.manifest,
            "warnings": [asdict(w) for w in self.warnings],
            "source": str(self.source) if self.source else None,
        }

    def to_yaml(self) -> str:
        """The manifest as YAML, headed by one comment line per warning (``# WARNING code field: message``)."""
        head = [f"# imported by repliscope {repliscope.__version__} from {self.source}"]
        head += [f"# WARNING {w.code} {w.field}: {w.message}".replace("\n", " ") for w in self.warnings]
        body = yaml.safe_dump(self.manifest, sort_keys=False, allow_unicode=True, width=110)
        return "\n".join(head) + "\n" + body


def imported_from(format_name: str, path: Path, reproduces: str | None = None) -> dict[str, Any]:
    """The ``provenance`` block of an imported manifest (``reproduces``: e.g. ``timm==1.0.31``)."""
    block = {
        "format": format_name,
        "file": str(path),
        "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "importer_version": repliscope.__version__,
    }
    return {"imported_from": {**block, "reproduces": reproduces} if reproduces else block}


class Importer(ABC):
    """One foreign format. ``patterns``: the file names a directory import picks up (``fnmatch`` globs)."""

    name: ClassVar[str]
    patterns: ClassVar[tuple[str, ...]]
    refusal_reasons: ClassVar[dict[str, str]] = {
        "invalid": "the file breaks the format (syntax, types, required fields, values)",
        "limits": "the file exceeds the reading limits (size, nesting, node count, number size, image size)",
    }
    """Every :attr:`ConfigImportError.reason` the importer raises, with its one-line meaning."""

    options: ClassVar[tuple[str, ...]] = ()
    """Keyword arguments the importer's constructor takes (CLI options such as ``timm_version``); an option
    given to an importer that does not take it is an error."""

    @abstractmethod
    def translate(self, path: Path) -> ImportResult:
        """Read ``path`` (never executing anything in it) -> the translation; ConfigImportError when the
        pipeline would be undefined."""

    @classmethod
    def run_advice(cls, reproduces: str | None, manifest_path: str) -> str | None:
        """How to run a manifest this importer wrote when its architecture cannot be loaded here (``reproduces``:
        its ``provenance.imported_from.reproduces``), as one sentence with the command; None: nothing to add."""
        return None


def run_advice(manifest: Manifest, manifest_path: Path | str) -> str | None:
    """The importer's :meth:`Importer.run_advice` for an imported ``manifest`` (``provenance.imported_from``);
    None for a manifest written by hand or an importer with nothing to add."""
    origin = manifest.provenance.imported_from if manifest.provenance is not None else None
    if origin is None or origin.format not in IMPORTERS:
        return None
    return IMPORTERS.get(origin.format).run_advice(origin.reproduces, str(manifest_path))


IMPORTERS: Registry[type[Importer]] = Registry("importer")
IMPORTERS.add("mlmodelscope", "repliscope.importers.mlmodelscope:MLModelScopeImporter")
IMPORTERS.add("timm", "repliscope.importers.timm:TimmImporter")
