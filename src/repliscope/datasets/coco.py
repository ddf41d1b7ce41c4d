"""``coco``: a COCO-format detection dataset (a folder with ``images/`` and ``annotations/instances_*.json``).

Samples are the JSON's images in image-id order: ``Sample(id=file_name, label=None, objects=..., image_id,
size_hw=(height, width))``. A box ``bbox [x, y, w, h]`` becomes ``(x, y, x + w, y + h)`` (COCO boxes are
continuous pixel-edge coordinates, 0-based); ``area`` is the annotation's (the segmentation's area, which
COCOeval uses for the small/medium/large ranges); ``iscrowd`` is kept. Category ids are COCO's own (1..90
with gaps). A listed image whose file is missing is a failed sample when the run reads it (never a crash);
a malformed JSON is a DatasetError naming the field (``annotations[12].bbox``).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Sequence
from functools import partial
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from repliscope.datasets.base import BoxAnnotation, Dataset, Sample, read_file
from repliscope.errors import DatasetError


class _Loose(BaseModel):
    model_config = ConfigDict(extra="ignore")


class CocoImage(_Loose):
    id: int
    file_name: str
    width: int = Field(gt=0)
    height: int = Field(gt=0)
    license: int | None = None


class CocoAnnotation(_Loose):
    id: int
    image_id: int
    category_id: int
    bbox: list[float] = Field(min_length=4, max_length=4)
    area: float | None = None
    iscrowd: int = Field(default=0, ge=0, le=1)


class CocoCategory(_Loose):
    id: int
    name: str


class CocoLicense(_Loose):
    id: int
    name: str = ""
    url: str = ""


class CocoInstances(_Loose):
    images: list[CocoImage]
    annotations: list[CocoAnnotation]
    categories: list[CocoCategory] = Field(min_length=1)
    licenses: list[CocoLicense] = Field(default_factory=list)


def _field(loc: tuple[int | str, ...]) -> str:
    """``('annotations', 12, 'bbox')`` -> ``annotations[12].bbox``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def parse_instances(path: Path) -> CocoInstances:
    """Read and check an instances JSON; every problem is a DatasetError naming the file and the field."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise DatasetError(f"cannot read COCO annotations {path}: {exc.strerror or exc}") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DatasetError(f"COCO annotations {path} is not valid JSON: {exc}") from exc
    if not isinstance(raw, dict):
        raise DatasetError(
            f"COCO annotations {path}: expected a JSON object with images, annotations, "
            f"categories; got {type(raw).__name__}"
        )
    try:
        data = CocoInstances.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        more = f" (and {exc.error_count() - 1} more problems)" if exc.error_count() > 1 else ""
        raise DatasetError(f"COCO annotations {path}: field {_field(first['loc'])}: {first['msg']}{more}") from exc
    _check_references(path, data)
    return data


def _check_references(path: Path, data: CocoInstances) -> None:
    seen: dict[str, set[int]] = {}
    groups: tuple[tuple[str, Sequence[CocoImage | CocoAnnotation | CocoCategory]], ...] = (
        ("images", data.images),
        ("annotations", data.annotations),
        ("categories", data.categories),
    )
    for what, items in groups:
        ids: set[int] = set()
        for i, item in enumerate(items):
            if item.id in ids:
                raise DatasetError(f"COCO annotations {path}: field {what}[{i}].id: duplicate id {item.id}")
            ids.add(item.id)
        seen[what] = ids
    for i, ann in enumerate(data.annotations):
        if ann.image_id not in seen["images"]:
            raise DatasetError(
                f"COCO annotations {path}: field annotations[{i}].image_id: {ann.image_id} is "
                "not an image id of this file"
            )
        if ann.category_id not in seen["categories"]:
            raise DatasetError(
                f"COCO annotations {path}: field annotations[{i}].category_id: {ann.category_id} "
                "is not a category id of this file"
            )
        if ann.bbox[2] < 0 or ann.bbox[3] < 0:
            raise DatasetError(
                f"COCO annotations {path}: field annotations[{i}].bbox: width and height must be >= 0, got {ann.bbox}"
            )


def find_annotations(root: Path) -> Path:
    """The single ``annotations/instances_*.json`` under ``root`` (DatasetError naming what was found)."""
    found = sorted((root / "annotations").glob("instances_*.json"))
    if len(found) != 1:
        what = ", ".join(p.name for p in found) if found else "none"
        raise DatasetError(
            f"coco dataset {root}: expected exactly one annotations/instances_*.json (found: "
            f"{what}); give annotations=FILE"
        )
    return found[0]


def _image_folder(root: Path, ann_path: Path) -> Path:
    """``root/images``, else ``root/<split>`` for ``instances_<split>.json`` (COCO's own layout)."""
    split = ann_path.stem.removeprefix("instances_")
    for candidate in (root / "images", root / split):
        if candidate.is_dir():
            return candidate
    raise DatasetError(f"coco dataset {root}: no image folder (looked for images/ and {split}/); give images=FOLDER")


def readme_license(root: Path) -> str | None:
    """The text of a ``## License`` section of ``root/README.md`` (one line), or None."""
    readme = root / "README.md"
    if not readme.is_file():
        return None
    lines = readme.read_text(encoding="utf-8", errors="replace").splitlines()
    body: list[str] = []
    inside = False
    for line in lines:
        if line.startswith("#"):
            if inside:
                break
            inside = line.lstrip("#").strip().lower() == "license"
            continue
        if inside and line.strip():
            body.append(line.strip().lstrip("- ").strip())
    return " ".join(body) or None


def _json_license(data: CocoInstances) -> str:
    names = {lic.id: lic.name or f"license {lic.id}" for lic in data.licenses}
    counts = Counter(
        names.get(img.license, f"license id {img.license}") if img.license is not None else "no license field"
        for img in data.images
    )
    return "images: " + "; ".join(f"{n} x {name}" for name, n in counts.most_common())


def load_coco(
    path: str | os.PathLike[str],
    *,
    annotations: str | os.PathLike[str] | None = None,
    images: str | os.PathLike[str] | None = None,
    name: str | None = None,
    limit: int | None = None,
    mask_overlap: str = "annotation_order",
) -> Dataset:
    """Load a COCO detection folder: ``path/annotations/instances_*.json`` and the images in ``path/images/`` or
    in the folder named like the annotations' split (``instances_val2017.json`` -> ``path/val2017/``), or the
    explicit ``annotations`` file and ``images`` folder. ``path`` may also be the instances JSON itself (its
    folder, or the folder above ``annotations/``, is then the root). ``limit`` keeps the first N images in
    image-id order. Every sample also carries its semantic ground-truth mask, rasterised from the instance
    segmentations on demand (``Sample.mask``, :mod:`repliscope.datasets.segmentation_masks`; ``mask_overlap``:
    the rule where two categories' instances overlap, one of ``annotation_order``, ``smaller_on_top``, ``void``)."""
    from repliscope.datasets.segmentation_masks import CocoMask, CocoMaskIndex

    root = Path(path).expanduser()
    if root.is_file() and root.suffix.lower() == ".json" and annotations is None:
        annotations = root
        root = root.parent.parent if root.parent.name == "annotations" else root.parent
    if not root.is_dir():
        raise DatasetError(f"coco dataset folder not found or not a directory: {root}")
    root = root.resolve()
    if limit is not None and limit < 1:
        raise DatasetError(f"limit must be a positive integer, got {limit}")
    ann_path = Path(annotations).expanduser().resolve() if annotations is not None else find_annotations(root)
    image_dir = Path(images).expanduser() if images is not None else _image_folder(root, ann_path)
    if not image_dir.is_dir():
        raise DatasetError(f"coco dataset {root}: image folder {image_dir} not found (give images=FOLDER)")
    data = parse_instances(ann_path)
    per_image: dict[int, list[BoxAnnotation]] = {img.id: [] for img in data.images}
    for ann in sorted(data.annotations, key=lambda a: a.id):
        x, y, w, h = ann.bbox
        per_image[ann.image_id].append(
            BoxAnnotation(
                box=(x, y, x + w, y + h),
                class_id=ann.category_id,
                area=ann.area,
                iscrowd=bool(ann.iscrowd),
                annotation_id=ann.id,
                xywh=(x, y, w, h),
            )
        )
    ordered = sorted(data.images, key=lambda im: im.id)
    masks = CocoMaskIndex(ann_path, mask_overlap)  # type: ignore[arg-type]  # checked by CocoMaskIndex
    names = {c.id: c.name for c in data.categories}
    samples = [
        Sample(
            id=img.file_name,
            label=None,
            read=partial(read_file, image_dir / img.file_name, image_dir),
            location=str(image_dir / img.file_name),
            objects=tuple(per_image[img.id]),
            image_id=img.id,
            size_hw=(img.height, img.width),
            mask=CocoMask(masks, img.id, img.height, img.width, names),
        )
        for img in ordered
    ]
    kept = samples[:limit] if limit is not None else samples
    missing = sum(1 for img in ordered[: len(kept)] if not (image_dir / img.file_name).is_file())
    boxes = sum(len(s.objects or ()) for s in kept)
    crowd = sum(1 for s in kept for o in (s.objects or ()) if o.iscrowd)
    described = [
        f"{len(kept)} images"
        + (f" (first {len(kept)} of {len(samples)} by image id)" if len(kept) < len(samples) else ""),
        f"{boxes} boxes ({crowd} crowd)",
        f"{len(data.categories)} categories",
    ]
    if missing:
        described.append(f"{missing} listed image files missing (failed samples)")
    license_parts = [part for part in (readme_license(root), _json_license(data)) if part]
    return Dataset(
        name=name or root.name,
        samples=kept,
        license=" | ".join(license_parts),
        label_rule="coco instances",
        description="; ".join(described),
        origin=f"{root} (annotations {ann_path})",
        categories={c.id: c.name for c in sorted(data.categories, key=lambda c: c.id)},
    )
