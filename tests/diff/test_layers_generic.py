"""The layer-diff driver with hand-written candidates on a small torch model: NHWC outputs, user mappings,
shape mismatches, and the fused-layer grouping."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import numpy as np
import pytest
import torch
from torch import nn

from repliscope.diff.base import Candidate, LayerInfo
from repliscope.diff.layers.driver import diff_layers
from repliscope.diff.layers.mapping import MappedCandidate, MappingError
from repliscope.diff.layers.onnx_units import assign_covers
from repliscope.diff.layers.torch_reference import TorchReference
from repliscope.errors import RepliscopeError


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 2, 1), nn.Flatten(), nn.Linear(50, 3))


X = np.random.default_rng(1).standard_normal((2, 3, 5, 5)).astype(np.float32)


class TorchCopy(Candidate):
    """A second implementation = a copy of the model run in torch, under its own layer names ``L0..L4``,
    optionally NHWC, optionally with one layer's bias nudged."""

    name = "torch-copy"

    def __init__(self, model: nn.Module, nhwc: bool = False, nudge: str | None = None) -> None:
        import copy

        self.model = copy.deepcopy(model)
        self.nhwc = nhwc
        if nhwc:
            self.output_layout = "NHWC"  # type: ignore[misc]
        if nudge is not None:
            with torch.no_grad():
                self.model[int(nudge[1:])].bias += 0.01

    def names(self) -> list[str]:
        return [f"L{i}" for i in range(len(self.model))]

    def mapped_layers(self, reference_layers: Sequence[LayerInfo]) -> list[str]:
        return self.names()

    def _out(self, t: torch.Tensor) -> np.ndarray:
        a = t.detach().numpy()
        return a.transpose(0, 2, 3, 1).copy() if self.nhwc and a.ndim == 4 else a

    def run_layer(self, path: str, inputs: Sequence[np.ndarray]) -> np.ndarray:
        with torch.no_grad():
            return self._out(self.model[int(path[1:])](torch.from_numpy(np.ascontiguousarray(inputs[0]))))

    def forward_layers(self, x: np.ndarray, paths: Iterable[str]) -> Iterator[tuple[str, np.ndarray]]:
        wanted = set(paths)
        t = torch.from_numpy(x)
        with torch.no_grad():
            for i, layer in enumerate(self.model):
                t = layer(t)
                if f"L{i}" in wanted:
                    yield f"L{i}", self._out(t)


MAPPING = {"0": "L0", "1": "L1", "2": "L2", "3": "L3", "4": "L4"}


@pytest.mark.parametrize("nhwc", [False, True])
def test_mapped_copy_passes_every_layer(nhwc: bool) -> None:
    model = _model()
    cand = MappedCandidate(TorchCopy(model, nhwc=nhwc), MAPPING, candidate_names=list(MAPPING.values()))
    result = diff_layers(TorchReference(model), cand, X)
    assert [r.path for r in result.layers] == ["0", "1", "2", "3", "4"]
    assert result.passed and result.summary["golden"].passed == 5 and result.summary["carried"].passed == 5
    layouts = {r.path: r.candidate_layout for r in result.layers}
    assert layouts["0"] == ("NHWC (transposed to NCHW)" if nhwc else "reference") and layouts["4"] == "reference"


def test_nudged_bias_first_divergent_and_carried_growth() -> None:
    model = _model()
    cand = MappedCandidate(TorchCopy(model, nudge="L2"), MAPPING)
    result = diff_layers(TorchReference(model), cand, X)
    assert result.first_divergent["golden"] is not None and result.first_divergent["golden"].path == "2"
    assert [r.path for r in result.layers if r.golden and not r.golden.passed] == ["2"]
    assert [r.path for r in result.layers if r.carried and not r.carried.passed] == ["2", "3", "4"]


def test_nhwc_without_declaring_it_is_a_shape_mismatch() -> None:
    model = _model()
    inner = TorchCopy(model, nhwc=True)
    inner.output_layout = "reference"  # type: ignore[misc]
    result = diff_layers(TorchReference(model), MappedCandidate(inner, MAPPING), X, modes=["golden"])
    first = result.first_divergent["golden"]
    assert first is not None and first.path == "0"
    assert result.layers[0].notes == [
        "shape mismatch: reference (2, 4, 5, 5) vs candidate (2, 5, 5, 4) (carried "
        "mode, --mode both, tells a bug from an input read in another layout)"
    ]
    assert "carried" not in result.first_divergent


def test_mapping_with_unknown_reference_path_fails() -> None:
    model = _model()
    with pytest.raises(MappingError, match="'9'"):
        diff_layers(TorchReference(model), MappedCandidate(TorchCopy(model), {**MAPPING, "9": "L9"}), X)
    with pytest.raises(MappingError, match="unknown candidate layer"):
        MappedCandidate(TorchCopy(model), {"0": "nope"}, candidate_names=["L0"])


def test_bad_mode() -> None:
    model = _model()
    with pytest.raises(RepliscopeError, match="unknown diff mode"):
        diff_layers(TorchReference(model), MappedCandidate(TorchCopy(model), MAPPING), X, modes=["fast"])  # type: ignore[list-item]


def test_assign_covers_groups_fused_layers_parent_first() -> None:
    def info(p: str) -> LayerInfo:
        return LayerInfo(p, "K", "f:1", 1)

    layers = [info(p) for p in ["c.pad", "c", "bn", "act", "c2", "bn2", "act#2", "pool", "fc"]]
    covers = assign_covers(layers, ["bn", "act", "bn2", "act#2", "fc"])
    assert covers == {
        "bn": ["c", "c.pad", "bn"],
        "act": ["act"],
        "bn2": ["c2", "bn2"],
        "act#2": ["act#2"],
        "fc": ["pool", "fc"],
    }
