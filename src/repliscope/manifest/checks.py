"""Everything ``evaluate`` would refuse before its first sample, found up front with file:line.

:func:`check_manifest` loads a manifest (every schema, op, cross-field and static shape error at once), then
checks what needs the environment: the source path policy, the source file and its sha256, the framework and
architecture package versions, the architecture factory import and the label source. ``offline`` skips the
checks that need the source file, installed packages or imports; the path policy is always checked.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from repliscope.errors import ChecksumError, FrameworkError, ManifestError, NotCachedError, SourceError
from repliscope.manifest.code_refs import CodeRefError, FactoryAttributeError, import_local_module, resolve_ref
from repliscope.manifest.frameworks import check_framework, check_requirement
from repliscope.manifest.loader import Inspection, LoadedManifest, inspect_manifest
from repliscope.manifest.schema import ArchitectureSpec, FrameworkSpec, LabelsSpec, SourceSpec
from repliscope.manifest.sources import check_policy, local_path, resolve_module_file, resolve_source

__all__ = ["FactoryAttributeError", "ManifestReport", "check_factory", "check_manifest", "import_local_module"]


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
        package_ok = True
        if architecture.package is not None:
            try:
                check_requirement(architecture.package, f"architecture '{architecture.factory}'")
            except FrameworkError as exc:
                errors.append(found.error(str(exc), ("architecture", "package")))
                package_ok = False
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
        if module_dir is not None or (architecture.path is None and package_ok):
            try:
                check_factory(architecture.factory, module_dir, None if module_dir else architecture.package)
            except FrameworkError as exc:
                at = exc.field if isinstance(exc, CodeRefError) else "architecture.factory"
                errors.append(found.error(str(exc), tuple(at.split("."))))
    labels = found.section("labels", LabelsSpec)
    if labels is not None and not (allow_download and labels.source.startswith("https://")):
        try:
            class_names_of(labels, base_dir, cache_dir, found.error, allow_outside_paths=allow_outside_paths)
        except ManifestError as exc:
            errors.append(exc)
    return errors


def check_factory(factory: str, module_dir: Path | None = None, package: str | None = None) -> None:
    """Import the module of ``module:attr.path`` and walk the attributes under the rules of
    :mod:`repliscope.manifest.code_refs`: from the local folder ``module_dir`` when given, else inside the
    distribution the requirement ``package`` names (version-checked), else inside the one installed distribution
    providing the module. FrameworkError (a :class:`~repliscope.manifest.code_refs.CodeRefError` naming the field)
    says what is missing or refused."""
    resolve_ref(factory, package=package, local_dir=module_dir)
