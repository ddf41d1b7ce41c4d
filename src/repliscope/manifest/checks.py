"""Everything ``evaluate`` would refuse before its first sample, found up front with file:line.

:func:`check_manifest` loads a manifest (every schema, op, cross-field and static shape error at once), then
checks what needs the environment: the source path policy, the source file and its sha256, the framework and
architecture package versions, the architecture factory import and the label source. ``offline`` skips the
checks that need the source file, installed packages or imports; the path policy is always checked.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import importlib.util
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from repliscope.errors import ChecksumError, FrameworkError, ManifestError, NotCachedError, SourceError
from repliscope.manifest.frameworks import check_framework, check_requirement
from repliscope.manifest.loader import Inspection, LoadedManifest, inspect_manifest
from repliscope.manifest.schema import ArchitectureSpec, FrameworkSpec, LabelsSpec, SourceSpec
from repliscope.manifest.sources import check_policy, local_path, resolve_module_file, resolve_source


@dataclass
class ManifestReport:
    """The outcome of :func:`check_manifest`: ``errors`` in line order (empty = valid), ``warnings`` as
    ``file:line: ...`` strings, and ``loaded`` when the file itself loaded."""

    path: Path
    loaded: LoadedManifest | None
    errors: list[ManifestError] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors


def check_manifest(
    path: str | Path,
    *,
    cache_dir: Path,
    offline: bool = False,
    allow_download: bool = False,
    allow_outside_paths: bool = False,
) -> ManifestReport:
    """Check ``path`` as ``evaluate`` would before its first sample; never raises for a bad manifest.

    The environment checks run on every section that is valid by itself, so a schema error elsewhere does not
    hide a wrong sha256. ``allow_download``: an https source missing from the cache is fine (evaluate
    --download would fetch it; nothing is downloaded here).
    """
    found = inspect_manifest(path)
    report = ManifestReport(
        found.path, found.loaded, list(found.errors), list(found.loaded.warnings) if found.loaded else []
    )
    if found.data is None:
        return report
    source, labels = found.section("source", SourceSpec), found.section("labels", LabelsSpec)
    policy_ok = True
    for uri, at in (
        (source.uri if source else None, ("source", "uri")),
        (labels.source if labels else None, ("labels", "source")),
    ):
        if uri is None or uri.startswith("builtin:"):
            continue
        try:
            check_policy(uri, found.path.parent, allow_outside_paths)
        except SourceError as exc:
            report.errors.append(found.error(str(exc), at))
            policy_ok = False
    architecture = found.section("architecture", ArchitectureSpec)
    if architecture is not None and architecture.path is not None:
        try:
            local_path(architecture.path, found.path.parent, allow_outside_paths)
        except SourceError as exc:
            report.errors.append(found.error(str(exc), ("architecture", "path")))
            policy_ok = False
    if not offline and policy_ok:
        report.errors.extend(_environment_errors(found, cache_dir, allow_download, allow_outside_paths))
    report.errors.sort(key=lambda e: e.line or 0)
    return report


def _environment_errors(
    found: Inspection, cache_dir: Path, allow_download: bool, allow_outside_paths: bool
) -> list[ManifestError]:
    from repliscope.manifest.labels import class_names_of

    base_dir = found.path.parent
    errors: list[ManifestError] = []
    source = found.section("source", SourceSpec)
    if source is not None:
        try:
            resolve_source(
                source.uri,
                base_dir=base_dir,
                sha256=source.sha256,
                cache_dir=cache_dir,
                allow_outside_paths=allow_outside_paths,
                format=source.format,
            )
        except ChecksumError as exc:
            errors.append(found.error(str(exc), ("source", "sha256")))
        except NotCachedError as exc:
            if not allow_download:  # evaluate --download would fetch it; validate never downloads
                errors.append(
                    found.error(
                        f"{exc}; evaluate needs --download (validate --download accepts this)", ("source", "uri")
                    )
                )
        except SourceError as exc:
            errors.append(found.error(str(exc), ("source", "uri")))
    framework = found.section("framework", FrameworkSpec)
    if framework is not None:
        try:
            check_framework(framework.name, framework.version)
        except FrameworkError as exc:
            errors.append(found.error(str(exc), ("framework", "version")))
    architecture = found.section("architecture", ArchitectureSpec)
    if architecture is not None:
        if architecture.package is not None:
            try:
                check_requirement(architecture.package, f"architecture '{architecture.factory}'")
            except FrameworkError as exc:
                errors.append(found.error(str(exc), ("architecture", "package")))
        module_dir = None
        if architecture.path is not None:
            try:
                module_dir, _, _ = resolve_module_file(
                    architecture.factory, architecture.path, base_dir, allow_outside_paths, architecture.sha256
                )
            except ChecksumError as exc:
                errors.append(found.error(str(exc), ("architecture", "sha256")))
            except SourceError as exc:
                errors.append(found.error(str(exc), ("architecture", "path")))
        if architecture.path is None or module_dir is not None:
            try:
                check_factory(architecture.factory, module_dir)
            except FrameworkError as exc:
                errors.append(found.error(str(exc), ("architecture", "factory")))
    labels = found.section("labels", LabelsSpec)
    if labels is not None and not (allow_download and labels.source.startswith("https://")):
        try:
            class_names_of(labels, base_dir, cache_dir, found.error, allow_outside_paths=allow_outside_paths)
        except ManifestError as exc:
            errors.append(exc)
    return errors


def check_factory(factory: str, module_dir: Path | None = None) -> None:
    """Import the module of ``module:attr.path`` (from the local folder ``module_dir`` when given) and walk the
    attributes; FrameworkError says what is missing."""
    module_name, _, attr_path = factory.partition(":")
    if module_dir is not None:
        try:
            local = import_local_module(module_name, module_dir)
        except FrameworkError:
            raise
        except Exception as exc:  # any import-time failure of the user's module is reported
            raise FrameworkError(
                f"importing '{module_name}' from {module_dir} failed: {type(exc).__name__}: {exc}"
            ) from None
        obj, walked = walk_factory(local, module_name, attr_path)
        if not callable(obj):
            raise FrameworkError(f"'{walked}' is a {type(obj).__name__}, not a callable")
        return
    try:
        found = importlib.util.find_spec(module_name) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise FrameworkError(
            f"module '{module_name}' is not installed (install the package that provides it; "
            "architecture.package names the requirement)"
        )
    try:
        obj = importlib.import_module(module_name)
    except Exception as exc:  # any import-time failure of third-party code is reported
        raise FrameworkError(f"importing '{module_name}' failed: {type(exc).__name__}: {exc}") from None
    obj, walked = walk_factory(obj, module_name, attr_path)
    if not callable(obj):
        raise FrameworkError(f"'{walked}' is a {type(obj).__name__}, not a callable")


def import_local_module(module_name: str, folder: Path) -> ModuleType:
    """Import ``module_name`` from ``folder`` (a manifest's ``architecture.path``): the folder is on
    ``sys.path`` only during the import, and a module of that name already imported from elsewhere (or found
    elsewhere first) is an error, never silently used instead. A module of that name imported earlier in this
    process from ANOTHER manifest's ``architecture.path`` (two manifests each with their own ``model.py``,
    validated together) is unloaded first: each manifest gets its own."""
    root = Path(folder).resolve()
    for name in _parents(module_name):
        existing = sys.modules.get(name)
        if existing is not None and not _inside(existing, root) and _LOCAL.get(name) is existing:
            for loaded in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
                _LOCAL.pop(loaded, None)
                del sys.modules[loaded]
            importlib.invalidate_caches()
            existing = None
        if existing is not None and not _inside(existing, root):
            raise FrameworkError(
                f"architecture module '{module_name}': a module '{name}' is already imported from "
                f"{getattr(existing, '__file__', '?')}, not from {root}; rename the local module"
            )
    sys.path.insert(0, str(root))
    try:
        module = importlib.import_module(module_name)
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(str(root))
    if not _inside(module, root):
        raise FrameworkError(
            f"architecture module '{module_name}' was imported from "
            f"{getattr(module, '__file__', '?')}, not from architecture.path {root}; rename it"
        )
    for name in _parents(module_name):
        if name in sys.modules and _inside(sys.modules[name], root):
            _LOCAL[name] = sys.modules[name]
    return module


_LOCAL: dict[str, ModuleType] = {}
"""Modules imported by :func:`import_local_module` (from some manifest's architecture.path), by name."""


def _parents(module_name: str) -> list[str]:
    parts = module_name.split(".")
    return [".".join(parts[:k]) for k in range(1, len(parts) + 1)]


def _inside(module: ModuleType, root: Path) -> bool:
    file = getattr(module, "__file__", None)
    return file is not None and Path(file).resolve().is_relative_to(root)


class FactoryAttributeError(FrameworkError):
    """``walked`` (``module.Attr``) has no attribute ``part``; ``close`` are the nearest public names."""

    def __init__(self, walked: str, part: str, close: list[str]) -> None:
        self.walked, self.part, self.close = walked, part, close
        hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        super().__init__(f"'{walked}' has no attribute '{part}'{hint}")


def walk_factory(module: Any, module_name: str, attr_path: str) -> tuple[Any, str]:
    """Walk the dotted ``attr_path`` from the imported ``module``: ``(object, "module.attr.path")``, or
    :class:`FactoryAttributeError` at the first missing attribute (shared by :func:`check_factory` and the
    torch runtime's ``resolve_factory``)."""
    obj, walked = module, module_name
    for part in attr_path.split("."):
        if not hasattr(obj, part):
            close = difflib.get_close_matches(part, [n for n in dir(obj) if not n.startswith("_")], n=3)
            raise FactoryAttributeError(walked, part, close)
        obj = getattr(obj, part)
        walked = f"{walked}.{part}"
    return obj, walked
