from pathlib import Path

import pytest

from repliscope.datasets import LABEL_RULES
from repliscope.datasets.labels import (
    check_labels,
    csv_labels,
    detect_label_rule,
    filename_index,
    imagenet_wnid,
    subfolders,
)
from repliscope.errors import DatasetError


def test_registered_rule_names() -> None:
    assert LABEL_RULES.names() == ["csv", "filename_index", "imagenet_wnid", "none", "subfolders"]


def test_imagenet_wnid_uses_global_index_not_folder_rank(tmp_path: Path) -> None:
    ids = ["n01443537_goldfish.JPEG", "n15075141_toilet_tissue.jpg", "n99999999_unknown.jpg", "cat.jpg"]
    assert imagenet_wnid(ids, tmp_path) == [1, 999, None, None]


def test_filename_index(tmp_path: Path) -> None:
    ids = ["imagenet_07_609.jpg", "a/b_12.png", "no_number.jpg", "plain7.jpg"]
    assert filename_index(ids, tmp_path) == [609, 12, None, None]


def test_subfolders_sorted_and_explicit_classes(tmp_path: Path) -> None:
    for d in ("zebra", "ant", "mouse", ".hidden"):
        (tmp_path / d).mkdir()
    ids = ["ant/1.jpg", "mouse/x/2.jpg", "zebra/3.jpg", "root.jpg"]
    assert subfolders(ids, tmp_path) == [0, 1, 2, None]
    assert subfolders(ids, tmp_path, classes=["zebra", "ant"]) == [1, None, 0, None]


def test_csv_labels(tmp_path: Path) -> None:
    (tmp_path / "labels.csv").write_text("filename,label\na.jpg,3\n./sub/b.png,7\n")
    assert csv_labels(["a.jpg", "sub/b.png", "c.jpg"], tmp_path, tmp_path / "labels.csv") == [3, 7, None]
    # a relative path is also looked up inside the folder
    assert csv_labels(["a.jpg"], tmp_path, "labels.csv") == [3]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("name,class\na.jpg,1\n", "header"),
        ("filename,label\na.jpg,x\n", ":2: label must be a non-negative integer"),
        ("filename,label\na.jpg,1\na.jpg,2\n", ":3: 'a.jpg' is listed twice"),
    ],
)
def test_csv_errors(tmp_path: Path, content: str, message: str) -> None:
    (tmp_path / "labels.csv").write_text(content)
    with pytest.raises(DatasetError, match=message):
        csv_labels(["a.jpg"], tmp_path, tmp_path / "labels.csv")


def test_csv_needs_a_file(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="labels_csv"):
        csv_labels(["a.jpg"], tmp_path)
    with pytest.raises(DatasetError, match="not found"):
        csv_labels(["a.jpg"], tmp_path, tmp_path / "missing.csv")


@pytest.mark.parametrize(
    ("ids", "rule"),
    [
        (["cat/1.jpg", "dog/2.jpg"], "subfolders"),
        (["n01440764_tench.JPEG", "n01443537.jpg"], "imagenet_wnid"),
        (["img_0_5.jpg", "img_1_9.png"], "filename_index"),
    ],
)
def test_detect(tmp_path: Path, ids: list[str], rule: str) -> None:
    assert detect_label_rule(ids, tmp_path, LABEL_RULES.names()) == rule


def test_detect_fails_with_rules_listed(tmp_path: Path) -> None:
    with pytest.raises(DatasetError) as err:
        detect_label_rule(["cat.jpg", "img_3.jpg"], tmp_path, LABEL_RULES.names())
    assert "cat.jpg" in str(err.value)
    assert "csv, filename_index, imagenet_wnid, none, subfolders" in str(err.value)


def test_check_labels_lists_at_most_ten_offenders(tmp_path: Path) -> None:
    ids = [f"bad{i:02d}.jpg" for i in range(12)] + ["ok_1.jpg"]
    labels: list[int | None] = [None] * 12 + [1]
    with pytest.raises(DatasetError) as err:
        check_labels("filename_index", ids, labels, tmp_path, allow_unlabelled=False)
    message = str(err.value)
    assert "matched 1 of 13" in message
    assert "bad09.jpg" in message and "bad10.jpg" not in message
    assert "and 2 more" in message
    check_labels("filename_index", ids, labels, tmp_path, allow_unlabelled=True)
    check_labels("none", ids, [None] * 13, tmp_path, allow_unlabelled=False)
