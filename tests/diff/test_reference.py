"""Layer discovery on small torch modules: leaves, containers, no-ops, repeated calls, reductions, sources."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from repliscope.diff.layers.torch_reference import TorchReference, source_of


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
        "stem",
        "blocks.0.conv",
        "blocks.0.act",
        "blocks.0/sub",
        "blocks.0.act#2",
        "pool",
        "flat",
        "fc",
    ]
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
    assert started == ["stem", "blocks.0.conv", "blocks.0.act", "blocks.0/sub", "blocks.0.act#2", "pool", "flat", "fc"]
    assert ended["fc"] == ((3, 8), (3, 5)) and ended["blocks.0.act#2"] == ((3, 8, 6, 6), (3, 8, 6, 6))
    with torch.no_grad():
        np.testing.assert_array_equal(out, model(torch.from_numpy(x)).numpy())


class Attention(nn.Module):
    """Functional ops in a container: matmul, scale, softmax, residual; a root-level position parameter."""

    def __init__(self) -> None:
        super().__init__()
        self.qk = nn.Linear(4, 8)
        self.scale = 0.5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k = self.qk(x).chunk(2, dim=-1)
        attn = torch.matmul(q, k.transpose(-2, -1)) * self.scale  # line A
        return x + attn.softmax(dim=-1) @ x


class Root(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pos = nn.Parameter(torch.ones(1, 3, 4))
        self.attn = nn.Sequential(Attention())
        self.norm = nn.LayerNorm(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.attn(x + self.pos).contiguous()
        return torch.nn.functional.gelu(self.norm(x)).flatten(1)


LINE_A = Attention.forward.__code__.co_firstlineno + 2


def test_functional_ops_are_units_named_by_container_and_call_site() -> None:
    torch.manual_seed(0)
    ref = TorchReference(Root())
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    layers = ref.layers(x)
    assert [layer.path for layer in layers] == [
        "/add",
        "attn.0.qk",
        "attn.0/transpose",
        "attn.0/matmul",
        "attn.0/mul",
        "attn.0/softmax",
        "attn.0/matmul#2",
        "attn.0/add",
        "norm",
        "/gelu",
        "/flatten",
    ]  # contiguous() returned x: not a unit
    by = {layer.path: layer for layer in layers}
    assert by["attn.0/matmul"].source.endswith(f"tests/diff/test_reference.py:{LINE_A}")
    assert by["attn.0/mul"].source == by["attn.0/matmul"].source and by["attn.0/mul"].kind == "mul"
    assert (by["attn.0/matmul"].arity, by["attn.0/mul"].arity, by["/add"].arity) == (2, 1, 1)  # pos is a constant
    assert by["attn.0/matmul"].reduction == 4 and by["attn.0/softmax"].reduction == 3
    assert by["attn.0/matmul#2"].reduction == 3 and by["/gelu"].reduction == 1
    assert all(layer.is_op for layer in layers if "/" in layer.path) and not by["norm"].is_op
    assert [m.path for m in ref.multi_output_ops(x)] == ["attn.0/chunk"]  # two outputs: listed, not a unit
    assert [layer.path for layer in TorchReference(Root(), ops=False).layers(x)] == ["attn.0.qk", "norm"]


def test_ops_stream_their_activation_inputs() -> None:
    torch.manual_seed(0)
    model = Root()
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    seen: dict[str, list[tuple[int, ...]]] = {}
    out = TorchReference(model).run(x, None, lambda p, ins, o: seen.__setitem__(p, [a.shape for a in ins]))
    assert seen["attn.0/matmul"] == [(2, 3, 4), (2, 4, 3)] and seen["/add"] == [(2, 3, 4)]
    with torch.no_grad():
        np.testing.assert_array_equal(out, model(torch.from_numpy(x)).numpy())


class Twice(nn.Module):
    """One residual container called twice: its ops are named per call (``block#2/add``)."""

    def __init__(self) -> None:
        super().__init__()
        self.block = Residual()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(self.block(x))


class Residual(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.tanh(self.fc(x))


def test_ops_of_a_container_called_twice_are_named_per_call() -> None:
    torch.manual_seed(0)
    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    assert [layer.path for layer in TorchReference(Twice()).layers(x)] == [
        "block.fc",
        "block/tanh",
        "block/add",
        "block.fc#2",
        "block#2/tanh",
        "block#2/add",
    ]


def test_op_names_and_reductions() -> None:
    import inspect

    from repliscope.diff.layers.ref_ops import op_name, op_reduction

    transpose_property = inspect.getattr_static(torch.Tensor, "T").__get__
    assert [
        op_name(f)
        for f in (
            torch.Tensor.__radd__,
            torch.Tensor.__iadd__,
            torch.Tensor.__truediv__,
            torch.Tensor.__matmul__,
            torch.nn.functional.relu,
            transpose_property,
        )
    ] == ["add", "add", "div", "matmul", "relu", "T"]
    a, b = torch.zeros(2, 3, 5), torch.zeros(2, 5, 7)
    out = torch.einsum("bij,bjk->bik", a, b)
    assert op_reduction("einsum", ("bij,bjk->bik", a, b), {}, out) == 5
    assert op_reduction("layer_norm", (a, (3, 5)), {}, a) == 15
    assert op_reduction("mean", (a,), {"dim": (1, 2)}, a.mean((1, 2))) == 15
    assert op_reduction("softmax", (a,), {"dim": 1}, a) == 3 and op_reduction("add", (a, a), {}, a) == 1
