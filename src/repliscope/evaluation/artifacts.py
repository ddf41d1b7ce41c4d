"""From a loaded manifest to the things a run needs: a verified model artifact and the class names."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

from repliscope.errors import SourceError
from repliscope.manifest.frameworks import check_framework, check_requirement
from repliscope.manifest.loader import LoadedManifest
from repliscope.manifest.sources import resolve_source
from repliscope.runtimes.base import Architecture, ModelArtifact


def default_cache_dir() -> Path:
    """``$REPLISCOPE_CACHE`` or the user cache directory; holds ONNX exports and downloads."""
    return Path(os.environ.get("REPLISCOPE_CACHE") or platformdirs.user_cache_dir("repliscope"))


def resolve_artifact(loaded: LoadedManifest, cache_dir: Path, allow_download: bool = False) -> ModelArtifact:
    """Check the framework and architecture package versions, then locate and sha256-verify the model file."""
    m = loaded.manifest
    check_framework(m.framework.name, m.framework.version)
    architecture = None
    if m.architecture is not None:
        check_requirement(m.architecture.package, f"architecture '{m.architecture.factory}'")
        architecture = Architecture(m.architecture.factory, dict(m.architecture.kwargs))
    path = resolve_source(m.source.uri, base_dir=loaded.base_dir, sha256=m.source.sha256, cache_dir=cache_dir,
                          allow_download=allow_download, what="source")
    spec = m.inputs[0]
    return ModelArtifact(path=path, sha256=m.source.sha256, format=m.source.format, input_name=spec.name,
                         input_shape=tuple(spec.shape), input_dtype=spec.dtype, architecture=architecture,
                         origin=m.source.uri)


def load_class_names(loaded: LoadedManifest, cache_dir: Path, allow_download: bool = False) -> tuple[str, ...]:
    """Class names from ``labels.source``: ``builtin:imagenet-1k`` or a text file (``name`` or
    ``wnid<TAB>name`` per line). The count must equal ``labels.num_classes``."""
    spec = loaded.manifest.labels
    if spec.source == "builtin:imagenet-1k":
        from repliscope.datasets.classes import imagenet_classes

        names = tuple(name for _, name in imagenet_classes())
    elif spec.source.startswith("builtin:"):
        raise loaded.error(f"unknown builtin label set '{spec.source}'", ("labels", "source"),
                           ["builtin:imagenet-1k"])
    else:
        try:
            path = resolve_source(spec.source, base_dir=loaded.base_dir, sha256=spec.sha256, cache_dir=cache_dir,
                                  allow_download=allow_download, what="labels")
        except SourceError as exc:
            raise loaded.error(str(exc), ("labels", "source")) from None
        lines = [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
        names = tuple(ln.split("\t", 1)[-1].strip() for ln in lines)
    if len(names) != spec.num_classes:
        raise loaded.error(f"the label source has {len(names)} classes, num_classes says {spec.num_classes}",
                           ("labels", "num_classes"))
    return names
