"""Session-scoped fixtures for the diff tests: one Lite0 reference, its ONNX candidate, a batch of 8 real
foolbox images pre-processed by the manifest, and the layer-diff results everybody asserts on."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from repliscope.datasets import resolve_dataset
from repliscope.diff.layer_result import LayerDiffResult
from repliscope.diff.layers import diff_layers
from repliscope.diff.onnx_candidate import OnnxCandidate
from repliscope.diff.reference import TorchReference
from repliscope.diff.task import first_batch
from repliscope.evaluation.run import PreparedRun, RunSettings, prepare
from tests.conftest import LITE0

BROKEN_INITIALIZER = "_blocks.5._expand_conv.weight"
"""The weight perturbed (x 1.01) in the broken candidate; its fused ONNX unit is keyed '_blocks.5._bn0'."""


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.conftest import _session_cache

    return _session_cache(tmp_path_factory)


@pytest.fixture(scope="session")
def lite0(cache_dir: Path) -> PreparedRun:
    return prepare(LITE0, RunSettings(runtime="torch", threads=2, batch_size=8, cache_dir=cache_dir))


@pytest.fixture(scope="session")
def batch(lite0: PreparedRun) -> tuple[list[str], np.ndarray]:
    return first_batch(lite0.pipeline, resolve_dataset("foolbox_imagenet"), 8, tuple(lite0.artifact.input_shape[1:]))


@pytest.fixture(scope="session")
def reference(lite0: PreparedRun) -> TorchReference:
    return TorchReference.from_artifact(lite0.artifact)


@pytest.fixture(scope="session")
def onnx_path(lite0: PreparedRun, cache_dir: Path) -> Path:
    from repliscope.runtimes.onnx_export import export_to_onnx

    return export_to_onnx(lite0.artifact, cache_dir)[0]


@pytest.fixture(scope="session")
def healthy(reference: TorchReference, onnx_path: Path, batch: tuple[list[str], np.ndarray]) -> LayerDiffResult:
    ids, x = batch
    return diff_layers(reference, OnnxCandidate(onnx_path), x, samples=ids)


@pytest.fixture(scope="session")
def broken(reference: TorchReference, onnx_path: Path, batch: tuple[list[str], np.ndarray]) -> LayerDiffResult:
    model = onnx.load(str(onnx_path))
    (init,) = [i for i in model.graph.initializer if i.name == BROKEN_INITIALIZER]
    weights = onnx.numpy_helper.to_array(init) * np.float32(1.01)
    init.CopyFrom(onnx.numpy_helper.from_array(weights, init.name))
    ids, x = batch
    return diff_layers(reference, OnnxCandidate(model, source="perturbed"), x, samples=ids)
