"""``foolbox_imagenet``: the 20 labelled ImageNet images bundled in the foolbox 3.3.4 wheel.

The files are found through the installed distribution's metadata (foolbox itself is never imported) and
each one's sha256 is checked against the wheel's RECORD, so this default dataset is what the wheel shipped.
Labels come from the file names (``imagenet_07_609.jpg`` -> 609), i.e. the ``filename_index`` rule.
"""

from __future__ import annotations

import base64
import hashlib
from functools import partial
from importlib import metadata
from pathlib import Path

from repliscope.datasets.base import Dataset, Sample
from repliscope.datasets.labels import check_labels, filename_index
from repliscope.errors import DatasetError

DISTRIBUTION = "foolbox"
PINNED_VERSION = "3.3.4"
_PREFIX = "foolbox/data/imagenet_"
LICENSE = (
    "ImageNet images redistributed in the foolbox wheel (the foolbox package is MIT-licensed; the images "
    "are not): ImageNet terms of access apply - non-commercial research and educational use"
)
_INSTALL_HINT = f"pip install --no-deps {DISTRIBUTION}=={PINNED_VERSION}"


def record_sha256(data: bytes) -> str:
    """A file hash as written in a wheel's RECORD: urlsafe base64 of the sha256 digest, no padding."""
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _bundled_files() -> tuple[str, list[tuple[str, Path, str]]]:
    """(installed version, sorted [(file name, path, RECORD hash)]) of the bundled ImageNet images."""
    try:
        dist = metadata.distribution(DISTRIBUTION)
    except metadata.PackageNotFoundError as exc:
        raise DatasetError(f"dataset 'foolbox_imagenet' needs the foolbox wheel: {_INSTALL_HINT}") from exc
    found: list[tuple[str, Path, str]] = []
    for f in dist.files or []:
        if not (str(f).startswith(_PREFIX) and f.suffix == ".jpg"):
            continue
        if f.hash is None or f.hash.mode != "sha256":
            raise DatasetError(f"foolbox RECORD has no sha256 for {f}; reinstall with {_INSTALL_HINT}")
        found.append((f.name, Path(str(dist.locate_file(f))), f.hash.value))
    if not found:
        raise DatasetError(f"foolbox {dist.version} lists no {_PREFIX}*.jpg files; reinstall with {_INSTALL_HINT}")
    return dist.version, sorted(found)


def load_foolbox_imagenet(label_rule: str | None = None, *, limit: int | None = None) -> Dataset:
    """The bundled ImageNet images, sorted by file name, labelled by ``filename_index``.

    Every file is read once here to verify its RECORD hash (a mismatch or missing file is a DatasetError)
    and kept in memory (about 1 MB), so the samples are exactly the verified bytes and no file is read twice.
    """
    if label_rule not in (None, "filename_index"):
        raise DatasetError(f"dataset 'foolbox_imagenet' is labelled by 'filename_index', not '{label_rule}'")
    if limit is not None and limit < 1:
        raise DatasetError(f"limit must be a positive integer, got {limit}")
    version, files = _bundled_files()
    contents: list[bytes] = []
    for _, path, expected in files:
        try:
            data = path.read_bytes()
            actual = record_sha256(data)
        except OSError as exc:
            raise DatasetError(f"cannot read {path}: {exc}; reinstall with {_INSTALL_HINT}") from exc
        if actual != expected:
            raise DatasetError(
                f"{path}: sha256 {actual} differs from the foolbox RECORD ({expected}); the file was "
                f"modified - reinstall with {_INSTALL_HINT}"
            )
        contents.append(data)
    ids = [fname for fname, _, _ in files]
    root = files[0][1].parent
    labels = filename_index(ids, root)
    check_labels("filename_index", ids, labels, root, allow_unlabelled=False)
    samples = [
        Sample(id=fname, label=label, read=partial(bytes, data), location=str(path))
        for (fname, path, _), label, data in zip(files, labels, contents, strict=True)
    ]
    note = "" if version == PINNED_VERSION else f" (expected {PINNED_VERSION}: identity may differ)"
    kept = f"first {limit} of " if limit is not None and limit < len(samples) else ""
    return Dataset(
        name="foolbox_imagenet",
        samples=samples[:limit] if limit is not None else samples,
        license=LICENSE,
        label_rule="filename_index",
        description=(
            f"{kept}{len(files)} ImageNet images bundled with foolbox {version}{note}, sha256-verified "
            "against the wheel's RECORD. Too few for an accuracy claim; a smoke test of the pipeline."
        ),
        origin=f"foolbox {version} wheel: {root}",
    )
