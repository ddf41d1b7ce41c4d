"""Ground-truth semantic masks (:class:`repliscope.datasets.base.MaskTruth`) from COCO instance annotations.

A COCO image's semantic mask is the union of each category's instance masks (polygons and crowd RLEs alike:
crowd regions count as their category), painted onto background 0. Where instances of two different kept
categories overlap, :data:`OVERLAP_RULES` decide:

- ``annotation_order`` (default): annotations are painted in annotation-id order, a later one over an earlier
  one (what cocostuffapi's ``cocoSegmentationToPng`` does);
- ``smaller_on_top``: the larger instances first, so a smaller object stays visible over a larger one (the
  usual instance-to-semantic rule of panoptic conversions);
- ``void``: a pixel claimed by two kept categories is :data:`repliscope.datasets.base.VOID` (not scored).

Only the kept categories take part (``read(keep)``): for a person-vs-background model, the person mask is the
union of every person instance, whatever other objects lie on top.
"""

from __future__ import annotations

import threading
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from repliscope.datasets.base import VOID
from repliscope.errors import DatasetError, SampleError

OverlapRule = Literal["annotation_order", "smaller_on_top", "void"]
OVERLAP_RULES: tuple[str, ...] = ("annotation_order", "smaller_on_top", "void")


def check_mask_pixels(name: str, size: tuple[int, int]) -> None:
    """SampleError when a ground-truth mask of ``size`` (width, height) is over the pixel limit images obey
    (:data:`repliscope.limits.MAX_PIXELS`): a mask is never decoded (or allocated) past it."""
    from repliscope.limits import MAX_PIXELS

    width, height = size
    limit = MAX_PIXELS.value
    if width * height > limit:
        raise SampleError(
            f"mask {name} is {width}x{height} = {width * height:,} pixels, over the {limit:,}-pixel limit "
            f"({MAX_PIXELS.name}, ${MAX_PIXELS.env}); it was not decoded"
        )


@dataclass
class CocoMaskIndex:
    """The instance masks of one COCO annotation file, parsed once (pycocotools) on the first mask read."""

    annotations: Path
    overlap: OverlapRule = "annotation_order"
    _coco: Any = field(default=None, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.overlap not in OVERLAP_RULES:
            raise DatasetError(
                f"mask_overlap '{self.overlap}' is not an overlap rule (allowed: {', '.join(OVERLAP_RULES)})"
            )

    def coco(self) -> Any:
        with self._lock:
            if self._coco is None:
                import contextlib
                import io

                from pycocotools.coco import COCO

                with contextlib.redirect_stdout(io.StringIO()):  # COCO() prints progress lines
                    self._coco = COCO(str(self.annotations))
            return self._coco

    def instances(self, image_id: int, keep: frozenset[int] | None) -> list[tuple[int, np.ndarray]]:
        """(category id, bool mask) of each non-crowd annotation of a kept category, in annotation-id order."""
        coco = self.coco()
        anns = sorted(
            (
                a
                for a in coco.imgToAnns.get(image_id, [])
                if not a.get("iscrowd") and (keep is None or a["category_id"] in keep)
            ),
            key=lambda a: a["id"],
        )
        out = []
        for ann in anns:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                out.append((int(ann["category_id"]), coco.annToMask(ann).astype(bool)))
        return out

    def semantic(self, image_id: int, height: int, width: int, keep: frozenset[int] | None) -> np.ndarray:
        """int32 (height, width): category ids of the kept categories, 0 elsewhere (see the module docstring)."""
        coco = self.coco()
        anns = sorted(
            (a for a in coco.imgToAnns.get(image_id, []) if keep is None or a["category_id"] in keep),
            key=lambda a: a["id"],
        )
        if self.overlap == "smaller_on_top":
            anns = sorted(anns, key=lambda a: (-float(a.get("area") or 0.0), a["id"]))
        out = np.zeros((height, width), np.int32)
        owner = np.zeros((height, width), np.int32) if self.overlap == "void" else None
        for ann in anns:
            try:
                with warnings.catch_warnings():  # pycocotools' numpy-2 copy=False notice
                    warnings.simplefilter("ignore", DeprecationWarning)
                    m = coco.annToMask(ann).astype(bool)
            except Exception as exc:  # a malformed polygon / RLE: this sample fails, naming the annotation
                raise SampleError(
                    f"annotation {ann['id']} of image {image_id}: cannot rasterise its "
                    f"segmentation ({type(exc).__name__}: {exc})"
                ) from exc
            if m.shape != (height, width):
                raise SampleError(
                    f"annotation {ann['id']} rasterises to {m.shape[1]}x{m.shape[0]}, the image is {width}x{height}"
                )
            if owner is not None:
                clash = m & (owner != 0) & (owner != ann["category_id"])
                out[m] = ann["category_id"]
                owner[m] = ann["category_id"]
                owner[clash] = -1
            else:
                out[m] = ann["category_id"]
        if owner is not None:
            out[owner == -1] = VOID
        return out


@dataclass(frozen=True)
class CocoMask:
    """One COCO image's :class:`MaskTruth`."""

    index: CocoMaskIndex
    image_id: int
    height: int
    width: int
    categories: dict[int, str]

    def read(self, keep: frozenset[int] | None) -> np.ndarray:
        self._check_size()
        return self.index.semantic(self.image_id, self.height, self.width, keep)

    def _check_size(self) -> None:
        """SampleError when the annotated image size is over the pixel limit: no mask that large is allocated."""
        check_mask_pixels(f"of image {self.image_id}", (self.width, self.height))

    def fingerprint(self) -> str | None:
        """None: the dataset identity hashes the image's annotations (boxes, classes, crowd flags) already."""
        return None

    def instances(self, keep: frozenset[int] | None) -> list[tuple[int, np.ndarray]] | None:
        """The non-crowd instances of the kept categories, rasterised (crowd regions are not objects)."""
        self._check_size()
        return self.index.instances(self.image_id, keep)
