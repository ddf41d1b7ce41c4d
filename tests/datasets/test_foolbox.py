import dataclasses
import hashlib

import pytest

from repliscope.datasets import DATASETS, Dataset, foolbox_data, load_foolbox_imagenet
from repliscope.errors import DatasetError

LABELS = [243, 559, 438, 990, 949, 853, 609, 609, 915, 455, 541, 630, 741, 471, 129, 99, 251, 22, 317, 305]
IDENTITY = "99bb2a439b0b352c4bcc7b70e841ca21fb2af45d2dede8b9cd5648b90586ac7d"
"""Golden identity of foolbox 3.3.4's 20 ImageNet images (computed once, pinned)."""


def test_twenty_labelled_images_in_file_name_order() -> None:
    ds = DATASETS.get("foolbox_imagenet")()
    assert len(ds) == 20
    assert [s.label for s in ds.samples] == LABELS
    assert [s.id for s in ds.samples][:2] == ["imagenet_00_243.jpg", "imagenet_01_559.jpg"]
    assert ds.label_rule == "filename_index"
    assert "ImageNet" in ds.license and "MIT" in ds.license
    assert ds.samples[0].read()[:3] == b"\xff\xd8\xff"  # a JPEG


def test_golden_identity() -> None:
    ds = load_foolbox_imagenet()
    assert ds.identity == IDENTITY
    assert ds.describe()["identity"] == IDENTITY


def test_identity_changes_with_a_label() -> None:
    ds = load_foolbox_imagenet()
    samples = list(ds.samples)
    samples[6] = dataclasses.replace(samples[6], label=436)
    changed = Dataset(name=ds.name, samples=samples, license=ds.license, label_rule=ds.label_rule)
    assert changed.identity != IDENTITY


def test_limit_and_wrong_rule() -> None:
    assert [s.label for s in load_foolbox_imagenet(limit=3).samples] == LABELS[:3]
    with pytest.raises(DatasetError, match="filename_index"):
        load_foolbox_imagenet("imagenet_wnid")


def test_record_hash_format() -> None:
    # RECORD: urlsafe base64 of the sha256 digest without '=' padding
    assert foolbox_data.record_sha256(b"") == "47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU"
    assert hashlib.sha256(b"").hexdigest().startswith("e3b0c442")


def test_modified_file_is_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    version, files = foolbox_data._bundled_files()
    tampered = [(name, path, "0" * 43 if i == 3 else h) for i, (name, path, h) in enumerate(files)]
    monkeypatch.setattr(foolbox_data, "_bundled_files", lambda: (version, tampered))
    with pytest.raises(DatasetError, match=r"imagenet_03_990\.jpg: sha256 .* differs from the foolbox"):
        load_foolbox_imagenet()


def test_missing_wheel_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(foolbox_data, "DISTRIBUTION", "foolbox-not-installed-for-this-test")
    with pytest.raises(DatasetError, match=r"pip install --no-deps foolbox==3\.3\.4"):
        load_foolbox_imagenet()
