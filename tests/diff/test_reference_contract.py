"""One candidate contract, any reference: the unit-level driver (``diff_layers``) compares a candidate with a
reference that is no torch module (libdarknet: tests/yolo/test_darknet_reference.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import pytest

from repliscope.diff.base import Candidate, LayerInfo, Reference
from repliscope.diff.layers.driver import diff_layers


class NumpyReference(Reference):
    """Two units: ``scale`` (x * 2) then ``shift`` (+ 1)."""

    name = "numpy"
    notes = ("reference: two numpy units",)

    def layers(self, example: np.ndarray) -> list[LayerInfo]:
        return [
            LayerInfo("scale", "Mul", "ref.py:1", 1, producers=("",)),
            LayerInfo("shift", "Add", "ref.py:2", 1, producers=("scale",)),
        ]

    def run(
        self,
        x: np.ndarray,
        on_start: Callable[[str, list[np.ndarray]], None] | None = None,
        on_end: Callable[[str, list[np.ndarray], np.ndarray], None] | None = None,
    ) -> np.ndarray | None:
        a = x
        for path, fn in (("scale", lambda t: t * 2), ("shift", lambda t: t + 1)):
            if on_start is not None:
                on_start(path, [a])
            out = fn(a)
            if on_end is not None:
                on_end(path, [a], out)
            a = out
        return a

    def describe(self) -> dict[str, Any]:
        return {"framework": "numpy"}


class NumpyCandidate(Candidate):
    """The same two units; ``shift_by`` is its constant (1 is right)."""

    name = "numpy-port"

    def __init__(self, shift_by: float) -> None:
        self.fns = {"scale": lambda t: t * 2, "shift": lambda t: t + shift_by}

    def mapped_layers(self, reference_layers: Sequence[LayerInfo]) -> list[str]:
        return [layer.path for layer in reference_layers]

    def run_layer(self, path: str, inputs: Sequence[np.ndarray]) -> np.ndarray:
        return np.asarray(self.fns[path](inputs[0]))

    def forward_layers(self, x: np.ndarray, paths: Iterable[str]) -> Iterator[tuple[str, np.ndarray]]:
        wanted, a = set(paths), x
        for path, fn in self.fns.items():
            a = fn(a)
            if path in wanted:
                yield path, a

    def output(self, x: np.ndarray) -> np.ndarray | None:
        return np.asarray(self.fns["shift"](self.fns["scale"](x)))


def test_a_numpy_reference_runs_through_the_driver_and_localises_the_bug() -> None:
    x = np.linspace(-1, 1, 24, dtype=np.float32).reshape(2, 3, 4)
    good = diff_layers(NumpyReference(), NumpyCandidate(1.0), x)
    assert good.passed and good.reference == {"framework": "numpy"} and good.output is not None
    assert good.notes[0] == "reference: two numpy units"
    assert [r.path for r in good.layers] == ["scale", "shift"] and good.reference_layers == 2
    bad = diff_layers(NumpyReference(), NumpyCandidate(1.01), x)
    for mode in ("golden", "carried"):
        first = bad.first_divergent[mode]
        assert first is not None and first.path == "shift" and first.max_abs == pytest.approx(0.01, rel=1e-3)
    assert bad.output is not None and not bad.output.passed
