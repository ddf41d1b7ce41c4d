"""Reduced-precision pitfalls: the whole model or only its normalisation layers in float16 / bfloat16."""

from __future__ import annotations

import numpy as np
import pytest

from repliscope.evaluation.run import PreparedRun, RunSettings, prepare
from repliscope.pitfalls.base import PITFALLS, NotApplicable
from repliscope.pitfalls.runners import PRECISIONS, MixedPrecisionTorchRunner, runner_for
from tests.conftest import LITE0


@pytest.fixture(scope="module")
def torch_run() -> PreparedRun:
    return prepare(LITE0, RunSettings(runtime="torch", threads=2, batch_size=2))


def test_the_reduced_precisions_are_registered_pitfalls() -> None:
    names = {"float16_inference", "bfloat16_inference", "float16_normalization", "bfloat16_normalization"}
    assert names <= set(PITFALLS.names())
    assert PRECISIONS == ("float16", "bfloat16", "float16:normalization", "bfloat16:normalization")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_normalization_scope_reduces_only_the_batch_norms(torch_run: PreparedRun, dtype: str) -> None:
    import torch

    x = np.random.default_rng(0).normal(0, 1, (2, 3, 224, 224)).astype(np.float32)
    ref = torch_run.runner.infer(x)
    norm = runner_for(torch_run.runner, 2, f"{dtype}:normalization")
    full = runner_for(torch_run.runner, 2, dtype)
    assert isinstance(norm, MixedPrecisionTorchRunner) and isinstance(full, MixedPrecisionTorchRunner)
    out_norm, out_full = norm.infer(x), full.infer(x)
    module = norm.module
    bns = [m for m in module.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    convs = [m for m in module.modules() if isinstance(m, torch.nn.Conv2d)]
    assert len(bns) == norm.notes["reduced_layers"] == 49  # Lite0: stem, 16 blocks (2-3 each), head
    assert all(m.weight.dtype == getattr(torch, dtype) for m in bns)
    assert all(m.weight.dtype == torch.float32 for m in convs)
    assert (norm.notes["precision"], full.notes["precision"]) == (f"{dtype}:normalization", dtype)
    assert out_norm.dtype == out_full.dtype == np.float32
    err_norm, err_full = float(np.abs(out_norm - ref).max()), float(np.abs(out_full - ref).max())
    assert 0 < err_norm < 1.0 and 0 < err_full < 2.0  # reduced precision moves the logits, not wildly
    if dtype == "bfloat16":  # 8 mantissa bits: far more than float16's 11
        assert err_norm > 1e-3


def test_onnxruntime_has_float16_only() -> None:
    prepared = prepare(LITE0, RunSettings(runtime="onnxruntime", threads=2, batch_size=2))
    with pytest.raises(NotApplicable, match="bfloat16 inference is not implemented for the onnxruntime runtime"):
        runner_for(prepared.runner, 2, "bfloat16")
    with pytest.raises(NotApplicable, match=r"'float8' is not implemented \(allowed: float32, float16, bfloat16"):
        runner_for(prepared.runner, 2, "float8")
