from pathlib import Path

import pytest

from repliscope.datasets import resolve_dataset
from repliscope.errors import DatasetError


def test_registered_name() -> None:
    ds = resolve_dataset("foolbox_imagenet", labels_csv=None, limit=2)
    assert ds.name == "foolbox_imagenet" and len(ds) == 2


def test_directory(tmp_path: Path) -> None:
    (tmp_path / "a_3.jpg").write_bytes(b"x")
    ds = resolve_dataset(str(tmp_path), None, labels_csv=None, limit=None)
    assert ds.label_rule == "filename_index (detected)"
    assert resolve_dataset(str(tmp_path), "none").label_rule == "none"


def test_unknown_spec_lists_registered_names(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="foolbox_imagenet, image_folder"):
        resolve_dataset(str(tmp_path / "nope"))
    (tmp_path / "file.jpg").write_bytes(b"x")
    with pytest.raises(DatasetError, match="is a file"):
        resolve_dataset(str(tmp_path / "file.jpg"))


def test_option_the_loader_does_not_take() -> None:
    with pytest.raises(DatasetError, match="does not take labels_csv"):
        resolve_dataset("foolbox_imagenet", labels_csv="labels.csv")
