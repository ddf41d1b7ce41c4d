"""``image_folder``: every image file under a directory, labelled by a label rule.

Sample ids are paths relative to the folder with forward slashes, in sorted order. Files are read lazily;
files with other extensions are ignored but counted in the description. Hidden folders are not walked.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from repliscope.datasets.base import LABEL_RULES, Dataset, Sample
from repliscope.datasets.labels import check_labels, detect_label_rule
from repliscope.errors import DatasetError

IMAGE_EXTENSIONS: tuple[str, ...] = (".jpg", ".jpeg", ".png", ".bmp", ".webp")


def scan_folder(root: Path, extensions: Iterable[str]) -> tuple[list[str], list[str]]:
    """(image ids, ignored ids) under ``root``, both sorted; extensions compare case-insensitively."""
    exts = {e.lower() if e.startswith(".") else f".{e.lower()}" for e in extensions}
    images: list[str] = []
    ignored: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        rel = Path(dirpath).relative_to(root)
        for fname in filenames:
            sample_id = (rel / fname).as_posix()
            (images if Path(fname).suffix.lower() in exts else ignored).append(sample_id)
    return sorted(images), sorted(ignored)


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
    ids, ignored = scan_folder(root, extensions)
    if not ids:
        found = f"; found only {len(ignored)} other files (e.g. {', '.join(ignored[:3])})" if ignored else ""
        raise DatasetError(f"no image files ({', '.join(extensions)}) in {root}{found}")

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
        Sample(id=i, label=label, read=(root / i).read_bytes, location=str(root / i))
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
    )


def _choose_rule(
    label_rule: str | None, ids: Sequence[str], root: Path, labels_csv: object
) -> tuple[str, str]:
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
