"""``voc_xml``: a PASCAL VOC detection folder (``Annotations/<id>.xml`` + ``JPEGImages/``), optionally restricted
to the ids of a split list ``ImageSets/Main/<split>.txt``.

Box convention: ``<bndbox>`` ``xmin ymin xmax ymax`` are 1-based INCLUSIVE pixel indices (the devkit's
``VOCevaldet.m`` measures a box as ``xmax - xmin + 1`` wide; detectron2's ``pascal_voc.py`` says "1-based pixel
indices (inclusive), a box with annotation (xmin=1, xmax=W) covers the whole image" and subtracts 1 from xmin/ymin
only; py-faster-rcnn subtracts 1 from all four to get 0-based inclusive indices; torchvision's ``VOCDetection``
returns the raw XML strings, unconverted). In repliscope's continuous pixel-edge coordinates (COCO's) the box is
``[xmin - 1, ymin - 1, xmax, ymax]``, its area ``(xmax - xmin + 1) * (ymax - ymin + 1)``. A box must satisfy
``1 <= xmin <= xmax <= width`` and ``1 <= ymin <= ymax <= height`` (``<size>``), else DatasetError.

``<difficult>1</difficult>`` objects are kept with ``ignore=True`` (VOC's evaluation neither rewards nor penalises
them); ``<truncated>``, ``<occluded>``, ``<pose>`` are not used. Categories (``classes``): ``"voc"`` the 20 VOC
classes with ids 1..20 in the devkit's order (aeroplane ... tvmonitor); ``"found"`` the object names found in the
loaded files, sorted, ids 1..K; or a list of names, ids 1..K in its order. When ``classes`` is not given, a
``labels.txt`` in the VOC folder (one name per line) is that list, else ``"voc"``; the dataset's description says
which. An object whose name is not a class is a DatasetError. Samples are in id order (sorted ``Annotations``
stems, or the split list's order); ``image_id`` is the 1-based position; the image is ``JPEGImages/<filename>``
(``<id>.jpg`` without ``<filename>``); a missing image is a failed sample when the run reads it.
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from repliscope.datasets.base import BoxAnnotation, Dataset, Sample, read_file
from repliscope.datasets.coco import readme_license
from repliscope.errors import DatasetError

VOC_CLASSES = (
    "aeroplane",
    "bicycle",
    "bird",
    "boat",
    "bottle",
    "bus",
    "car",
    "cat",
    "chair",
    "cow",
    "diningtable",
    "dog",
    "horse",
    "motorbike",
    "person",
    "pottedplant",
    "sheep",
    "sofa",
    "train",
    "tvmonitor",
)
"""The 20 PASCAL VOC classes in the devkit's order (``VOCinit.m``); ids 1..20."""

LABELS_FILE = "labels.txt"
"""A class list in the VOC folder used when ``classes`` is not given (one name per line, ids 1..K)."""


@dataclass(frozen=True)
class _Object:
    name: str
    box: tuple[float, float, float, float]
    area: float
    difficult: bool


@dataclass(frozen=True)
class _Annotation:
    file: str
    size_hw: tuple[int, int]
    objects: tuple[_Object, ...]


def _number(path: Path, elem: ET.Element, field: str, where: str) -> float:
    """The number in ``elem``'s child ``field``; ``where`` prefixes the field in errors (``object[2].bndbox.``)."""
    text = (elem.findtext(field) or "").strip()
    if not text:
        raise DatasetError(f"VOC XML {path}: missing field {where}{field}")
    try:
        return float(text)
    except ValueError as exc:
        raise DatasetError(f"VOC XML {path}: field {where}{field}='{text}' is not a number") from exc


