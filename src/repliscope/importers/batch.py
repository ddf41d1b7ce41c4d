"""Import one foreign config, or every matching file of a folder, and check each translation offline."""

from __future__ import annotations

import fnmatch
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from repliscope.errors import RepliscopeError
from repliscope.importers.base import IMPORTERS, Importer, ImportResult, ImportWarning


def make_importer(format_name: str, options: dict[str, Any] | None = None) -> Importer:
    """The registered importer ``format_name`` built with ``options`` (only those it declares; unset = None)."""
    cls = IMPORTERS.get(format_name)  # an unknown format is named before the file is looked at
    given = {k: v for k, v in (options or {}).items() if v is not None and v is not False}
    unknown = sorted(set(given) - set(cls.options))
    if unknown:
        flags = ", ".join("--" + k.replace("_", "-") for k in unknown)
        known = ", ".join("--" + o.replace("_", "-") for o in cls.options) or "none"
        raise RepliscopeError(f"the {format_name} importer takes no {flags} (its options: {known})")
    return cls(**given)


def import_one(format_name: str, path: Path, options: dict[str, Any] | None = None) -> ImportResult:
    """Translate ``path`` with the registered importer ``format_name`` and validate the result offline (schema,
    ops, shapes); a translation that does not validate is an error naming the problems."""
    importer = make_importer(format_name, options)
    if not path.is_file():
        raise RepliscopeError(f"{path}: no such file")
    result = importer.translate(path)
    problems = offline_problems(result)
    if problems:
        raise RepliscopeError(
            f"{path}: the translation does not validate (an importer bug, please report it):\n" + "\n".join(problems)
        )
    return result


def offline_problems(result: ImportResult) -> list[str]:
    """`manifest validate --offline` of the translated manifest: the problems (empty when valid)."""
    from repliscope.manifest.loader import inspect_manifest

    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / "imported.yaml"
        p.write_text(result.to_yaml(), encoding="utf-8")
        found = inspect_manifest(p)
        return [str(e).replace(str(p), "<translation>") for e in found.errors]


@dataclass
class FolderRow:
    file: str
    outcome: str
    """``translated``, ``with warnings`` or ``refused``."""
    detail: str = ""
    warnings: list[ImportWarning] = field(default_factory=list)
    reason: str = ""
    """For a refusal, :attr:`ConfigImportError.reason` (``invalid`` for a translation that does not validate)."""

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "warnings": [asdict(w) for w in self.warnings]}


def import_folder(
    format_name: str, folder: Path, out_dir: Path, options: dict[str, Any] | None = None
) -> list[FolderRow]:
    """Every file under ``folder`` matching the importer's patterns -> ``out_dir/<relative path>.yaml``."""
    importer = make_importer(format_name, options)
    if not out_dir.parent.is_dir():
        raise RepliscopeError(f"--out-dir {out_dir}: the folder {out_dir.parent} does not exist")
    files = sorted(
        p for p in folder.rglob("*") if p.is_file() and any(fnmatch.fnmatch(p.name, pat) for pat in importer.patterns)
    )
    if not files:
        raise RepliscopeError(f"no {format_name} files ({', '.join(importer.patterns)}) under {folder}")
    rows = []
    for f in files:
        rel = f.relative_to(folder)
        try:
            result = import_one(format_name, f, options)
        except RepliscopeError as exc:
            rows.append(
                FolderRow(str(rel), "refused", str(exc).splitlines()[0], reason=getattr(exc, "reason", "invalid"))
            )
            continue
        target = out_dir / rel.with_suffix(".yaml")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(result.to_yaml(), encoding="utf-8")
        rows.append(
            FolderRow(
                str(rel),
                "with warnings" if result.warnings else "translated",
                ", ".join(sorted({w.code for w in result.warnings})),
                result.warnings,
            )
        )
    return rows


def coverage(rows: list[FolderRow]) -> list[tuple[str, int]]:
    """(outcome or ``refused: <reason>``, file count), translations first, then refusals by count."""
    translated = [(k, sum(r.outcome == k for r in rows)) for k in ("translated", "with warnings")]
    refused: dict[str, int] = {}
    for r in rows:
        if r.outcome == "refused":
            refused[r.reason] = refused.get(r.reason, 0) + 1
    return [(k, n) for k, n in translated if n] + [
        (f"refused: {k}", n) for k, n in sorted(refused.items(), key=lambda kv: (-kv[1], kv[0]))
    ]
