"""Two generated JPEGs (landscape and portrait: a letterbox pads rows in one and columns in the other) and the
two manifests of issue 35's cases, shared by the pipeline-diff diagnosis tests."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from repliscope.datasets import resolve_dataset
from repliscope.datasets.base import Dataset
from repliscope.manifest.loader import LoadedManifest, load_manifest
from tests.conftest import EXAMPLES, LITE0


def texture(h: int, w: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([(x * 0.9 + y * 0.2) % 256, (y * 1.3) % 256, ((x - y) * 0.7) % 256], -1)
    return (base + rng.integers(0, 60, base.shape)).clip(0, 255).astype(np.uint8)


@pytest.fixture(scope="session")
def two_images(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    root = tmp_path_factory.mktemp("pipeline-diagnosis")
    for name, (h, w), seed in (("land_0.jpg", (300, 400), 1), ("port_1.jpg", (410, 290), 2)):
        Image.fromarray(texture(h, w, seed)).save(root / name, quality=92)
    return resolve_dataset(str(root))


@pytest.fixture(scope="session")
def yolo() -> LoadedManifest:
    """examples/yolov3-tiny.yaml: only its pre-processing runs (no weights are needed)."""
    return load_manifest(EXAMPLES / "yolov3-tiny.yaml")


@pytest.fixture(scope="session")
def lite0() -> LoadedManifest:
    return load_manifest(LITE0)
