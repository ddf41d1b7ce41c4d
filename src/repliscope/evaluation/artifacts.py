"""From a loaded manifest to the things a run needs: a verified model artifact and the class names."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from repliscope.manifest.frameworks import check_framework, check_requirement
from repliscope.manifest.labels import read_class_names
from repliscope.manifest.loader import LoadedManifest
from repliscope.manifest.sources import resolve_module_file, resolve_source
from repliscope.runtimes.base import Architecture, ModelArtifact


def resolve_artifact(
    loaded: LoadedManifest, cache_dir: Path, allow_download: bool = False, allow_outside_paths: bool = False
) -> ModelArtifact:
    """Check the framework and architecture package versions, then locate (under the source path policy of
    :mod:`repliscope.manifest.sources`) and sha256-verify the model file."""
    m = loaded.manifest
    check_framework(m.framework.name, m.framework.version)
    architecture = None
    if m.architecture is not None:
        arch = m.architecture
        if arch.package is not None:
            check_requirement(arch.package, f"architecture '{arch.factory}'")
        local: dict[str, Any] = {}
        if arch.path is not None:
            folder, _, digest = resolve_module_file(
                arch.factory, arch.path, loaded.base_dir, allow_outside_paths, arch.sha256
            )
            local = {"module_dir": folder, "module_sha256": digest}
        architecture = Architecture(arch.factory, dict(arch.kwargs), package=arch.package, **local)
    path = resolve_source(
        m.source.uri,
        base_dir=loaded.base_dir,
        sha256=m.source.sha256,
        cache_dir=cache_dir,
        allow_download=allow_download,
        what="source",
        allow_outside_paths=allow_outside_paths,
        format=m.source.format,
    )
    config: dict[str, Any] = {}
    if m.source.config is not None:
        config = {
            "config_sha256": m.source.config.sha256,
            "config_path": resolve_source(
                m.source.config.uri,
                base_dir=loaded.base_dir,
                sha256=m.source.config.sha256,
                cache_dir=cache_dir,
                allow_download=allow_download,
                what="source.config",
                allow_outside_paths=allow_outside_paths,
            ),
        }
    spec = m.inputs[0]
    return ModelArtifact(
        path=path,
        sha256=m.source.sha256,
        format=m.source.format,
        input_name=spec.name,
        input_shape=tuple(spec.shape),
        input_dtype=spec.dtype,
        architecture=architecture,
        origin=m.source.uri,
        output_names=tuple(o.name for o in m.outputs),
        **config,
    )


def load_class_names(
    loaded: LoadedManifest, cache_dir: Path, allow_download: bool = False, allow_outside_paths: bool = False
) -> tuple[str, ...]:
    """Class names from ``labels.source`` (see :func:`repliscope.manifest.labels.read_class_names`)."""
    return read_class_names(loaded, cache_dir, allow_download, allow_outside_paths)
