from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from repliscope.datasets import resolve_dataset
from repliscope.datasets.base import read_sample
from repliscope.datasets.synthetic_detection import load_synthetic_detection
from repliscope.datasets.voc_xml import VOC_CLASSES, load_voc_xml
from repliscope.errors import DatasetError

MANIFEST = Path(__file__).parents[1] / "fixtures" / "detection" / "rect-detector.yaml"


def voc_xml(
    filename: str | None, width: int, height: int, objects: list[tuple[str, tuple[float, float, float, float], int]]
) -> str:
    """A VOC annotation; ``objects``: (name, (xmin, ymin, xmax, ymax) 1-based inclusive, difficult)."""
    parts = ["<annotation><folder>VOC</folder>"]
    if filename is not None:
        parts.append(f"<filename>{filename}</filename>")
    parts.append(f"<size><width>{width}</width><height>{height}</height><depth>3</depth></size>")
    for name, (x1, y1, x2, y2), difficult in objects:
        parts.append(
            f"<object><name>{name}</name><pose>Left</pose><truncated>1</truncated>"
            f"<difficult>{difficult}</difficult><bndbox><xmin>{x1:g}</xmin><ymin>{y1:g}</ymin>"
            f"<xmax>{x2:g}</xmax><ymax>{y2:g}</ymax></bndbox></object>"
        )
    return "".join(parts) + "</annotation>"


def make_voc(root: Path) -> Path:
    """Three images: a (PNG 40x30, a dog and a difficult person), b (JPEG 20x10, no <filename>, a cat), c (a
    listed image whose file is missing); split list val.txt = c, a."""
    (root / "Annotations").mkdir(parents=True)
    (root / "JPEGImages").mkdir()
    (root / "ImageSets" / "Main").mkdir(parents=True)
    Image.new("RGB", (40, 30), (1, 2, 3)).save(root / "JPEGImages" / "a.png")
    Image.new("RGB", (20, 10), (9, 9, 9)).save(root / "JPEGImages" / "b.jpg", quality=90)
    (root / "Annotations" / "a.xml").write_text(
        voc_xml("a.png", 40, 30, [("dog", (1, 1, 40, 30), 0), ("person", (5, 6, 14, 10), 1)])
    )
    (root / "Annotations" / "b.xml").write_text(voc_xml(None, 20, 10, [("cat", (3, 2, 3, 2), 0)]))
    (root / "Annotations" / "c.xml").write_text(voc_xml("c.jpg", 8, 8, []))
    (root / "ImageSets" / "Main" / "val.txt").write_text("c\na\n")
    return root


def test_boxes_are_1_based_inclusive_and_difficult_is_ignore(tmp_path: Path) -> None:
    """xmin=1..xmax=40 on a 40 px wide image covers the whole width: [0, 40]; xmin=xmax=3 is one pixel: [2, 3]."""
    ds = load_voc_xml(make_voc(tmp_path / "VOC"))
    assert ds.categories == {i + 1: n for i, n in enumerate(VOC_CLASSES)} and ds.categories[12] == "dog"
    assert [(s.id, s.image_id, s.size_hw) for s in ds.samples] == [
        ("a.png", 1, (30, 40)),
        ("b.jpg", 2, (10, 20)),
        ("c.jpg", 3, (8, 8)),
    ]
    a, b, c = ds.samples
    assert [(o.box, o.class_id, o.area, o.ignore, o.iscrowd) for o in a.objects or ()] == [
        ((0.0, 0.0, 40.0, 30.0), 12, 1200.0, False, False),
        ((4.0, 5.0, 14.0, 10.0), 15, 50.0, True, False),
    ]
    assert [(o.box, o.class_id, o.area) for o in b.objects or ()] == [((2.0, 1.0, 3.0, 2.0), 8, 1.0)]
    assert c.objects == ()
    assert (ds.name, ds.label_rule, ds.origin) == ("VOC", "pascal voc xml", str(tmp_path / "VOC"))
    assert ds.description == (
        "3 images; 3 boxes (1 difficult, ignored); 20 categories (the 20 VOC classes); "
        "1 listed image files missing (failed samples)"
    )
    assert read_sample(a).data == (tmp_path / "VOC" / "JPEGImages" / "a.png").read_bytes()
    assert read_sample(c).error == "unreadable: file not found (removed after the folder was listed?)"


