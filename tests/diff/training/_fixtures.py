"""Shared inputs of the training-diff tests: Darknet's dog.jpg letterboxed by libdarknet, with three truth boxes
(dog, bicycle, truck as Darknet's 0..79 classes) on the 416x416 network input."""

from __future__ import annotations

import numpy as np

from tests.yolo._assets import DARKNET_DATA

DOG_TRUTH = np.array(
    [[0.30, 0.60, 0.25, 0.45, 16], [0.45, 0.45, 0.55, 0.45, 1], [0.75, 0.22, 0.30, 0.15, 7]], np.float32
)


def dog_batch() -> tuple[np.ndarray, np.ndarray]:
    from repliscope.backends.darknet import reference as ref

    x = ref.letterbox(DARKNET_DATA / "dog.jpg", 416, 416)[None]
    return x, DOG_TRUTH[None]
