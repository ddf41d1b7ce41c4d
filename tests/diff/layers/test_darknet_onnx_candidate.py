"""A user's ONNX file as the ``--candidate`` of a darknet manifest: its nodes are the units, paired by Darknet layer
name, compared with libdarknet in both modes; the route_20 concatenation swapped in the file fails at route_20 in
golden mode too (the ONNX graph tells which node feeds each unit), every other node passes. ~2 s: one conversion,
one diff."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from tests.diff.layers._darknet_port import converted_onnx, dog_outputs
from tests.yolo._assets import cfg_path, weights_path


@pytest.fixture(scope="module")
def dog() -> tuple[np.ndarray, list[dict[str, np.ndarray]]]:
    return dog_outputs()


def _diff(candidate: Path, dog: tuple[np.ndarray, list[dict[str, np.ndarray]]]):
    from repliscope.convert.darknet_candidate import verify_candidate

    x, outs = dog
    return verify_candidate(cfg_path(), weights_path(), x, str(candidate), "onnx", reference_outputs=outs)


def test_onnx_file_against_libdarknet(dog, tmp_path: Path) -> None:
    model = onnx.load(str(converted_onnx()))
    (concat,) = [n for n in model.graph.node if n.output[0] == "route_20"]
    assert list(concat.input) == ["upsample_19", "convolutional_8"]
    concat.input.reverse()
    swapped = tmp_path / "swapped.onnx"
    onnx.save(model, str(swapped))
    bad = _diff(swapped, dog)
    assert bad.candidate["format"] == "onnx" and bad.candidate["mapping_origin"] == "by Darknet layer name"
    assert bad.summary["golden"].compared == bad.summary["carried"].compared == 24
    assert bad.first_divergent["golden"] is not None and bad.first_divergent["golden"].path == "route_20"
    # every other node passes (the ONNX file is the conversion libdarknet's layers are verified against)
    assert [row.path for row in bad.layers if row.golden is not None and not row.golden.passed] == ["route_20"]
    assert max(row.golden.ratio for row in bad.layers if row.golden is not None and row.path != "route_20") < 0.5
    assert bad.first_divergent["carried"] is not None and bad.first_divergent["carried"].path == "route_20"
    assert (
        "'route_20': golden: fed as the candidate's graph wires it: its unit reads [convolutional_8, upsample_19], "
        "the reference [upsample_19, convolutional_8]" in bad.notes
    )
