"""A user's torch port (``file.py:function``) of a small model with functional ops: true negatives (the same
sum over a permuted axis) pass, and bugs that shift the positional op names are localized to the right op."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from repliscope.diff.layers.candidate_format import build_candidate, diff_candidate
from repliscope.diff.layers.layer_result import LayerDiffResult
from repliscope.diff.layers.torch_reference import TorchReference


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 3, padding=1)
        self.fc = nn.Linear(6, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = F.relu(self.conv(x)).flatten(2).transpose(1, 2)  # (N, 16, 6)
        return self.fc(F.relu(torch.tanh(t)).mean(dim=1))


PORT = """
import copy, torch, torch.nn.functional as F
from torch import nn

class Port(nn.Module):
    def __init__(self, ref, bug):
        super().__init__()
        self.conv, self.fc, self.bug = copy.deepcopy(ref.conv), copy.deepcopy(ref.fc), bug

    def forward(self, x):
        y = self.conv(x)
        if self.bug == "extra_relu":
            y = F.relu(F.relu(y))
        y = F.gelu(y) if self.bug == "gelu" else F.relu(y)
        t = F.relu(torch.tanh(y.flatten(2).transpose(1, 2)))
        m = t.permute(0, 2, 1).mean(dim=-1) if self.bug == "perm" else t.mean(dim=1)
        return self.fc(m)

def same(ref): return Port(ref, None).eval()
def perm(ref): return Port(ref, "perm").eval()
def gelu(ref): return Port(ref, "gelu").eval()
def extra_relu(ref): return Port(ref, "extra_relu").eval()
"""


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> tuple[TorchReference, np.ndarray, Path]:
    torch.manual_seed(0)
    reference = TorchReference(Net().eval())
    x = np.random.default_rng(0).standard_normal((2, 3, 4, 4)).astype(np.float32)
    port = tmp_path_factory.mktemp("port") / "user_port.py"
    port.write_text(PORT, encoding="utf-8")
    return reference, x, port


def _diff(
    setup: tuple[TorchReference, np.ndarray, Path], factory: str, modes: tuple[str, ...] = ("golden", "carried")
) -> tuple[str, LayerDiffResult]:
    reference, x, port = setup
    built = build_candidate("torch", f"{port}:{factory}", reference, x)
    return built.mapping_origin, diff_candidate(reference, built.candidate, x, modes, built=built)


def test_the_same_port_pairs_by_name_and_passes(setup: tuple[TorchReference, np.ndarray, Path]) -> None:
    origin, r = _diff(setup, "same")
    assert origin == "by name" and r.summary["golden"].compared == r.summary["carried"].compared == 8
    assert r.summary["golden"].failed == r.summary["carried"].failed == 0


def test_a_mean_over_a_permuted_axis_is_a_true_negative(setup: tuple[TorchReference, np.ndarray, Path]) -> None:
    """The port's mean reads a permuted tensor: fed the reference input it gives another shape. That used to be
    a golden divergence (exit 1 for a correct port); with carried mode passing it is 'golden cannot compare'."""
    origin, r = _diff(setup, "perm")
    assert origin == "proposed"  # the root's ops differ (an extra permute): never paired by positional names
    assert r.summary["carried"].compared == 8 and r.summary["carried"].failed == 0
    assert r.summary["golden"].compared == 7 and r.summary["golden"].failed == 0
    assert r.first_divergent == {"golden": None, "carried": None}
    assert any(n.startswith("'/mean': golden mode cannot compare it") for n in r.notes)
    _, golden_only = _diff(setup, "perm", ("golden",))  # without carried mode it cannot be told from a bug
    assert golden_only.first_divergent["golden"] is not None
    assert golden_only.first_divergent["golden"].path == "/mean"
    assert any("--mode both" in n for n in golden_only.notes)


@pytest.mark.parametrize("factory", ["gelu", "extra_relu"])
def test_an_op_bug_that_shifts_op_names_is_localized(
    setup: tuple[TorchReference, np.ndarray, Path], factory: str
) -> None:
    """gelu for the first relu: the port's '/relu' is the reference's '/relu#2' (names count calls per
    container; where the two relus have the same shape it used to be paired with the reference's '/relu', so
    golden mode blamed the wrong op: the MyNet case of the review).
    An extra relu(relu(y)) (a true negative): every reference name exists in the port but '/relu#2' names
    another call, which used to pair the conv's relu with the relu after tanh (a false shape divergence)."""
    origin, r = _diff(setup, factory)
    assert origin == "proposed"
    golden, carried = r.first_divergent["golden"], r.first_divergent["carried"]
    if factory == "gelu":
        assert golden is not None and carried is not None and golden.path == carried.path == "/relu"
    else:  # relu(relu(y)) == relu(y): a true negative, the extra op is an unpaired candidate unit
        assert golden is None and carried is None and r.summary["golden"].compared == 8


