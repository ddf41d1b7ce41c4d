import json
from pathlib import Path

import pytest

from repliscope.datasets import resolve_dataset
from repliscope.datasets.base import read_sample
from repliscope.datasets.coco import load_coco
from repliscope.errors import DatasetError

COCO_MINI = Path(__file__).resolve().parents[3] / "shared" / "data" / "coco-val-mini"


def _write(root: Path, data: dict, images: tuple[str, ...] = ("b.jpg",)) -> Path:
    (root / "annotations").mkdir(parents=True)
    (root / "images").mkdir()
    for name in images:
        (root / "images" / name).write_bytes(b"jpeg bytes")
    (root / "annotations" / "instances_tiny.json").write_text(json.dumps(data))
    return root


def _tiny() -> dict:
    return {
        "licenses": [{"id": 4, "name": "CC BY 2.0"}],
        "images": [
            {"id": 7, "file_name": "b.jpg", "width": 40, "height": 30, "license": 4},
            {"id": 3, "file_name": "a.jpg", "width": 20, "height": 10},
        ],
        "annotations": [
            {"id": 2, "image_id": 7, "category_id": 90, "bbox": [1, 2, 10, 5], "area": 33.5, "iscrowd": 1},
            {"id": 1, "image_id": 7, "category_id": 1, "bbox": [0.5, 0, 4, 4], "area": 16},
        ],
        "categories": [{"id": 90, "name": "toothbrush"}, {"id": 1, "name": "person"}],
    }


def test_tiny_folder(tmp_path: Path) -> None:
    ds = load_coco(_write(tmp_path, _tiny()))
    assert [s.id for s in ds.samples] == ["a.jpg", "b.jpg"]  # image-id order (3, 7)
    assert [s.image_id for s in ds.samples] == [3, 7]
    assert ds.samples[1].size_hw == (30, 40)
    assert ds.categories == {1: "person", 90: "toothbrush"}
    a, b = ds.samples[1].objects or ()
    assert (a.box, a.class_id, a.area, a.iscrowd, a.annotation_id) == ((0.5, 0, 4.5, 4), 1, 16, False, 1)
    assert (b.box, b.class_id, b.area, b.iscrowd) == ((1, 2, 11, 7), 90, 33.5, True)
    assert ds.samples[0].objects == ()
    assert ds.description == (
        "2 images; 2 boxes (1 crowd); 2 categories; 1 listed image files missing (failed samples)"
    )
    assert ds.license == "images: 1 x CC BY 2.0; 1 x no license field"
    missing = read_sample(ds.samples[0])
    assert missing.data is None and missing.fingerprint.startswith("unreadable: file not found")
    assert read_sample(ds.samples[1]).data == b"jpeg bytes"


def test_resolve_name_path_syntax(tmp_path: Path) -> None:
    ds = resolve_dataset(f"coco:{_write(tmp_path, _tiny())}", limit=1)
    assert [s.id for s in ds.samples] == ["a.jpg"]
    with pytest.raises(DatasetError, match=r"'cocoo' is not a registered dataset \(registered: coco, dlib_xml, "):
        resolve_dataset(f"cocoo:{tmp_path}")


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d["annotations"][0].update(bbox=[1, 2, 3]), r"field annotations\[0\]\.bbox: List should have"),
        (lambda d: d["images"][1].pop("width"), r"field images\[1\]\.width: Field required"),
        (lambda d: d["annotations"][1].update(image_id=99), r"annotations\[1\]\.image_id: 99 is not an image id"),
        (lambda d: d["annotations"][1].update(category_id=5), r"annotations\[1\]\.category_id: 5 is not a category"),
        (lambda d: d.pop("categories"), r"field categories: Field required"),
        (lambda d: d["annotations"][0].update(bbox=[1, 2, -3, 4]), r"annotations\[0\]\.bbox: width and height"),
        (lambda d: d["images"].append(dict(d["images"][0])), r"images\[2\]\.id: duplicate id 7"),
    ],
)
def test_malformed_json_names_the_field(tmp_path: Path, edit, message: str) -> None:
    data = _tiny()
    edit(data)
    with pytest.raises(DatasetError, match=message):
        load_coco(_write(tmp_path, data))


def test_not_json_and_no_annotations(tmp_path: Path) -> None:
    (tmp_path / "images").mkdir()
    with pytest.raises(DatasetError, match=r"expected exactly one annotations/instances_\*\.json \(found: none\)"):
        load_coco(tmp_path)
    (tmp_path / "annotations").mkdir()
    (tmp_path / "annotations" / "instances_x.json").write_text("{nope")
    with pytest.raises(DatasetError, match="is not valid JSON"):
        load_coco(tmp_path)


@pytest.mark.skipif(not COCO_MINI.is_dir(), reason="needs ../shared/data/coco-val-mini")
def test_coco_val_mini() -> None:
    ds = resolve_dataset(f"coco:{COCO_MINI}")
    assert len(ds) == 158 and len(ds.categories or {}) == 80
    assert sum(len(s.objects or ()) for s in ds.samples) == 1424
    assert sum(1 for s in ds.samples for o in (s.objects or ()) if o.iscrowd) == 16
    assert sum(1 for s in ds.samples for o in (s.objects or ()) if o.class_id == 1) == 331
    first = ds.samples[0]
    assert (first.id, first.image_id, first.size_hw) == ("000000000139.jpg", 139, (426, 640))
    assert first.objects is not None and first.objects[0].box == (236.98, 142.51, 261.68, 212.01)
    assert ds.license.startswith("Annotations: COCO Consortium, Creative Commons Attribution 4.0 (CC BY 4.0).")
    assert max(ds.categories or {}) == 90


def test_cocos_own_layout_and_the_json_as_path(tmp_path: Path) -> None:
    (tmp_path / "annotations").mkdir()
    (tmp_path / "val2017").mkdir()
    (tmp_path / "val2017" / "b.jpg").write_bytes(b"x")
    ann = tmp_path / "annotations" / "instances_val2017.json"
    ann.write_text(json.dumps(_tiny()))
    ds = resolve_dataset(f"coco:{tmp_path}")
    assert ds.samples[1].location == str(tmp_path / "val2017" / "b.jpg")
    same = resolve_dataset(f"coco:{ann}")
    assert same.identity == ds.identity and same.origin == ds.origin
    (tmp_path / "val2017").rename(tmp_path / "pictures")
    with pytest.raises(DatasetError, match=r"no image folder \(looked for images/ and val2017/\)"):
        load_coco(tmp_path)