def _object(path: Path, obj: ET.Element, index: int, size_hw: tuple[int, int]) -> _Object:
    where = f"object[{index}]"
    name = obj.findtext("name")
    if name is None or not name.strip():
        raise DatasetError(f"VOC XML {path}: missing field {where}.name")
    bndbox = obj.find("bndbox")
    if bndbox is None:
        raise DatasetError(f"VOC XML {path}: missing field {where}.bndbox")
    xmin, ymin, xmax, ymax = (_number(path, bndbox, f, f"{where}.bndbox.") for f in ("xmin", "ymin", "xmax", "ymax"))
    height, width = size_hw
    if not (1 <= xmin <= xmax <= width and 1 <= ymin <= ymax <= height):
        raise DatasetError(
            f"VOC XML {path}: field {where}.bndbox ({xmin:g}, {ymin:g}, {xmax:g}, {ymax:g}) is "
            f"not inside the {width}x{height} image (1-based inclusive: 1 <= xmin <= xmax <= "
            "width, 1 <= ymin <= ymax <= height)"
        )
    difficult = (obj.findtext("difficult") or "0").strip()
    if difficult not in ("0", "1"):
        raise DatasetError(f"VOC XML {path}: field {where}.difficult='{difficult}' (allowed: 0, 1)")
    return _Object(
        name=name.strip(),
        box=(xmin - 1, ymin - 1, xmax, ymax),
        area=(xmax - xmin + 1) * (ymax - ymin + 1),
        difficult=difficult == "1",
    )


def parse_annotation(path: Path) -> _Annotation:
    """One VOC annotation file; every problem is a DatasetError naming the file and the field."""
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as exc:
        raise DatasetError(f"VOC XML {path} is not well-formed XML: {exc}") from exc
    except OSError as exc:
        raise DatasetError(f"cannot read VOC XML {path}: {exc.strerror or exc}") from exc
    if root.tag != "annotation":
        raise DatasetError(f"VOC XML {path}: expected <annotation> as the root element, got <{root.tag}>")
    size = root.find("size")
    if size is None:
        raise DatasetError(f"VOC XML {path}: missing field size")
    dims = [_number(path, size, f, "size.") for f in ("width", "height")]
    if any(d <= 0 or d != int(d) for d in dims):
        raise DatasetError(f"VOC XML {path}: field size: width and height must be positive integers, got {dims}")
    size_hw = (int(dims[1]), int(dims[0]))
    file = (root.findtext("filename") or "").strip() or f"{path.stem}.jpg"
    objects = tuple(_object(path, o, i, size_hw) for i, o in enumerate(root.findall("object")))
    return _Annotation(file=file, size_hw=size_hw, objects=objects)


def _split_ids(list_file: Path) -> list[str]:
    """The image ids of a split list (first token of each non-empty line)."""
    if not list_file.is_file():
        raise DatasetError(f"VOC split list not found: {list_file}")
    return [line.split()[0] for line in list_file.read_text(encoding="utf-8").splitlines() if line.strip()]


def _class_list(root: Path, classes: str | Sequence[str] | None, found: list[str]) -> tuple[list[str], str]:
    """(class names, ids 1..K in order; how they were chosen)."""
    if classes is None:
        labels = root / LABELS_FILE
        if labels.is_file():
            names = [line.strip() for line in labels.read_text(encoding="utf-8").splitlines() if line.strip()]
            return names, f"classes from {LABELS_FILE}"
        classes = "voc"
    if classes == "voc":
        return list(VOC_CLASSES), "the 20 VOC classes"
    if classes == "found":
        return sorted(set(found)), "classes found in the files, sorted"
    if isinstance(classes, str):
        raise DatasetError(f"classes='{classes}' (allowed: 'voc', 'found', or a list of class names)")
    return list(classes), "classes given"


