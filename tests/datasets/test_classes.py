from repliscope.datasets.classes import imagenet_classes, imagenet_wnid_index


def test_thousand_sorted_unique_classes() -> None:
    classes = imagenet_classes()
    assert len(classes) == 1000
    assert classes[0] == ("n01440764", "tench")
    assert classes[-1] == ("n15075141", "toilet_tissue")
    wnids = [w for w, _ in classes]
    assert wnids == sorted(wnids)
    assert len(set(wnids)) == 1000


def test_known_indices() -> None:
    index = imagenet_wnid_index()
    assert index["n01440764"] == 0
    assert imagenet_classes()[243] == ("n02108422", "bull_mastiff")
    assert imagenet_classes()[609] == ("n03594945", "jeep")


def test_returns_a_copy() -> None:
    imagenet_classes().clear()
    assert len(imagenet_classes()) == 1000
