"""Op-level golden diff on a model with a wider mix of functional ops (squeeze-excitation ``x * sigmoid``, ``cat``,
``interpolate``, ``chunk``, ``scaled_dot_product_attention``, tanh-GELU, residual, means): every op is paired
with its ONNX counterpart and fed the reference inputs in argument order."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from repliscope.backends.onnxruntime.candidate import OnnxCandidate
from repliscope.diff.layers.driver import diff_layers
from repliscope.diff.layers.layer_result import LayerDiffResult
from repliscope.diff.layers.torch_reference import TorchReference
from tests.diff.conftest import edited, export_onnx, find_node


class SqueezeExcite(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.fc1 = nn.Conv2d(c, 4, 1)
        self.fc2 = nn.Conv2d(4, c, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = x.mean((2, 3), keepdim=True)
        return x * torch.sigmoid(self.fc2(F.silu(self.fc1(w))))


class Mixed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, padding=1)
        self.se = SqueezeExcite(16)
        self.a = nn.Conv2d(16, 8, 1)
        self.b = nn.Conv2d(16, 8, 1)
        self.qkv = nn.Linear(16, 48)
        self.head = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.se(F.hardswish(self.stem(x)))
        x = F.interpolate(torch.cat([self.a(x), self.b(x)], dim=1), scale_factor=0.5, mode="bilinear")
        t = x.flatten(2).transpose(1, 2)
        q, k, v = self.qkv(t).chunk(3, dim=-1)
        o = F.scaled_dot_product_attention(q.unsqueeze(1), k.unsqueeze(1), v.unsqueeze(1)).squeeze(1)
        return self.head((t + F.gelu(o, approximate="tanh")).mean(1))


OPS = [
    "/hardswish",
    "se/mean",
    "se/silu",
    "se/sigmoid",
    "se/mul",
    "/cat",
    "/interpolate",
    "/flatten",
    "/transpose",
    "/unsqueeze",
    "/unsqueeze#2",
    "/unsqueeze#3",
    "/scaled_dot_product_attention",
    "/squeeze",
    "/gelu",
    "/add",
    "/mean",
]


@pytest.fixture(scope="module")
def mixed() -> tuple[nn.Module, onnx.ModelProto, np.ndarray]:
    torch.manual_seed(0)
    model = Mixed().eval()
    return model, export_onnx(model), np.random.default_rng(0).standard_normal((4, 3, 32, 32)).astype(np.float32)


def test_every_functional_op_is_paired_and_passes(mixed: tuple[nn.Module, onnx.ModelProto, np.ndarray]) -> None:
    model, proto, x = mixed
    result: LayerDiffResult = diff_layers(TorchReference(model), OnnxCandidate(proto), x)
    assert result.passed and [r.path for r in result.layers if r.op] == OPS
    assert result.summary["golden"].max_ratio < 0.5
    assert [(u.path, u.reason.split(";")[0]) for u in result.uncompared] == [("/chunk", "returns several tensors")]
    assert result.notes == [
        "'/interpolate': the reference calls interpolate, the ONNX graph has upsample_bilinear2d "
        "(Resize) at the same place"
    ]
    sdpa = {r.path: r for r in result.layers}["/scaled_dot_product_attention"]
    assert sdpa.reduction == 16 + 256  # head dim + 256 keys
    assert sdpa.golden is not None and sdpa.golden.passed  # q, k, v fed in argument order


def test_squeeze_excite_gate_bug_is_localized(mixed: tuple[nn.Module, onnx.ModelProto, np.ndarray]) -> None:
    """The SE gate's Sigmoid replaced by HardSigmoid in the ONNX: the sigmoid op, fed reference inputs, fails."""
    model, proto, x = mixed
    broken = edited(proto)
    find_node(broken, "Sigmoid", "se", nth=1).op_type = "HardSigmoid"  # nth=0 is inside the silu
    result = diff_layers(TorchReference(model), OnnxCandidate(broken), x)
    first = result.first_divergent["golden"]
    assert first is not None and first.path == "se/sigmoid"
    assert [r.path for r in result.layers if r.golden is not None and not r.golden.passed] == ["se/sigmoid"]
