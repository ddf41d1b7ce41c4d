from pathlib import Path

import pytest

from repliscope.datasets import resolve_dataset
from repliscope.datasets.dlib_xml import load_dlib_xml
from repliscope.errors import DatasetError

FACES = Path(__file__).resolve().parents[3] / "shared" / "data" / "faces-dlib"

XML = """<?xml version='1.0' encoding='ISO-8859-1'?>
<dataset><name>t</name><images>
  <image file='a.jpg' width='50' height='40'>
    <box top='3' left='5' width='10' height='12'/>
    <box top='0' left='0' width='2' height='2' ignore='1'/>
  </image>
  <image file='sub/b.jpg'/>
</images></dataset>
"""


def test_boxes_follow_dlibs_inclusive_rectangle(tmp_path: Path) -> None:
    """dlib's rectangle(left=5, top=3, right=14, bottom=14) is written width=10 height=12 by imglab; it covers
    pixel columns 5..14, i.e. the continuous box [5, 3, 15, 15]."""
    (tmp_path / "t.xml").write_text(XML)
    ds = load_dlib_xml(tmp_path / "t.xml")
    assert ds.categories == {1: "face"} and ds.name == f"{tmp_path.name}/t"
    a, b = ds.samples
    assert (a.id, a.image_id, a.size_hw, b.id, b.image_id, b.size_hw) == ("a.jpg", 1, (40, 50), "sub/b.jpg", 2, None)
    face, ignored = a.objects or ()
    assert (face.box, face.class_id, face.area, face.ignore) == ((5.0, 3.0, 15.0, 15.0), 1, 120.0, False)
    assert (ignored.box, ignored.ignore) == ((0.0, 0.0, 2.0, 2.0), True)
    assert ds.description == "2 images; 2 face boxes (1 ignore); 't'"
    assert ds.license == "unknown (not stated next to the XML)"


@pytest.mark.parametrize(
    ("xml", "message"),
    [
        (
            "<dataset><images><image file='a'><box top='x' left='1' width='1' height='1'/></image></images></dataset>",
            "box 0 attribute top='x' is not an integer",
        ),
        (
            "<dataset><images><image file='a'><box left='1' width='1' height='1'/></image></images></dataset>",
            "has no 'top' attribute",
        ),
        ("<dataset><images><image><box/></image></images></dataset>", r"images/image\[0\] has no 'file'"),
        ("<dataset><images></images></dataset>", "lists no <image>"),
        ("<dataset>", "not well-formed XML"),
        (
            "<dataset><images><image file='a'><box top='1' left='1' width='1' height='1'><label>x</label></box>"
            "</image></images></dataset>",
            "multi-class",
        ),
    ],
)
def test_malformed(tmp_path: Path, xml: str, message: str) -> None:
    (tmp_path / "t.xml").write_text(xml)
    with pytest.raises(DatasetError, match=message):
        load_dlib_xml(tmp_path / "t.xml")


@pytest.mark.skipif(not FACES.is_dir(), reason="needs ../shared/data/faces-dlib")
def test_faces_dlib_testing_xml() -> None:
    ds = resolve_dataset(f"dlib_xml:{FACES / 'testing.xml'}")
    assert (ds.name, len(ds)) == ("faces-dlib/testing", 5)
    assert sum(len(s.objects or ()) for s in ds.samples) == 25
    first = ds.samples[0]
    assert (first.id, first.size_hw) == ("2008_002470.jpg", (332, 500))
    assert first.objects is not None and first.objects[0].box == (274.0, 181.0, 326.0, 234.0)
    assert ds.license.startswith("dlib code and example files: Boost Software License 1.0")
    assert all(
        read.data is not None
        for read in map(__import__("repliscope.datasets.base", fromlist=["x"]).read_sample, ds.samples)
    )