def test_external_inputs_of_a_covered_group() -> None:
    """What decides 'dropped input' (divergence) vs 'golden cannot feed this fused unit' (carried only): the
    distinct tensors a covered group of reference layers reads from outside it."""
    from repliscope.diff.base import LayerInfo
    from repliscope.diff.layers.driver import _external_inputs

    def op(path: str, *producers: str) -> LayerInfo:
        return LayerInfo(path, path.strip("/"), "f.py:1", 1, op=path.strip("/"), producers=producers)

    info = {
        i.path: i
        for i in (
            op("/silu", ""),
            op("/add", "/silu", "conv_b"),
            op("/relu", "/add"),
            op("/t", "k"),
            op("/matmul", "q", "/t"),
            op("/softmax", "/matmul"),
            op("/getitem", "", ""),
        )
    }
    assert _external_inputs(["/add", "/relu"], info) == 2  # a candidate reading 1 tensor dropped the residual
    assert _external_inputs(["/t", "/matmul", "/softmax"], info) == 2  # q and k enter at two layers
    assert _external_inputs(["/silu"], info) == 1  # the model input
    assert _external_inputs(["/getitem"], info) is None  # tensors no unit made: unknown


def test_proposal_for_a_keras_savedmodel_pairs_layers_with_their_namesakes() -> None:
    """A SavedModel of a Keras model: each conv is Conv2D + BiasAdd, the batch norm Mul + AddV2, the silu
    Mul + Sigmoid + Mul + IdentityN. Every alignment below pairs 5 layers; the one agreeing with the names (the
    Keras layers are named after the torch modules and ops) wins. Without the op-name token the proposal paired
    'stem' with the bias-less convolution and '/silu' with the batch norm's add (a false divergence)."""
    from repliscope.diff.layers.auto_mapping import ReferenceUnit as Ref
    from repliscope.diff.layers.auto_mapping import propose
    from repliscope.diff.layers.mapping import UnitInfo

    s, c = (1, 12, 16, 16), (1, 16, 16, 12)
    ref = [
        Ref("stem", "Conv2d", s),
        Ref("bn", "BatchNorm2d", s),
        Ref("/silu", "silu", s),
        Ref("conv_a", "Conv2d", s),
        Ref("/relu", "relu", s),
    ]
    ops = [
        ("stem_pad/Pad", "Pad"),
        ("stem/convolution", "Conv2D"),
        ("stem/BiasAdd", "BiasAdd"),
        ("bn/batchnorm/mul_1", "Mul"),
        ("bn/batchnorm/add_1", "AddV2"),
        ("silu/mul", "Mul"),
        ("silu/Sigmoid", "Sigmoid"),
        ("silu/mul_1", "Mul"),
        ("silu/IdentityN", "IdentityN"),
        ("conv_a/convolution", "Conv2D"),
        ("conv_a/BiasAdd", "BiasAdd"),
        ("relu/Relu", "Relu"),
    ]
    cand = [UnitInfo(f"model/{n}", op, (1, 34, 34, 3) if op == "Pad" else c) for n, op in ops]
    assert propose(ref, cand, "NHWC").mapping == {
        "stem": "model/stem/BiasAdd",
        "bn": "model/bn/batchnorm/add_1",
        "/silu": "model/silu/IdentityN",
        "conv_a": "model/conv_a/BiasAdd",
        "/relu": "model/relu/Relu",
    }
