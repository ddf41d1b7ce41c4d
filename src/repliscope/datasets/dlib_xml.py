"""``dlib_xml``: a dlib imglab XML file of face boxes (``<image file= width= height=><box top left width height
[ignore='1']/>``), image files relative to the XML's folder.

Box convention (dlib ``rectangle`` is inclusive: ``right = left + width - 1``, and imglab writes
``width = right - left + 1``): the box covers the pixels ``left .. left + width - 1``, i.e. in continuous
pixel-edge coordinates ``[left, top, left + width, top + height]`` — the same ``[x, y, x + w, y + h]`` as a
COCO ``[x, y, w, h]`` box. One category ``face`` (id 1). ``ignore='1'`` boxes are kept with ``ignore=True``
(not scored). Samples are in the XML's order; ``image_id`` is the 1-based position.
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from functools import partial
from pathlib import Path

from repliscope.datasets.base import BoxAnnotation, Dataset, Sample, read_file
from repliscope.datasets.coco import readme_license
from repliscope.errors import DatasetError

FACE = 1
"""The category id of dlib's single class."""


def _int(path: Path, where: str, elem: ET.Element, attr: str, required: bool = True) -> int | None:
    text = elem.get(attr)
    if text is None:
        if required:
            raise DatasetError(f"dlib XML {path}: {where} has no '{attr}' attribute")
        return None
    try:
        return int(text)
    except ValueError as exc:
        raise DatasetError(f"dlib XML {path}: {where} attribute {attr}='{text}' is not an integer") from exc


def _box(path: Path, where: str, elem: ET.Element) -> BoxAnnotation:
    top, left, width, height = (_int(path, where, elem, a) or 0 for a in ("top", "left", "width", "height"))
    if elem.find("label") is not None:
        raise DatasetError(
            f"dlib XML {path}: {where} has a <label>: labelled (multi-class) dlib XML is not "
            "supported, every box is a 'face'"
        )
    if width < 0 or height < 0:
        raise DatasetError(f"dlib XML {path}: {where} has a negative width or height")
    ignore = elem.get("ignore", "0")
    if ignore not in ("0", "1"):
        raise DatasetError(f"dlib XML {path}: {where} ignore='{ignore}' (allowed: 0, 1)")
    return BoxAnnotation(
        box=(float(left), float(top), float(left + width), float(top + height)),
        class_id=FACE,
        area=float(width * height),
        ignore=ignore == "1",
    )


def load_dlib_xml(path: str | os.PathLike[str], *, name: str | None = None, limit: int | None = None) -> Dataset:
    """Load a dlib imglab XML file (``path``); ``limit`` keeps the first N images in the file's order."""
    xml_path = Path(path).expanduser()
    if not xml_path.is_file():
        raise DatasetError(f"dlib XML file not found: {xml_path}")
    if limit is not None and limit < 1:
        raise DatasetError(f"limit must be a positive integer, got {limit}")
    xml_path = xml_path.resolve()
    try:
        root = ET.parse(xml_path).getroot()
    except ET.ParseError as exc:
        raise DatasetError(f"dlib XML {xml_path} is not well-formed XML: {exc}") from exc
    images = root.find("images")
    if root.tag != "dataset" or images is None:
        raise DatasetError(f"dlib XML {xml_path}: expected <dataset><images>...</images></dataset>")
    folder = xml_path.parent
    samples: list[Sample] = []
    for index, img in enumerate(images.findall("image")):
        file = img.get("file")
        if not file:
            raise DatasetError(f"dlib XML {xml_path}: images/image[{index}] has no 'file' attribute")
        where = f"image '{file}'"
        width = _int(xml_path, where, img, "width", required=False)
        height = _int(xml_path, where, img, "height", required=False)
        boxes = tuple(_box(xml_path, f"{where} box {j}", b) for j, b in enumerate(img.findall("box")))
        samples.append(
            Sample(
                id=file,
                label=None,
                read=partial(read_file, folder / file),
                location=str(folder / file),
                objects=boxes,
                image_id=index + 1,
                size_hw=(height, width) if width is not None and height is not None else None,
            )
        )
    if not samples:
        raise DatasetError(f"dlib XML {xml_path} lists no <image>")
    kept = samples[:limit] if limit is not None else samples
    n_boxes = sum(len(s.objects or ()) for s in kept)
    n_ignored = sum(1 for s in kept for o in (s.objects or ()) if o.ignore)
    title = (root.findtext("name") or "").strip()
    description = (
        f"{len(kept)} images"
        + (f" (first {len(kept)} of {len(samples)})" if len(kept) < len(samples) else "")
        + f"; {n_boxes} face boxes ({n_ignored} ignore)"
        + (f"; '{title}'" if title else "")
    )
    return Dataset(
        name=name or f"{folder.name}/{xml_path.stem}",
        samples=kept,
        license=readme_license(folder) or "unknown (not stated next to the XML)",
        label_rule="dlib imglab xml",
        description=description,
        origin=str(xml_path),
        categories={FACE: "face"},
    )
