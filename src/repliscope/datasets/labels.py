"""Label rules: how a folder of images gets its integer labels.

A rule is ``rule(ids, root, **options) -> labels``: ``ids`` are sample ids (paths relative to ``root``,
forward slashes), the result has one entry per id, ``None`` where the rule does not match that file.
Rules are registered in ``LABEL_RULES`` under the word used in manifests (see ``repliscope.datasets``).
:func:`check_labels` turns unmatched files into a :class:`DatasetError` - nothing is dropped silently.
"""

from __future__ import annotations

import csv
import os
import re
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

from repliscope.datasets.classes import imagenet_wnid_index
from repliscope.errors import DatasetError

Labels = list[int | None]

UNLABELLED_RULE = "none"
"""The rule that labels nothing on purpose; its ``None`` labels are not "unmatched"."""

_WNID = re.compile(r"^(n\d{8})(?:_.*)?$")
_TRAILING_INDEX = re.compile(r"_(\d+)$")


def _stem(sample_id: str) -> str:
    return PurePosixPath(sample_id).stem


def imagenet_wnid(ids: Sequence[str], root: Path) -> Labels:
    """``n01440764_tench.JPEG`` -> index of ``n01440764`` among the 1000 ILSVRC-2012 wnids (sorted).

    The index comes from the shipped class list, not from the rank within the folder, so subsets keep
    their true labels. A wnid outside the 1000 classes does not match.
    """
    index = imagenet_wnid_index()
    labels: Labels = []
    for sample_id in ids:
        m = _WNID.match(_stem(sample_id))
        labels.append(index.get(m.group(1)) if m else None)
    return labels


def filename_index(ids: Sequence[str], root: Path) -> Labels:
    """The integer after the last underscore before the extension: ``imagenet_07_609.jpg`` -> 609."""
    labels: Labels = []
    for sample_id in ids:
        m = _TRAILING_INDEX.search(_stem(sample_id))
        labels.append(int(m.group(1)) if m else None)
    return labels


def class_folders(root: Path) -> list[str]:
    """Sorted names of the non-hidden immediate sub-folders of ``root`` (torchvision ImageFolder order); a
    symlink out of ``root`` is not one (the folder walk never follows it)."""
    from repliscope.datasets.walk import inside

    real_root = os.path.realpath(root)
    return sorted(
        p.name
        for p in root.iterdir()
        if not p.name.startswith(".") and p.is_dir() and (not p.is_symlink() or inside(os.path.realpath(p), real_root))
    )


def subfolders(ids: Sequence[str], root: Path, classes: Sequence[str] | None = None) -> Labels:
    """Label = index of the file's top-level folder in ``classes`` (default: sorted sub-folders of root).

    Files directly in ``root``, or in a folder not in ``classes``, do not match.
    """
    names = list(classes) if classes is not None else class_folders(root)
    index = {name: i for i, name in enumerate(names)}
    labels: Labels = []
    for sample_id in ids:
        top, sep, _ = sample_id.partition("/")
        labels.append(index.get(top) if sep else None)
    return labels


def read_labels_csv(path: Path) -> dict[str, int]:
    """Parse a ``filename,label`` CSV (header required; filename relative to the image folder)."""
    try:
        with path.open(newline="", encoding="utf-8-sig") as fh:
            reader = csv.DictReader(fh)
            fields = reader.fieldnames or []
            if "filename" not in fields or "label" not in fields:
                raise DatasetError(
                    f"{path}: labels CSV needs a header with 'filename' and 'label' columns, got {fields}"
                )
            table: dict[str, int] = {}
            for row in reader:
                line = reader.line_num
                name = (row["filename"] or "").strip().replace("\\", "/").removeprefix("./")
                raw = (row["label"] or "").strip()
                if not name:
                    raise DatasetError(f"{path}:{line}: empty filename")
                if not re.fullmatch(r"\d+", raw):
                    raise DatasetError(f"{path}:{line}: label must be a non-negative integer, got {raw!r}")
                if name in table:
                    raise DatasetError(f"{path}:{line}: '{name}' is listed twice")
                table[name] = int(raw)
    except OSError as exc:
        raise DatasetError(f"cannot read labels CSV {path}: {exc}") from exc
    return table


def csv_labels(ids: Sequence[str], root: Path, labels_csv: str | Path | None = None) -> Labels:
    """Labels from a ``filename,label`` CSV; ``filename`` is the path relative to ``root``.

    A relative ``labels_csv`` that does not exist from the working directory is looked up inside ``root``.
    """
    if labels_csv is None:
        raise DatasetError("label rule 'csv' needs labels_csv=<path to a filename,label CSV>")
    path = Path(labels_csv).expanduser()
    if not path.is_file() and not path.is_absolute() and (root / path).is_file():
        path = root / path
    if not path.is_file():
        raise DatasetError(f"labels CSV not found: {labels_csv}")
    table = read_labels_csv(path)
    return [table.get(sample_id) for sample_id in ids]


def unlabelled(ids: Sequence[str], root: Path) -> Labels:
    """No labels: every sample's label is ``None`` (top-1 accuracy cannot be computed)."""
    return [None] * len(ids)


def detect_label_rule(ids: Sequence[str], root: Path, rules: Sequence[str]) -> str:
    """Pick a rule from the file layout: images in sub-folders -> ``subfolders``; every name a wnid ->
    ``imagenet_wnid``; every name ending in ``_<int>`` -> ``filename_index``; else a DatasetError."""
    if any("/" in i for i in ids):
        return "subfolders"
    stems = [_stem(i) for i in ids]
    if all(_WNID.match(s) for s in stems):
        return "imagenet_wnid"
    if all(_TRAILING_INDEX.search(s) for s in stems):
        return "filename_index"
    raise DatasetError(
        f"cannot detect a label rule for {root} (e.g. {_examples(ids)}): no class sub-folders, and the "
        f"file names are neither all '<wnid>_<name>' nor all '<name>_<int>'. Pass an explicit label rule "
        f"(allowed: {', '.join(rules)})"
    )


def check_labels(rule: str, ids: Sequence[str], labels: Labels, root: Path, allow_unlabelled: bool) -> None:
    """Raise a DatasetError when ``rule`` matched none, or only some, of the files (unless allowed)."""
    if rule == UNLABELLED_RULE:
        return
    unmatched = [i for i, label in zip(ids, labels, strict=True) if label is None]
    if not unmatched:
        return
    if len(unmatched) == len(ids):
        raise DatasetError(
            f"label rule '{rule}' matched none of the {len(ids)} image files in {root} "
            f"(e.g. {_examples(ids)}); choose another rule or rename the files"
        )
    if not allow_unlabelled:
        more = f" and {len(unmatched) - 10} more" if len(unmatched) > 10 else ""
        raise DatasetError(
            f"label rule '{rule}' matched {len(ids) - len(unmatched)} of {len(ids)} image files in {root}; "
            f"unmatched: {', '.join(unmatched[:10])}{more}. Fix or remove them, or pass "
            f"allow_unlabelled=True to keep them with label None"
        )


def _examples(ids: Sequence[str], n: int = 3) -> str:
    return ", ".join(ids[:n])
