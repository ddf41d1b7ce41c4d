"""``voc_seg``: a PASCAL-VOC-style semantic segmentation folder: ``JPEGImages/<stem>.jpg`` and
``SegmentationClass/<stem>.png`` (one class id per pixel, as palette indices or grey values; 255 = void), with a
class map.

``voc_seg:PATH``: PATH is the folder (every mask in ``SegmentationClass/``, sorted) or a split list
``ImageSets/Segmentation/<split>.txt`` inside it (one stem per line, in file order). The class map says which id
is which class: ``class_map=FILE`` or ``builtin:voc`` (the 21 VOC classes, 0 = background), else the folder's
``class_map.txt``; one ``ID NAME`` per line (``0 background``, ``15 person``). A mask needs a class map: a palette
PNG's colours are not classes. A mask PNG of another size than its image, an RGB mask, or ids the class map does
not list make that sample failed (named in its error), never the run. The dataset identity covers the masks
(each PNG's sha256).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np

from repliscope.datasets.base import VOID, Dataset, Sample, read_file
from repliscope.datasets.segmentation_masks import check_mask_pixels
from repliscope.datasets.voc_xml import VOC_CLASSES as VOC_DETECTION_CLASSES
from repliscope.errors import DatasetError, SampleError

VOC_CLASSES = ("background", *VOC_DETECTION_CLASSES)
"""The PASCAL VOC 2012 segmentation classes, id = index (the devkit's order)."""
CLASS_MAP_FILE = "class_map.txt"
HOW_TO_MAP = (
    f"put a {CLASS_MAP_FILE} in the folder (one 'ID NAME' per line: '0 background', '15 person'; "
    "255 is void) or load it with class_map=FILE, or class_map=builtin:voc for the 21 VOC classes"
)


def parse_class_map(path: Path) -> dict[int, str]:
    """``ID NAME`` lines -> {id: name}; blank lines and ``#`` comments skipped; DatasetError naming the line."""
    out: dict[int, str] = {}
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        key, _, name = text.partition(" ")
        if not key.isdigit() or not name.strip() or int(key) >= VOID:
            raise DatasetError(f"{path}:{n}: expected 'ID NAME' with ID 0..254, got {line!r}")
        if int(key) in out:
            raise DatasetError(f"{path}:{n}: id {key} is listed twice")
        out[int(key)] = name.strip()
    if not out:
        raise DatasetError(f"{path}: the class map lists no class")
    return out


def read_mask_png(path: Path) -> np.ndarray:
    """A palette ("P") or grey ("L") PNG as int32 ids; SampleError for anything else, an unreadable file or a
    mask over the pixel limit (:func:`check_mask_pixels`, from the header: before any pixel is decoded)."""
    from repliscope.ops.decode import _open_header as open_header

    data = read_file(path)
    try:
        im = open_header(data, "pillow")
    except SampleError as exc:
        raise SampleError(f"mask {path.name} cannot be read: {exc}") from exc
    with im:
        check_mask_pixels(path.name, im.size)
        if im.mode not in ("P", "L"):
            raise SampleError(f"mask {path.name} is a {im.mode} image: give class ids as a palette or grey PNG")
        try:
            return np.asarray(im, dtype=np.uint8).astype(np.int32)
        except (OSError, SyntaxError, ValueError, EOFError) as exc:
            raise SampleError(f"mask {path.name} cannot be read: {str(exc) or type(exc).__name__}") from exc


@dataclass(frozen=True)
class VocMask:
    """One image's :class:`repliscope.datasets.base.MaskTruth`: the PNG's ids, categories outside ``keep`` as
    background (ids the class map does not list are kept as they are, for the task to name)."""

    path: Path
    categories: dict[int, str]

    def instances(self, keep: frozenset[int] | None) -> list[tuple[int, np.ndarray]] | None:
        """None: class PNGs carry no instances (SegmentationObject/ is not read)."""
        return None

    def fingerprint(self) -> str | None:
        """The mask PNG's sha256 (the dataset identity covers the masks), or why it cannot be read."""
        import hashlib

        try:
            return hashlib.sha256(read_file(self.path)).hexdigest()
        except SampleError as exc:
            return str(exc)

    def read(self, keep: frozenset[int] | None) -> np.ndarray:
        ids = read_mask_png(self.path)
        if keep is not None:
            drop = [c for c in self.categories if c not in keep]
            ids = np.where(np.isin(ids, drop), 0, ids).astype(np.int32)
        return ids


def _class_map(root: Path, class_map: str | None) -> dict[int, str] | None:
    if class_map == "builtin:voc":
        return dict(enumerate(VOC_CLASSES))
    if class_map is not None:
        path = Path(class_map).expanduser()
        if not path.is_file():
            raise DatasetError(f"class_map {class_map}: no such file (or builtin:voc)")
        return parse_class_map(path)
    default = root / CLASS_MAP_FILE
    return parse_class_map(default) if default.is_file() else None


def load_voc_seg(
    path: str | os.PathLike[str], *, class_map: str | None = None, name: str | None = None, limit: int | None = None
) -> Dataset:
    """Load a VOC-style segmentation folder (see the module docstring)."""
    given = Path(path).expanduser()
    split: list[str] | None = None
    if given.is_file():
        root = given.parent.parent.parent if given.parent.name == "Segmentation" else given.parent
        split = [s.strip() for s in given.read_text(encoding="utf-8").splitlines() if s.strip()]
    else:
        root = given
    if not (root / "SegmentationClass").is_dir():
        raise DatasetError(
            f"voc_seg dataset {root}: no SegmentationClass/ folder (a VOC folder has JPEGImages/ and "
            "SegmentationClass/)"
        )
    if limit is not None and limit < 1:
        raise DatasetError(f"limit must be a positive integer, got {limit}")
    masks_dir, images_dir = root / "SegmentationClass", root / "JPEGImages"
    stems = split if split is not None else sorted(p.stem for p in masks_dir.glob("*.png"))
    if not stems:
        raise DatasetError(f"voc_seg dataset {root}: no mask in SegmentationClass/")
    categories = _class_map(root, class_map)
    if categories is None:
        first = masks_dir / f"{stems[0]}.png"
        kind = "palette" if first.is_file() and _mode(first) == "P" else "grey"
        raise DatasetError(
            f"voc_seg dataset {root}: its masks ({kind} PNGs, e.g. {first.name}) need a class map "
            f"saying which id is which class: {HOW_TO_MAP}"
        )
    kept = stems[:limit] if limit is not None else stems
    samples = [
        Sample(
            id=f"{stem}.jpg",
            label=None,
            read=partial(read_file, images_dir / f"{stem}.jpg", root),
            location=str(images_dir / f"{stem}.jpg"),
            mask=VocMask(masks_dir / f"{stem}.png", categories),
        )
        for stem in kept
    ]
    return Dataset(
        name=name or root.name,
        samples=samples,
        license="",
        label_rule="voc segmentation masks",
        description=f"{len(kept)} images, {len(categories)} classes, 255 = void",
        origin=str(root),
        categories=dict(categories),
    )


def _mode(path: Path) -> str:
    """The mask's mode from its header alone (no pixel decoded, whatever its size), "unreadable" when it has none."""
    from repliscope.ops.decode import _open_header as open_header

    try:
        with open_header(read_file(path), "pillow") as im:
            return str(im.mode)
    except SampleError:
        return "unreadable"
