"""A small ResNet-style classifier with FUNCTIONAL activations and residual adds (no ReLU modules).

Input float32 NCHW (N, 3, 32, 32), output logits (N, num_classes). Layout: conv stem + BatchNorm, two basic
blocks (the second downsamples with a strided 1x1 projection), global average pool, flatten, linear head.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class BasicBlock(nn.Module):
    """conv3x3-BN-relu-conv3x3-BN, plus the identity (or a strided 1x1 conv + BN projection), then relu."""

    def __init__(self, cin: int, cout: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.proj: nn.Module | None = None
        if stride != 1 or cin != cout:
            self.proj = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        skip = x if self.proj is None else self.proj(x)
        return F.relu(out + skip)


class TinyResNet(nn.Module):
    def __init__(self, num_classes: int = 10, width: int = 16) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.layer1 = nn.Sequential(BasicBlock(width, width))
        self.layer2 = nn.Sequential(BasicBlock(width, 2 * width, stride=2))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(2 * width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layer2(self.layer1(x))
        x = torch.flatten(self.pool(x), 1)
        return self.fc(x)


def build(num_classes: int = 10, width: int = 16) -> nn.Module:
    """A :class:`TinyResNet` (random weights; load ``tiny_resnet.pt`` for the seeded ones)."""
    return TinyResNet(num_classes=num_classes, width=width)
