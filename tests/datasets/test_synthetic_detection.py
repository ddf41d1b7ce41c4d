import io

import numpy as np
from PIL import Image

from repliscope.datasets import resolve_dataset
from repliscope.datasets.synthetic_detection import BACKGROUND, COLOURS, load_synthetic_detection


def test_deterministic_and_boxes_are_exact() -> None:
    ds = load_synthetic_detection(seed=3)
    again = resolve_dataset("synthetic_detection", seed=3)
    assert ds.identity == again.identity != load_synthetic_detection(seed=4).identity
    assert len(ds) == 16 and ds.categories == {1: "red", 2: "green", 3: "blue"}
    for s in ds.samples:
        img = np.asarray(Image.open(io.BytesIO(s.read())))
        assert img.shape[:2] == s.size_hw and min(img.shape[:2]) >= 64 and max(img.shape[:2]) <= 128
        painted = np.zeros(img.shape[:2], bool)
        for o in s.objects or ():
            x1, y1, x2, y2 = (int(v) for v in o.box)
            assert (img[y1:y2, x1:x2] == COLOURS[o.class_id]).all()
            assert o.area == (x2 - x1) * (y2 - y1)
            painted[y1:y2, x1:x2] = True
        assert (img[~painted] == BACKGROUND).all()  # nothing outside the boxes: they are exact


def test_pinned_first_image() -> None:
    first = load_synthetic_detection(seed=0).samples[0]
    assert (first.id, first.image_id, first.size_hw) == ("synthetic_000.png", 1, (119, 105))
    assert [(o.box, o.class_id) for o in first.objects or ()] == [
        ((3.0, 7.0, 26.0, 33.0), 1),
        ((56.0, 62.0, 75.0, 113.0), 2),
    ]
    assert sum(len(s.objects or ()) for s in load_synthetic_detection(seed=0).samples) == 33
