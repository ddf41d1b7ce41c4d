"""Datasets: an ordered list of samples (id, encoded bytes on demand, label) plus an identity.

A dataset's identity is the sha256 over every sample's id, file bytes and label, so two runs on the same
identity saw exactly the same data. Reading a sample's bytes never decodes it: decoding is the pipeline's
``decode`` op, so a corrupt file is a recorded sample failure, not a dataset failure.

Every file is read ONCE per run: the evaluation loop reads a sample with :func:`read_sample`, which also
hashes the bytes, and the record's identity is :meth:`Dataset.identity_from` those per-sample fingerprints,
so the identity covers exactly what was evaluated. A file that cannot be read is a failed sample whose
fingerprint is its failure reason (``"unreadable: ..."``); it never stops the run.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from repliscope.errors import RepliscopeError, SampleError
from repliscope.limits import SAMPLE_FILE_BYTES
from repliscope.registry import Registry

if TYPE_CHECKING:
    import numpy as np

UNREADABLE = "unreadable: "
"""Prefix of the failure reason (and fingerprint) of a sample whose bytes could not be read."""

LISTED_NAMES = 1000
"""At most this many ignored file / unreadable folder names are kept in a record (the counts are exact)."""


@dataclass(frozen=True)
class BoxAnnotation:
    """One ground-truth object (detection): ``box`` (x1, y1, x2, y2) in pixels of the decoded image, 0-based
    pixel edges (COCO ``[x, y, w, h]`` -> (x, y, x + w, y + h)); ``class_id`` in the dataset's category ids;
    ``area`` as the annotation states it (COCO: the segmentation's area, used for the small/medium/large
    ranges) or None (then the box area); ``iscrowd`` regions are matched but never count as misses;
    ``ignore``: a box the annotator marked as not to be scored (dlib's ``ignore='1'``); ``xywh``: the box as the
    annotation file gives it (COCO ``[x, y, w, h]``, the numbers COCO's IoU uses) or None (then derived from
    ``box``)."""

    box: tuple[float, float, float, float]
    class_id: int
    area: float | None = None
    iscrowd: bool = False
    ignore: bool = False
    annotation_id: int | None = None
    xywh: tuple[float, float, float, float] | None = None


class MaskTruth(Protocol):
    """A sample's ground-truth semantic mask, read on demand (:mod:`repliscope.datasets.segmentation_masks`).

    ``read(keep)`` -> int32 (H, W) dataset category ids: 0 = background (no category), :data:`VOID` = not scored;
    categories outside ``keep`` (None: all) read as background, the overlap rule applying among the kept ones.
    Raises SampleError when the mask cannot be read."""

    @property
    def categories(self) -> dict[int, str]:
        """The dataset's category ids -> names (the class map)."""

    def read(self, keep: frozenset[int] | None) -> np.ndarray: ...

    def instances(self, keep: frozenset[int] | None) -> list[tuple[int, np.ndarray]] | None:
        """The image's object instances of the kept categories as (category id, bool (H, W) mask), in
        annotation order; None when the dataset has no instances (a VOC class PNG)."""

    def fingerprint(self) -> str | None:
        """What the dataset identity hashes of this mask (e.g. the PNG's sha256); None when the identity already
        covers it (COCO: the annotation boxes, from the same instances file)."""


VOID = 255
"""The label of pixels that are not scored (VOC's boundary and "difficult" regions)."""


@dataclass(frozen=True)
class Sample:
    """One labelled (or unlabelled: ``label is None``) sample; ``read()`` returns the encoded bytes and
    raises OSError or SampleError when it cannot.

    Detection datasets set ``objects`` (the ground truth; an empty tuple = annotated, no object) and
    ``image_id`` (COCO's id; the evaluator's key), and leave ``label`` None."""

    id: str
    label: int | None
    read: Callable[[], bytes] = field(repr=False, compare=False)
    location: str = ""
    objects: tuple[BoxAnnotation, ...] | None = None
    image_id: int | None = None
    size_hw: tuple[int, int] | None = None
    """(height, width) as the annotation file states it (checked against the decoded image), or None."""
    mask: MaskTruth | None = field(default=None, repr=False, compare=False)
    """Semantic segmentation: the sample's ground-truth label map (see :class:`MaskTruth`), or None."""


@dataclass(frozen=True)
class SampleRead:
    """What reading one sample gave: its bytes and their sha256 (hex), or why it could not be read."""

    data: bytes | None
    fingerprint: str
    """sha256 hex of ``data``; for an unreadable sample the failure reason (starts with :data:`UNREADABLE`)."""

    @property
    def error(self) -> str | None:
        return self.fingerprint if self.data is None else None


def read_sample(sample: Sample) -> SampleRead:
    """Read ``sample`` once and hash its bytes; a read failure becomes an ``unreadable: ...`` reason."""
    try:
        data = sample.read()
    except SampleError as exc:
        reason = str(exc)
        return SampleRead(None, reason if reason.startswith(UNREADABLE) else UNREADABLE + reason)
    except OSError as exc:
        return SampleRead(None, UNREADABLE + os_reason(exc))
    return SampleRead(data, hashlib.sha256(data).hexdigest())


def os_reason(exc: OSError) -> str:
    """A stable reason for an OSError: its text without the path (the sample id already names the file)."""
    return exc.strerror or (errno.errorcode.get(exc.errno, "") if exc.errno else "") or type(exc).__name__


_FILE_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def read_file(path: Path, root: Path | None = None) -> bytes:
    """The bytes of the regular file ``path``; anything else raises SampleError ``unreadable: <why>``.

    Opened non-blocking and checked with ``fstat`` before reading, so a FIFO or device named like an image
    cannot hang the run; a dangling symlink names its target. With ``root`` (the dataset's folder), a ``path``
    that resolves outside it (a symlink out of the folder, made after it was listed) is refused unread.
    """
    if root is not None:
        from repliscope.datasets.walk import inside

        if not inside(os.path.realpath(path), os.path.realpath(root)):
            raise SampleError(f"{UNREADABLE}symlink out of the dataset folder (not read)")
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError as exc:
        if os.path.islink(path):
            raise SampleError(f"{UNREADABLE}dangling symlink (target '{os.readlink(path)}' does not exist)") from exc
        raise SampleError(f"{UNREADABLE}file not found (removed after the folder was listed?)") from exc
    except OSError as exc:
        raise SampleError(UNREADABLE + os_reason(exc)) from exc
    info = os.fstat(fd)
    mode = info.st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = next((name for test, name in _FILE_KINDS if test(mode)), "an unknown kind")
        raise SampleError(f"{UNREADABLE}not a regular file ({kind})")
    limit = SAMPLE_FILE_BYTES.value
    too_big = (
        f"{UNREADABLE}the file is over the {limit:,}-byte limit ({SAMPLE_FILE_BYTES.name}, ${SAMPLE_FILE_BYTES.env})"
    )
    if info.st_size > limit:  # before reading: a sparse 3 GiB file is refused at once
        os.close(fd)
        raise SampleError(too_big)
    with os.fdopen(fd, "rb") as fh:
        try:
            data = fh.read(limit + 1)
        except OSError as exc:
            raise SampleError(UNREADABLE + os_reason(exc)) from exc
    if len(data) > limit:  # grew after the fstat
        raise SampleError(too_big)
    return data


def identity_line(sample: Sample, fingerprint: str) -> bytes:
    """One sample's part of :func:`identity_of`: (id, sha256(bytes), label, detection objects, mask fingerprint);
    an unreadable sample contributes its failure reason in place of the 32-byte digest. A sharded evaluation
    ships its samples' lines so the merged record's identity is the one the whole run would have."""
    fp = fingerprint
    parts = [sample.id.encode(), b"\0", fp.encode() if fp.startswith(UNREADABLE) else bytes.fromhex(fp)]
    parts.append(str(sample.label).encode())
    if sample.objects is not None:  # detection ground truth is part of what was evaluated against
        parts.append(repr([(o.box, o.class_id, o.area, o.iscrowd, o.ignore) for o in sample.objects]).encode())
    mask = sample.mask.fingerprint() if sample.mask is not None else None
    if mask is not None:  # a segmentation mask file is part of what was evaluated against
        parts.append(b"mask:" + mask.encode())
    parts.append(b"\n")
    return b"".join(parts)


def identity_of_lines(lines: Iterable[bytes]) -> str:
    """sha256 hex over the samples' :func:`identity_line`, in order."""
    h = hashlib.sha256()
    for line in lines:
        h.update(line)
    return h.hexdigest()


def identity_of(samples: Sequence[Sample], fingerprints: Sequence[str]) -> str:
    """sha256 hex over every sample's :func:`identity_line`, in order."""
    if len(fingerprints) != len(samples):
        raise RepliscopeError(f"{len(fingerprints)} fingerprints for {len(samples)} samples")
    return identity_of_lines(identity_line(s, fp) for s, fp in zip(samples, fingerprints, strict=True))


@dataclass
class Dataset:
    """An ordered, immutable collection of samples with provenance.

    ``ignored_files``: files under the dataset's folder that are not samples (other extensions), sorted.
    ``unreadable_folders``: folders that could not be listed, as ``"<path>/ (<reason>)"``; their files are
    not samples, so they are reported wherever the dataset is.
    """

    name: str
    samples: Sequence[Sample]
    license: str
    label_rule: str
    description: str = ""
    origin: str = ""
    ignored_files: Sequence[str] = ()
    unreadable_folders: Sequence[str] = ()
    categories: dict[int, str] | None = None
    """Detection: category id -> name (COCO: 1..90 with gaps); None for classification datasets."""
    _identity: str | None = field(default=None, repr=False)

    def __len__(self) -> int:
        return len(self.samples)

    @property
    def identity(self) -> str:
        """:func:`identity_of` every sample, reading every file once (cached). An evaluation does not use
        this: it passes the fingerprints of what it read to :meth:`identity_from` / :meth:`describe`."""
        if self._identity is None:
            self._identity = identity_of(self.samples, [read_sample(s).fingerprint for s in self.samples])
        return self._identity

    def identity_from(self, fingerprints: Sequence[str]) -> str:
        """The identity of what was actually read: one :attr:`SampleRead.fingerprint` per sample, in order."""
        return identity_of(self.samples, fingerprints)

    def describe(self, fingerprints: Sequence[str] | None = None) -> dict[str, Any]:
        """The record's ``dataset`` entry; its identity from ``fingerprints`` (what a run read) when given,
        else from reading every file (:attr:`identity`)."""
        labelled = sum(1 for s in self.samples if s.label is not None)
        identity = self.identity if fingerprints is None else self.identity_from(fingerprints)
        return {
            "name": self.name,
            "identity": identity,
            "num_samples": len(self.samples),
            "num_labelled": labelled,
            "license": self.license,
            "label_rule": self.label_rule,
            "origin": self.origin,
            "description": self.description,
            "num_ignored_files": len(self.ignored_files),
            "ignored_files": list(self.ignored_files[:LISTED_NAMES]),
            "unreadable_folders": list(self.unreadable_folders[:LISTED_NAMES]),
        }


DatasetLoader = Callable[..., Dataset]
"""A registered dataset: called with keyword options (e.g. ``path``, ``label_rule``), returns a Dataset."""

DATASETS: Registry[DatasetLoader] = Registry("dataset")
LABEL_RULES: Registry[Callable[..., Any]] = Registry("label rule")
