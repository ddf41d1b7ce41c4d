"""Issue 23 item 6: ``diff --pipeline`` on a segmentation manifest (MediaPipe selfie segmentation). The manifest
stretches the image with MediaPipe's corner-aligned warp; a user's port with a plain half-pixel ``cv2.resize``
(written here with Pillow + OpenCV, never repliscope's ops) is named as the segmentation pitfall it makes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from repliscope.datasets import resolve_dataset
from repliscope.diff.pipeline.candidate import load_candidate
from repliscope.diff.pipeline.driver import diff_pipeline
from repliscope.manifest.loader import load_manifest
from tests.conftest import EXAMPLES

cv2 = pytest.importorskip("cv2")

SELFIE = EXAMPLES / "selfie-segmentation.yaml"

CANDIDATE = '''
import cv2
import numpy as np
from PIL import Image


def half_pixel(path):
    """Pillow RGB, cv2.resize INTER_LINEAR (half-pixel centres) to 256x256, [0, 1] float32, NHWC with a batch."""
    rgb = np.asarray(Image.open(path).convert("RGB"))
    x = cv2.resize(rgb, (256, 256), interpolation=cv2.INTER_LINEAR)
    return (x.astype(np.float32) * np.float32(1 / 255))[None]
'''


def test_half_pixel_resize_is_named_on_a_segmentation_manifest(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    root = tmp_path / "images"
    root.mkdir()
    for name, (h, w) in (("land_0.jpg", (240, 320)), ("port_1.jpg", (333, 251)), ("square_2.jpg", (256, 256))):
        y, x = np.mgrid[0:h, 0:w]
        img = np.stack([(x * 1.7) % 256, (y * 1.1) % 256, ((x + y) * 0.6) % 256], -1) + rng.integers(0, 40, (h, w, 3))
        Image.fromarray(img.clip(0, 255).astype(np.uint8)).save(root / name, quality=90)
    (tmp_path / "cand.py").write_text(CANDIDATE)
    data = resolve_dataset(str(root))
    result = diff_pipeline(
        load_manifest(SELFIE), load_candidate(f"{tmp_path / 'cand.py'}:half_pixel"), data.samples, data.name
    )
    assert (result.samples, result.failed) == (3, 0)
    assert result.verdict == "explained" and result.max_abs_error > 0.05
    assert result.diagnosis.variant == "segmentation_half_pixel_corner_aligned_swapped"
    assert result.diagnosis.residual_max_abs_error == 0.0
