"""libdarknet as the reference of the one unit-level driver (``diff_layers``): any candidate is compared with it
through the same contract as with the torch module."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import numpy as np
import pytest

from repliscope.diff.base import Candidate, LayerInfo, Reference
from repliscope.diff.layers.driver import diff_layers
from tests.yolo._assets import DARKNET_DATA, cfg_path, need_darknet, weights_path


def test_libdarknet_is_a_reference_any_candidate_is_compared_with() -> None:
    """A candidate that replays libdarknet's own outputs except for one layer it gets 1 % wrong: the same driver
    names that layer in both modes; the darknet reference has no single output (not compared, no note)."""
    need_darknet()
    from repliscope.backends.darknet import reference as ref

    x = ref.letterbox(DARKNET_DATA / "dog.jpg", 416, 416)[None]
    outputs = ref.darknet_layer_outputs(cfg_path(), weights_path(), x)
    reference = ref.DarknetLayers(cfg_path(), weights_path(), outputs=outputs)
    assert isinstance(reference, Reference)
    names = [layer.path for layer in reference.layers(x)]
    assert names[:3] == ["convolutional_0", "maxpool_1", "convolutional_2"] and len(names) == 24
    wrong = "convolutional_4"

    class Replay(Candidate):
        name = "replay"

        def _out(self, path: str) -> np.ndarray:
            out = np.stack([o[path] for o in outputs])
            return out * np.float32(1.01) if path == wrong else out

        def mapped_layers(self, reference_layers: Sequence[LayerInfo]) -> list[str]:
            return [layer.path for layer in reference_layers]

        def run_layer(self, path: str, inputs: Sequence[np.ndarray]) -> np.ndarray:
            return self._out(path)

        def forward_layers(self, x: np.ndarray, paths: Iterable[str]) -> Iterator[tuple[str, np.ndarray]]:
            for path in paths:
                yield path, self._out(path)

    result = diff_layers(reference, Replay(), x)
    assert result.reference["framework"] == "darknet (libdarknet)" and result.reference_layers == 24
    assert result.first_divergent["golden"] is not None and result.first_divergent["golden"].path == wrong
    assert result.first_divergent["carried"] is not None and result.first_divergent["carried"].path == wrong
    assert result.summary["golden"].failed == 1 and result.summary["golden"].ops == 0
    assert result.output is None and result.output_note == ""
    assert next(r for r in result.layers if r.path == wrong).op == "convolutional"


def test_layer_outputs_of_another_batch_are_refused() -> None:
    """Precomputed libdarknet outputs for one image never stand in for a batch of two."""
    from repliscope.backends.darknet.reference import DarknetLayers
    from repliscope.errors import RepliscopeError

    x = np.zeros((2, 3, 416, 416), np.float32)
    reference = DarknetLayers(cfg_path(), weights_path(), outputs=[{}])
    with pytest.raises(RepliscopeError, match=r"1 images' layer outputs for a batch of 2"):
        reference.run(x)