def test_split_restricts_and_orders_and_the_list_file_is_a_path(tmp_path: Path) -> None:
    root = make_voc(tmp_path / "VOC")
    ds = load_voc_xml(root, split="val")
    assert [s.id for s in ds.samples] == ["c.jpg", "a.png"] and ds.name == "VOC/val"
    by_file = resolve_dataset(f"voc_xml:{root / 'ImageSets' / 'Main' / 'val.txt'}")
    assert [(s.id, s.image_id) for s in by_file.samples] == [("c.jpg", 1), ("a.png", 2)]
    assert by_file.description.startswith("2 images listed in val.txt; 2 boxes (1 difficult, ignored)")
    assert [s.id for s in load_voc_xml(root, limit=2).samples] == ["a.png", "b.jpg"]
    with pytest.raises(DatasetError, match=r"split list not found: .*ImageSets/Main/test\.txt"):
        load_voc_xml(root, split="test")
    (root / "ImageSets" / "Main" / "bad.txt").write_text("a\nzz\n")
    with pytest.raises(DatasetError, match=r"bad\.txt: no Annotations/<id>\.xml for 1 ids \(first: zz\)"):
        load_voc_xml(root, split="bad")


def test_classes_found_given_and_labels_file(tmp_path: Path) -> None:
    root = make_voc(tmp_path / "VOC")
    found = load_voc_xml(root, classes="found")
    assert found.categories == {1: "cat", 2: "dog", 3: "person"}
    assert [o.class_id for s in found.samples for o in s.objects or ()] == [2, 3, 1]
    assert found.description.endswith(
        "3 categories (classes found in the files, sorted); 1 listed image files missing (failed samples)"
    )
    given = load_voc_xml(root, classes=["person", "dog", "cat", "horse"])
    assert given.categories == {1: "person", 2: "dog", 3: "cat", 4: "horse"}
    (root / "labels.txt").write_text("person\ncat\ndog\n")
    assert load_voc_xml(root).categories == {1: "person", 2: "cat", 3: "dog"}
    assert "(classes from labels.txt)" in load_voc_xml(root).description
    assert load_voc_xml(root, classes="voc").categories == {i + 1: n for i, n in enumerate(VOC_CLASSES)}
    with pytest.raises(DatasetError, match=r"classes='all' \(allowed: 'voc', 'found', or a list"):
        load_voc_xml(root, classes="all")


@pytest.mark.parametrize(
    ("objects", "message"),
    [
        ([("dgo", (1, 1, 2, 2), 0)], r"a\.xml: field object\[0\]\.name 'dgo' is not a class \(the 20 VOC classes"),
        ([("dog", (0, 1, 2, 2), 0)], r"a\.xml: field object\[0\]\.bndbox \(0, 1, 2, 2\) is not inside the 40x30 image"),
        ([("dog", (1, 1, 41, 2), 0)], r"field object\[0\]\.bndbox \(1, 1, 41, 2\) is not inside"),
        ([("dog", (5, 1, 4, 2), 0)], r"field object\[0\]\.bndbox \(5, 1, 4, 2\) is not inside"),
        ([("dog", (1, 1, 2, 2), 2)], r"a\.xml: field object\[0\]\.difficult='2' \(allowed: 0, 1\)"),
    ],
)
def test_bad_objects_name_the_file_and_the_field(tmp_path: Path, objects: list, message: str) -> None:
    (tmp_path / "Annotations").mkdir()
    (tmp_path / "Annotations" / "a.xml").write_text(voc_xml("a.jpg", 40, 30, objects))
    with pytest.raises(DatasetError, match=message):
        load_voc_xml(tmp_path)


