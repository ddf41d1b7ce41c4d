"""``image_folder``: every image file under a directory, labelled by a label rule.

Sample ids are paths relative to the folder with forward slashes, in sorted order. Files are read lazily
(once, by the evaluation loop); a file that cannot be read is a failed sample, not a crash. Files with
other extensions are ignored but listed in the dataset (``ignored_files``); folders that cannot be listed
are listed too (``unreadable_folders``). Hidden folders are not walked; symlinked folders inside the folder are
followed (a symlink back to one of its own parent folders is refused); a symlink, to a file or a folder, whose
target resolves outside the folder is never followed nor read (listed in ``unreadable_folders``). The walk is
bounded (:mod:`repliscope.datasets.walk`: entries, depth, time) and stops when cancelled.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path, PurePosixPath

from repliscope.datasets.base import LABEL_RULES, Dataset, Sample, os_reason, read_file
from repliscope.datasets.labels import check_labels, detect_label_rule
from repliscope.datasets.walk import Walk, WalkBounds
from repliscope.errors import DatasetError

IMAGE_EXTENSIONS: tuple[str, ...] = (".jpg", ".jpeg", ".png", ".bmp", ".webp")


@dataclass(frozen=True)
class FolderScan:
    """What :func:`scan_folder` found; every list holds paths relative to the root, sorted."""

    images: list[str]
    """Image files by extension (including ones that will fail to read, e.g. dangling symlinks)."""
    ignored: list[str]
    """Files with other extensions: not samples, but reported."""
    unreadable_folders: list[str]
    """``"<path>/ (<reason>)"`` for each folder that could not be listed or is a symlink loop, and
    ``"<path> (<reason>)"`` for each symlink that leads out of the folder (not followed)."""


OUTSIDE = "symlink out of the dataset folder: not followed"


def scan_folder(root: Path, extensions: Iterable[str], bounds: WalkBounds | None = None) -> FolderScan:
    """Walk ``root`` (hidden folders skipped; symlinked folders inside it followed, loops refused; symlinks out
    of it never followed); extensions compare case-insensitively. Never raises for an entry: what cannot be listed
    is recorded; a WalkLimitError (a DatasetError) past ``bounds`` (default: the context's,
    :func:`repliscope.datasets.walk.current_bounds`) or when the walk is cancelled."""
    exts = {e.lower() if e.startswith(".") else f".{e.lower()}" for e in extensions}
    scan = FolderScan([], [], [])
    budget = Walk(root, bounds)

    def walk(folder: Path, rel: PurePosixPath, ancestors: frozenset[str]) -> None:
        budget.step(0, len(rel.parts))
        try:
            with os.scandir(folder) as it:
                entries = []
                for entry in it:  # counted as listed: a folder of millions stops at the bound, not after
                    entries.append(entry)
                    if len(entries) % 1000 == 0:
                        budget.step(1000, len(rel.parts))
                budget.step(len(entries) % 1000, len(rel.parts))
        except OSError as exc:
            scan.unreadable_folders.append(f"{_folder_name(rel)} ({os_reason(exc)})")
            return
        for entry in sorted(entries, key=lambda e: e.name):
            sample_id = rel / entry.name
            try:
                link = entry.is_symlink()
            except OSError:
                link = False
            if link and budget.leaves(entry.path):
                scan.unreadable_folders.append(f"{sample_id.as_posix()} ({OUTSIDE})")
                continue
            try:
                is_dir = entry.is_dir()  # follows symlinks (inside the folder); False for a dangling one
            except OSError:
                is_dir = False
            if not is_dir:
                (scan.images if Path(entry.name).suffix.lower() in exts else scan.ignored).append(sample_id.as_posix())
            elif not entry.name.startswith("."):
                real = os.path.realpath(entry.path)
                if real in ancestors:
                    scan.unreadable_folders.append(f"{_folder_name(sample_id)} (symlink loop: not followed)")
                else:
                    walk(Path(entry.path), sample_id, ancestors | {real})

    walk(root, PurePosixPath(), frozenset({budget.root_real}))
    scan.images.sort()
    scan.ignored.sort()
    scan.unreadable_folders.sort()
    return scan


def _folder_name(rel: PurePosixPath) -> str:
    return "./" if rel == PurePosixPath() else f"{rel.as_posix()}/"


def load_image_folder(
    path: str | os.PathLike[str],
    label_rule: str | None = None,
    *,
    labels_csv: str | os.PathLike[str] | None = None,
    classes: Sequence[str] | None = None,
    allow_unlabelled: bool = False,
    extensions: Iterable[str] = IMAGE_EXTENSIONS,
    license: str = "unknown",
    name: str | None = None,
    limit: int | None = None,
) -> Dataset:
    """Load a folder of images. ``label_rule=None`` detects the rule (recorded as ``"<rule> (detected)"``).

    ``labels_csv`` is for the ``csv`` rule (given alone, it selects that rule), ``classes`` for
    ``subfolders``. ``limit`` keeps the first N samples in sorted order, after every file was labelled.
    """
    root = Path(path).expanduser()
    if not root.is_dir():
        raise DatasetError(f"image folder not found or not a directory: {root}")
    root = root.resolve()
    if limit is not None and limit < 1:
        raise DatasetError(f"limit must be a positive integer, got {limit}")
    extensions = tuple(extensions)
    scan = scan_folder(root, extensions)
    ids, ignored = scan.images, scan.ignored
    if not ids:
        found = f"; found only {len(ignored)} other files (e.g. {', '.join(ignored[:3])})" if ignored else ""
        unlisted = f"; could not list {', '.join(scan.unreadable_folders[:3])}" if scan.unreadable_folders else ""
        raise DatasetError(f"no image files ({', '.join(extensions)}) in {root}{found}{unlisted}")

    rule, shown_rule = _choose_rule(label_rule, ids, root, labels_csv)
    options: dict[str, object] = {}
    if labels_csv is not None:
        if rule != "csv":
            raise DatasetError(f"labels_csv is only used by label rule 'csv', not '{rule}'")
        options["labels_csv"] = labels_csv
    if classes is not None:
        if rule != "subfolders":
            raise DatasetError(f"classes is only used by label rule 'subfolders', not '{rule}'")
        options["classes"] = classes
    labels = LABEL_RULES.get(rule)(ids, root, **options)
    check_labels(rule, ids, labels, root, allow_unlabelled)

    samples = [
        Sample(id=i, label=label, read=partial(read_file, root / i, root), location=str(root / i))
        for i, label in zip(ids, labels, strict=True)
    ]
    if limit is not None:
        samples = samples[:limit]
    return Dataset(
        name=name or root.name,
        samples=samples,
        license=license,
        label_rule=shown_rule,
        description=_describe(len(ids), samples, ignored, rule),
        origin=str(root),
        ignored_files=tuple(ignored),
        unreadable_folders=tuple(scan.unreadable_folders),
    )


def _choose_rule(label_rule: str | None, ids: Sequence[str], root: Path, labels_csv: object) -> tuple[str, str]:
    """(rule name, rule as recorded in the dataset)."""
    if label_rule is not None:
        LABEL_RULES.get(label_rule)  # unknown name -> UnknownNameError listing the rules
        return label_rule, label_rule
    rule = "csv" if labels_csv is not None else detect_label_rule(ids, root, LABEL_RULES.names())
    return rule, f"{rule} (detected)"


def _describe(total: int, samples: Sequence[Sample], ignored: Sequence[str], rule: str) -> str:
    parts = [f"{len(samples)} images"]
    if len(samples) < total:
        parts.append(f"(first {len(samples)} of {total} in sorted order)")
    unlabelled = sum(1 for s in samples if s.label is None)
    if unlabelled and rule != "none":
        parts.append(f"; {unlabelled} kept unlabelled (allow_unlabelled)")
    if ignored:
        parts.append(f"; ignored {len(ignored)} non-image files (e.g. {', '.join(ignored[:3])})")
    return " ".join(parts).replace(" ;", ";")
