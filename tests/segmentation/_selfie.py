"""Where the selfie-segmentation tests find their real inputs: MediaPipe's .tflite files from the mediapipe 0.10.21
wheel (fetched into the cache by ``make segmentation-assets``; tests never download) and coco-val-mini; each test
skips naming what is missing."""

from __future__ import annotations

from pathlib import Path

import pytest

from repliscope.errors import NotCachedError
from repliscope.manifest import pypi_wheel
from repliscope.paths import default_cache_dir

REPO = Path(__file__).resolve().parents[2]
WHEEL = "pypi-wheel://mediapipe==0.10.21/mediapipe/modules/selfie_segmentation"
MODELS = {
    "general": (
        f"{WHEEL}/selfie_segmentation.tflite",
        "9ee168ec7c8f2a16c56fe8e1cfbc514974cbbb7e434051b455635f1bd1462f5c",
    ),
    "landscape": (
        f"{WHEEL}/selfie_segmentation_landscape.tflite",
        "a77d03f4659b9f6b6c1f5106947bf40e99d7655094b6527f214ea7d451106edd",
    ),
}
MANIFESTS = {
    "general": REPO / "examples" / "selfie-segmentation.yaml",
    "landscape": REPO / "examples" / "selfie-segmentation-landscape.yaml",
}
COCO_MINI = REPO.parent / "shared" / "data" / "coco-val-mini"
GOLDEN = REPO / "tests" / "fixtures" / "segmentation" / "mediapipe_selfie_golden.npz"
REAL_CACHE = default_cache_dir()
"""The cache ``make segmentation-assets`` filled, read at import (before tests/conftest.py points
``$REPLISCOPE_CACHE`` at a per-session folder, which :func:`seed_cache` links the members into)."""


def seed_cache() -> None:
    """Skip unless both models are cached; make them visible in the test's cache by a symlink."""
    for uri, sha in MODELS.values():
        try:
            pypi_wheel.resolve(uri, sha, REAL_CACHE, allow_download=False)
        except NotCachedError as exc:
            pytest.skip(f"{exc} (make segmentation-assets)")
    source = REAL_CACHE / "pypi-wheel" / "mediapipe-0.10.21"
    target = default_cache_dir() / "pypi-wheel" / "mediapipe-0.10.21"
    if target.resolve() != source.resolve() and not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        target.symlink_to(source, target_is_directory=True)


def need_coco() -> Path:
    if not COCO_MINI.is_dir():
        pytest.skip(f"{COCO_MINI} is absent")
    return COCO_MINI