def load_voc_xml(
    path: str | os.PathLike[str],
    *,
    split: str | None = None,
    classes: str | Sequence[str] | None = None,
    name: str | None = None,
    limit: int | None = None,
) -> Dataset:
    """Load a VOC folder ``path`` (``Annotations/`` + ``JPEGImages/``): every annotation, or the ids of
    ``ImageSets/Main/<split>.txt``. ``path`` may also be a split list file ``.../ImageSets/Main/<split>.txt``
    (the VOC folder is then three levels up). ``classes``: see the module. ``limit`` keeps the first N images."""
    root = Path(path).expanduser()
    list_file: Path | None = None
    if root.is_file() and split is None:
        if root.parent.name != "Main" or root.parent.parent.name != "ImageSets":
            raise DatasetError(f"VOC path {root} is a file but not a split list ImageSets/Main/<split>.txt")
        list_file, root = root.resolve(), root.resolve().parents[2]
    if not root.is_dir():
        raise DatasetError(f"VOC dataset folder not found or not a directory: {root}")
    root = root.resolve()
    if limit is not None and limit < 1:
        raise DatasetError(f"limit must be a positive integer, got {limit}")
    ann_dir, image_dir = root / "Annotations", root / "JPEGImages"
    if not ann_dir.is_dir():
        raise DatasetError(f"VOC dataset {root}: no Annotations/ folder")
    if split is not None:
        list_file = root / "ImageSets" / "Main" / f"{split}.txt"
    if list_file is not None:
        ids = _split_ids(list_file)
        absent = [i for i in ids if not (ann_dir / f"{i}.xml").is_file()]
        if absent:
            raise DatasetError(
                f"VOC split list {list_file}: no Annotations/<id>.xml for {len(absent)} ids (first: {absent[0]})"
            )
    else:
        ids = sorted(p.stem for p in ann_dir.glob("*.xml"))
    if not ids:
        raise DatasetError(f"VOC dataset {root}: no annotations" + (f" listed in {list_file}" if list_file else ""))
    kept_ids = ids[:limit] if limit is not None else ids
    parsed = {i: parse_annotation(ann_dir / f"{i}.xml") for i in kept_ids}
    names, chosen = _class_list(root, classes, [o.name for a in parsed.values() for o in a.objects])
    if len(set(names)) != len(names) or not names:
        raise DatasetError(f"VOC dataset {root}: the class list ({chosen}) is empty or has duplicates: {names}")
    class_id = {n: i + 1 for i, n in enumerate(names)}
    samples: list[Sample] = []
    for index, image in enumerate(kept_ids):
        ann = parsed[image]
        for j, o in enumerate(ann.objects):
            if o.name not in class_id:
                raise DatasetError(
                    f"VOC XML {ann_dir / f'{image}.xml'}: field object[{j}].name '{o.name}' is not "
                    f"a class ({chosen}: {', '.join(names)}); give classes='found' or a list, "
                    f"or put a {LABELS_FILE} in {root}"
                )
        boxes = tuple(
            BoxAnnotation(box=o.box, class_id=class_id[o.name], area=o.area, ignore=o.difficult) for o in ann.objects
        )
        samples.append(
            Sample(
                id=ann.file,
                label=None,
                read=partial(read_file, image_dir / ann.file, root),
                location=str(image_dir / ann.file),
                objects=boxes,
                image_id=index + 1,
                size_hw=ann.size_hw,
            )
        )
    missing = sum(1 for s in samples if not Path(s.location).is_file())
    n_boxes = sum(len(s.objects or ()) for s in samples)
    n_difficult = sum(1 for s in samples for o in (s.objects or ()) if o.ignore)
    described = [
        f"{len(samples)} images"
        + (f" (first {len(samples)} of {len(ids)})" if len(samples) < len(ids) else "")
        + (f" listed in {list_file.name}" if list_file else ""),
        f"{n_boxes} boxes ({n_difficult} difficult, ignored)",
        f"{len(names)} categories ({chosen})",
    ]
    if missing:
        described.append(f"{missing} listed image files missing (failed samples)")
    return Dataset(
        name=name or (f"{root.name}/{list_file.stem}" if list_file else root.name),
        samples=samples,
        license=readme_license(root) or "unknown (not stated in the VOC folder's README.md)",
        label_rule="pascal voc xml",
        description="; ".join(described),
        origin=str(list_file) if list_file else str(root),
        categories={i + 1: n for i, n in enumerate(names)},
    )