@pytest.mark.parametrize(
    ("xml", "message"),
    [
        (
            "<annotation><size><width>4</width><height>4</height></size><object><name>dog</name><bndbox><xmin>1</xmin>"
            "<ymin>1</ymin><xmax>2</xmax></bndbox></object></annotation>",
            r"a\.xml: missing field object\[0\]\.bndbox\.ymax",
        ),
        (
            "<annotation><size><width>4</width><height>4</height></size><object><name>dog</name></object></annotation>",
            r"missing field object\[0\]\.bndbox$",
        ),
        (
            "<annotation><size><width>4</width><height>4</height></size><object><name>dog</name><bndbox><xmin>a</xmin>"
            "<ymin>1</ymin><xmax>2</xmax><ymax>2</ymax></bndbox></object></annotation>",
            r"field object\[0\]\.bndbox\.xmin='a' is not a number",
        ),
        ("<annotation><size><width>4</width></size></annotation>", r"a\.xml: missing field size\.height"),
        ("<annotation></annotation>", r"a\.xml: missing field size$"),
        ("<annotation><size><width>0</width><height>4</height></size></annotation>", "must be positive integers"),
        ("<dataset/>", "expected <annotation> as the root element"),
        ("<annotation>", "not well-formed XML"),
    ],
)
def test_malformed_files(tmp_path: Path, xml: str, message: str) -> None:
    (tmp_path / "Annotations").mkdir()
    (tmp_path / "Annotations" / "a.xml").write_text(xml)
    with pytest.raises(DatasetError, match=message):
        load_voc_xml(tmp_path)


def test_folder_errors(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="no Annotations/ folder"):
        load_voc_xml(tmp_path)
    (tmp_path / "Annotations").mkdir()
    with pytest.raises(DatasetError, match=r"no annotations$"):
        load_voc_xml(tmp_path)
    (tmp_path / "x.txt").write_text("a\n")
    with pytest.raises(DatasetError, match=r"is a file but not a split list ImageSets/Main/<split>\.txt"):
        resolve_dataset(f"voc_xml:{tmp_path / 'x.txt'}")


def test_identity_changes_when_a_box_changes(tmp_path: Path) -> None:
    root = make_voc(tmp_path / "VOC")
    before = load_voc_xml(root).identity
    assert load_voc_xml(root).identity == before
    (root / "Annotations" / "b.xml").write_text(voc_xml(None, 20, 10, [("cat", (3, 2, 4, 2), 0)]))
    assert load_voc_xml(root).identity != before


def write_synthetic_voc(root: Path) -> None:
    """synthetic_detection (seed 0) as a VOC folder: its PNG bytes, its boxes written 1-based inclusive."""
    data = load_synthetic_detection(seed=0)
    for sub in ("Annotations", "JPEGImages"):
        (root / sub).mkdir(parents=True)
    assert data.categories is not None
    (root / "labels.txt").write_text("\n".join(data.categories.values()) + "\n")
    for s in data.samples:
        (root / "JPEGImages" / s.id).write_bytes(s.read())
        assert s.size_hw is not None
        objects = [
            (data.categories[o.class_id], (o.box[0] + 1, o.box[1] + 1, o.box[2], o.box[3]), 0) for o in s.objects or ()
        ]
        (root / "Annotations" / f"{Path(s.id).stem}.xml").write_text(voc_xml(s.id, s.size_hw[1], s.size_hw[0], objects))


def test_synthetic_boxes_round_trip_through_voc(tmp_path: Path) -> None:
    write_synthetic_voc(tmp_path / "VOC")
    voc, synthetic = load_voc_xml(tmp_path / "VOC"), load_synthetic_detection(seed=0)
    assert voc.categories == synthetic.categories == {1: "red", 2: "green", 3: "blue"}
    assert [(s.id, s.image_id, s.size_hw, s.objects) for s in voc.samples] == [
        (s.id, s.image_id, s.size_hw, s.objects) for s in synthetic.samples
    ]


def test_evaluate_rect_detector_on_a_voc_folder_gives_ap_1(tmp_path: Path) -> None:
    """The exact detector scores AP 1.0 only if the VOC boxes land on the rectangles' pixel edges."""
    from typer.testing import CliRunner

    from repliscope.cli.main import app

    write_synthetic_voc(tmp_path / "VOC")
    runner = CliRunner(env={"COLUMNS": "200", "REPLISCOPE_CACHE": str(tmp_path / "cache")})
    got = runner.invoke(
        app,
        [
            "evaluate",
            str(MANIFEST),
            "--dataset",
            f"voc_xml:{tmp_path / 'VOC'}",
            "--db",
            f"sqlite:///{tmp_path / 'runs.db'}",
        ],
    )
    assert got.exit_code == 0, got.output
    assert "│ AP     │ 1.0000 │ [1.0000, 1.0000] │ 16 images │" in got.output
    assert "16 evaluated, 0 failed, 33 ground-truth boxes in 3 categories" in got.output
