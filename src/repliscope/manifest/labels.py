"""The class names of a manifest's ``labels`` section, read once and checked against ``num_classes``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from repliscope.errors import ChecksumError, ManifestError, SourceError
from repliscope.limits import LABELS_FILE_BYTES
from repliscope.manifest.loader import LoadedManifest
from repliscope.manifest.schema import LabelsSpec
from repliscope.manifest.sources import resolve_source
from repliscope.manifest.yaml_lines import Path_

BUILTIN_LABELS = (
    "builtin:imagenet-1k",
    "builtin:coco-80",
    "builtin:coco-91",
    "builtin:voc-20",
    "builtin:voc-21",
    "builtin:coco-80-background",
    "builtin:ilsvrc-det-200",
    "builtin:face",
    "builtin:coco-person",
    "builtin:background-person",
    "builtin:imagenet-1k-tf",
    "builtin:imagenet-21k-mxnet",
    "builtin:imagenet-1001-slim",
    "builtin:imagenet-1001-tf",
    "builtin:imagenet-1008-tf",
)
"""From ``voc-20`` on: the files of :data:`repliscope.datasets.label_sets.LABEL_SETS` (imported lazily)."""

ErrorAt = Callable[[str, Path_, "list[str] | None"], ManifestError]
"""(message, field path, allowed values) -> a located ManifestError (e.g. ``LoadedManifest.error``)."""


def read_class_names(
    loaded: LoadedManifest, cache_dir: Path, allow_download: bool = False, allow_outside_paths: bool = False
) -> tuple[str, ...]:
    """Class names of ``loaded`` (see :func:`class_names_of`)."""
    return class_names_of(
        loaded.manifest.labels, loaded.base_dir, cache_dir, loaded.error, allow_download, allow_outside_paths
    )


def class_names_of(
    spec: LabelsSpec,
    base_dir: Path,
    cache_dir: Path,
    error: ErrorAt,
    allow_download: bool = False,
    allow_outside_paths: bool = False,
) -> tuple[str, ...]:
    """Class names from ``labels.source``: ``builtin:imagenet-1k``, ``builtin:coco-80`` / ``builtin:coco-91``
    (:mod:`repliscope.tasks.coco_names`) or a UTF-8 text file (``name`` or ``wnid<TAB>name`` per non-empty
    line). Raises ``error(...)`` at the labels field that is wrong."""
    if spec.source == "builtin:imagenet-1k":
        from repliscope.datasets.classes import imagenet_classes

        names = tuple(name for _, name in imagenet_classes())
    elif spec.source in ("builtin:coco-80", "builtin:coco-91"):
        from repliscope.tasks.coco_names import COCO_80, COCO_91

        names = COCO_80 if spec.source == "builtin:coco-80" else COCO_91
    elif spec.source in BUILTIN_LABELS:  # VOC, COCO with background, ILSVRC detection
        from repliscope.datasets.label_sets import label_set

        names = label_set(spec.source)
    elif spec.source.startswith("builtin:"):
        raise error(f"unknown builtin label set '{spec.source}'", ("labels", "source"), list(BUILTIN_LABELS))
    else:
        try:
            path = resolve_source(
                spec.source,
                base_dir=base_dir,
                sha256=spec.sha256,
                cache_dir=cache_dir,
                allow_download=allow_download,
                what="labels",
                allow_outside_paths=allow_outside_paths,
            )
        except ChecksumError as exc:
            raise error(str(exc), ("labels", "sha256"), None) from None
        except SourceError as exc:
            raise error(str(exc), ("labels", "source"), None) from None
        limit = LABELS_FILE_BYTES.value
        try:
            if path.stat().st_size > limit:
                raise error(
                    f"the label file is over the {limit:,}-byte limit ({LABELS_FILE_BYTES.name}, "
                    f"${LABELS_FILE_BYTES.env})",
                    ("labels", "source"),
                    None,
                )
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise error(f"cannot read the label file {path}: {exc}", ("labels", "source"), None) from None
        names = tuple(ln.split("\t", 1)[-1].strip() for ln in text.splitlines() if ln.strip())
    if len(names) != spec.num_classes:
        raise error(
            f"the label source has {len(names)} classes, num_classes says {spec.num_classes}",
            ("labels", "num_classes"),
            None,
        )
    return names
