"""The shared 1000-image sample (one image per class); skipped when ../shared is absent."""

from pathlib import Path

from repliscope.datasets import imagenet_classes, load_image_folder


def test_one_image_per_class(imagenet_sample: Path) -> None:
    ds = load_image_folder(imagenet_sample)
    assert len(ds) == 1000
    assert ds.label_rule == "imagenet_wnid (detected)"
    assert [s.label for s in ds.samples] == list(range(1000))


def test_names_match_shipped_classes(imagenet_sample: Path) -> None:
    shipped = [f"{wnid}_{name}.JPEG" for wnid, name in imagenet_classes()]
    assert sorted(p.name for p in imagenet_sample.iterdir()) == shipped


def test_identity_reads_every_file_and_is_stable(imagenet_sample: Path) -> None:
    identity = load_image_folder(imagenet_sample).identity
    assert len(identity) == 64
    assert load_image_folder(imagenet_sample).identity == identity
    assert load_image_folder(imagenet_sample, limit=999).identity != identity
