"""Tiny torch models, each correct or carrying exactly one bug the test kit must report."""

from __future__ import annotations

import torch
from torch import nn


class TinyMLP(nn.Module):
    """Correct: 8 -> 16 -> 4."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


class UnusedLayer(TinyMLP):
    """Bug: ``head`` is built but never called (a disconnected parameter)."""

    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(4, 4)


class DetachedInput(TinyMLP):
    """Bug: the input is detached (e.g. converted through NumPy), so no gradient reaches it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.detach())


class ZeroedBranch(TinyMLP):
    """Bug: a gate parameter multiplied by zero gets an all-zero gradient."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = nn.Parameter(torch.ones(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) + 0.0 * self.gate


class NanGradient(TinyMLP):
    """Bug: ``sqrt`` at 0 makes the gradient of ``fc2`` NaN/Inf (the output itself stays finite)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = super().forward(x)
        return y + torch.sqrt(self.fc2.bias * 0.0)


class TwoHeads(nn.Module):
    """Correct: two inputs, a dict of two outputs."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 3)
        self.b = nn.Linear(5, 2)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"logits": self.a(x), "aux": self.b(y)}


class Calibrated(TinyMLP):
    """Bug: ``calibrate()`` sets a non-persistent buffer that forward reads, so the state_dict misses it."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("scale", torch.ones(4), persistent=False)

    def calibrate(self, value: float) -> None:
        self.scale.fill_(value)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) * self.scale


class SmallConvNet(nn.Module):
    """Correct: conv + batch norm + ReLU6 + depthwise conv + pooling + dropout + linear (a Lite-like block)."""

    def __init__(self, num_classes: int = 5) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, stride=2, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False)
        self.bn2 = nn.BatchNorm2d(8)
        self.drop = nn.Dropout(0.5)
        self.fc = nn.Linear(8, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.relu6(self.bn(self.stem(x)))
        x = nn.functional.relu6(self.bn2(self.dw(x))) + x
        return self.fc(self.drop(x.mean(dim=(2, 3))))


def small_conv_net() -> SmallConvNet:
    """Seeded factory, so two calls build identical random weights."""
    torch.manual_seed(0)
    return SmallConvNet()
