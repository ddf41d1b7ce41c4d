"""Layer discovery on small torch modules: leaves, containers, no-ops, repeated calls, reductions, sources."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from repliscope.diff.reference import TorchReference, source_of


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(4, 8, 3, padding=1, groups=2)
        self.act = nn.ReLU6()
        self.skip = nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.act(self.conv(self.skip(x))) - 1.0)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pad = nn.ZeroPad2d(0)
        self.stem = nn.Conv2d(3, 4, 1)
        self.blocks = nn.Sequential(Block())
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.drop = nn.Dropout(0.5)
        self.flat = nn.Flatten()
        self.fc = nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.drop(self.flat(self.pool(self.blocks(self.stem(self.pad(x)))))))


def _x(n: int = 2) -> np.ndarray:
    return np.random.default_rng(0).standard_normal((n, 3, 6, 6)).astype(np.float32)


def test_layers_in_end_order_without_containers_or_noops() -> None:
    torch.manual_seed(0)
    ref = TorchReference(Net())
    layers = ref.layers(_x())
    assert [layer.path for layer in layers] == [
        "stem", "blocks.0.conv", "blocks.0.act", "blocks.0.act#2", "pool", "flat", "fc"]
    by = {layer.path: layer for layer in layers}
    assert by["blocks.0.conv"].reduction == 4 // 2 * 9
    assert by["fc"].reduction == 8 and by["pool"].reduction == 36 and by["blocks.0.act"].reduction == 1
    assert by["fc"].kind == "Linear"
    assert by["fc"].source == source_of(nn.Linear) and "torch/nn/modules/linear.py:" in by["fc"].source
    assert source_of(Block).endswith(f"tests/diff/test_reference.py:{Block.__init__.__code__.co_firstlineno - 1}")


def test_run_streams_inputs_and_outputs() -> None:
    torch.manual_seed(0)
    model = Net()
    ref = TorchReference(model)
    x = _x(3)
    started: list[str] = []
    ended: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {}
    out = ref.run(x, lambda p, ins: started.append(p), lambda p, ins, o: ended.__setitem__(p, (ins[0].shape, o.shape)))
    assert started == ["stem", "blocks.0.conv", "blocks.0.act", "blocks.0.act#2", "pool", "flat", "fc"]
    assert ended["fc"] == ((3, 8), (3, 5)) and ended["blocks.0.act#2"] == ((3, 8, 6, 6), (3, 8, 6, 6))
    with torch.no_grad():
        np.testing.assert_array_equal(out, model(torch.from_numpy(x)).numpy())
