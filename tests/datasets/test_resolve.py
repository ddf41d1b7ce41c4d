from pathlib import Path

import pytest

from repliscope.datasets import DATASETS, Dataset, resolve_dataset
from repliscope.datasets.resolve import bare_names
from repliscope.errors import DatasetError


def test_registered_name() -> None:
    ds = resolve_dataset("foolbox_imagenet", labels_csv=None, limit=2)
    assert ds.name == "foolbox_imagenet" and len(ds) == 2


def test_directory(tmp_path: Path) -> None:
    (tmp_path / "a_3.jpg").write_bytes(b"x")
    ds = resolve_dataset(str(tmp_path), None, labels_csv=None, limit=None)
    assert ds.label_rule == "filename_index (detected)"
    assert resolve_dataset(str(tmp_path), "none").label_rule == "none"


def test_unknown_spec_lists_only_names_usable_alone(tmp_path: Path) -> None:
    with pytest.raises(DatasetError) as info:
        resolve_dataset(str(tmp_path / "nope"))
    assert str(info.value) == (
        f"dataset '{tmp_path / 'nope'}' is neither a registered dataset nor a directory. "
        "Give a folder of images, one of: foolbox_imagenet, synthetic_detection, or "
        "NAME:PATH with NAME one of: coco, dlib_xml, image_folder, voc_seg, voc_xml"
    )
    (tmp_path / "file.jpg").write_bytes(b"x")
    with pytest.raises(DatasetError, match="is a file"):
        resolve_dataset(str(tmp_path / "file.jpg"))


def test_option_the_loader_does_not_take() -> None:
    with pytest.raises(DatasetError, match="does not take labels_csv"):
        resolve_dataset("foolbox_imagenet", labels_csv="labels.csv")


def test_image_folder_by_name_needs_a_folder() -> None:
    with pytest.raises(DatasetError) as info:
        resolve_dataset("image_folder", None, labels_csv=None, limit=3)
    assert str(info.value) == (
        "dataset 'image_folder' needs a folder: give --dataset PATH (a folder of images; "
        "'image_folder' is what a folder is loaded with). Datasets usable by name: "
        "foolbox_imagenet, synthetic_detection"
    )


def test_registered_loader_with_a_required_option_is_a_dataset_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def needs_split(split: str, token: str, limit: int | None = None) -> Dataset:
        raise AssertionError("must not be called")

    monkeypatch.setitem(DATASETS._items, "hub_data", needs_split)
    with pytest.raises(DatasetError) as info:
        resolve_dataset("hub_data", limit=2)
    assert str(info.value) == (
        "dataset 'hub_data' needs split, token, which --dataset NAME alone cannot give. "
        "Datasets usable by name: foolbox_imagenet, synthetic_detection"
    )
    assert bare_names() == ["foolbox_imagenet", "synthetic_detection"]
    with pytest.raises(
        DatasetError,
        match=r"^dataset 'hub_data' does not take labels_csv \(allowed: split, token, "
        r"limit\)$",
    ):
        resolve_dataset("hub_data", labels_csv="x.csv")


def test_folder_with_an_option_image_folder_does_not_take(tmp_path: Path) -> None:
    (tmp_path / "a_3.jpg").write_bytes(b"x")
    with pytest.raises(DatasetError, match=r"^dataset 'image_folder' does not take colour \(allowed: label_rule, "):
        resolve_dataset(str(tmp_path), colour="red")
