from pathlib import Path

import pytest

from repliscope.datasets import DATASETS, load_image_folder
from repliscope.errors import DatasetError, UnknownNameError


def make_files(root: Path, names: list[str]) -> Path:
    for name in names:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(f"bytes of {name}".encode())
    return root


def test_registered() -> None:
    assert DATASETS.get("image_folder") is load_image_folder


def test_subfolders_detected_sorted_ids_and_lazy_read(tmp_path: Path) -> None:
    make_files(tmp_path, ["dog/b.JPG", "cat/z.png", "cat/a.jpeg", "dog/notes.txt", "README.md"])
    ds = load_image_folder(tmp_path)
    assert [s.id for s in ds.samples] == ["cat/a.jpeg", "cat/z.png", "dog/b.JPG"]
    assert [s.label for s in ds.samples] == [0, 0, 1]
    assert ds.label_rule == "subfolders (detected)"
    assert ds.samples[2].read() == b"bytes of dog/b.JPG"
    assert "ignored 2 non-image files" in ds.description
    assert ds.name == tmp_path.name


def test_subfolders_with_class_list(tmp_path: Path) -> None:
    make_files(tmp_path, ["dog/1.jpg", "cat/2.jpg"])
    ds = load_image_folder(tmp_path, "subfolders", classes=["dog", "cat"])
    assert [(s.id, s.label) for s in ds.samples] == [("cat/2.jpg", 1), ("dog/1.jpg", 0)]
    assert ds.label_rule == "subfolders"


def test_wnid_names_detected(tmp_path: Path) -> None:
    make_files(tmp_path, ["n01443537_goldfish.JPEG", "n01440764_tench.JPEG"])
    ds = load_image_folder(tmp_path)
    assert ds.label_rule == "imagenet_wnid (detected)"
    expected = [("n01440764_tench.JPEG", 0), ("n01443537_goldfish.JPEG", 1)]
    assert [(s.id, s.label) for s in ds.samples] == expected


def test_index_names_detected(tmp_path: Path) -> None:
    make_files(tmp_path, ["img_01_5.jpg", "img_00_17.webp"])
    ds = load_image_folder(tmp_path)
    assert ds.label_rule == "filename_index (detected)"
    assert [s.label for s in ds.samples] == [17, 5]


def test_csv_rule(tmp_path: Path) -> None:
    make_files(tmp_path / "imgs", ["a.jpg", "b.jpg"])
    (tmp_path / "labels.csv").write_text("filename,label\nb.jpg,4\na.jpg,2\n")
    ds = load_image_folder(tmp_path / "imgs", "csv", labels_csv=tmp_path / "labels.csv")
    assert [s.label for s in ds.samples] == [2, 4]
    assert ds.label_rule == "csv"
    detected = load_image_folder(tmp_path / "imgs", labels_csv=tmp_path / "labels.csv")
    assert detected.label_rule == "csv (detected)"


def test_none_rule_is_unlabelled(tmp_path: Path) -> None:
    make_files(tmp_path, ["x.jpg", "y.jpg"])
    ds = load_image_folder(tmp_path, "none")
    assert [s.label for s in ds.samples] == [None, None]
    assert ds.describe()["num_labelled"] == 0


def test_rule_matching_nothing_names_folder_rule_and_examples(tmp_path: Path) -> None:
    make_files(tmp_path, ["cat.jpg", "dog.jpg", "emu.jpg", "fox.jpg"])
    with pytest.raises(DatasetError) as err:
        load_image_folder(tmp_path, "imagenet_wnid")
    message = str(err.value)
    assert "'imagenet_wnid'" in message and str(tmp_path) in message
    assert "cat.jpg, dog.jpg, emu.jpg" in message and "fox.jpg" not in message


def test_partial_match_lists_offenders_unless_allowed(tmp_path: Path) -> None:
    make_files(tmp_path, ["a_1.jpg", "b_2.jpg", "oops.jpg"])
    with pytest.raises(DatasetError, match=r"matched 2 of 3 .*unmatched: oops\.jpg"):
        load_image_folder(tmp_path, "filename_index")
    ds = load_image_folder(tmp_path, "filename_index", allow_unlabelled=True)
    assert [s.label for s in ds.samples] == [1, 2, None]
    assert "1 kept unlabelled" in ds.description


def test_undetectable_asks_for_a_rule(tmp_path: Path) -> None:
    make_files(tmp_path, ["cat.jpg", "n01440764_tench.jpg"])
    with pytest.raises(DatasetError, match="explicit label rule"):
        load_image_folder(tmp_path)


def test_empty_folder_and_no_images(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="no image files"):
        load_image_folder(tmp_path)
    make_files(tmp_path, ["notes.txt"])
    with pytest.raises(DatasetError, match=r"notes\.txt"):
        load_image_folder(tmp_path)
    with pytest.raises(DatasetError, match="not a directory"):
        load_image_folder(tmp_path / "missing")


def test_unknown_rule_and_misplaced_options(tmp_path: Path) -> None:
    make_files(tmp_path, ["a_1.jpg"])
    with pytest.raises(UnknownNameError, match="filename_index"):
        load_image_folder(tmp_path, "filename_idx")
    with pytest.raises(DatasetError, match="labels_csv is only used"):
        load_image_folder(tmp_path, "filename_index", labels_csv="x.csv")
    with pytest.raises(DatasetError, match="classes is only used"):
        load_image_folder(tmp_path, classes=["a"])


def test_limit_and_extensions(tmp_path: Path) -> None:
    make_files(tmp_path, [f"img_{i}.png" for i in range(5)] + ["img_9.tif"])
    ds = load_image_folder(tmp_path, limit=2)
    assert [s.id for s in ds.samples] == ["img_0.png", "img_1.png"]
    assert "first 2 of 5" in ds.description
    tif = load_image_folder(tmp_path, extensions=("TIF",))
    assert [s.id for s in tif.samples] == ["img_9.tif"]


def test_identity_tracks_bytes_labels_and_ids(tmp_path: Path) -> None:
    make_files(tmp_path, ["a_1.jpg", "b_2.jpg"])
    first = load_image_folder(tmp_path).identity
    assert load_image_folder(tmp_path).identity == first
    (tmp_path / "b_2.jpg").write_bytes(b"changed")
    assert load_image_folder(tmp_path).identity != first
    described = load_image_folder(tmp_path, license="CC-BY-4.0", name="tiny").describe()
    assert described["name"] == "tiny" and described["license"] == "CC-BY-4.0"
    assert described["num_samples"] == 2 and described["origin"] == str(tmp_path.resolve())
