"""Golden mode cannot be fooled by wiring: each candidate unit is fed libdarknet's outputs of the layers that
feed it IN THE CANDIDATE'S GRAPH, so a Keras port of YOLOv3-tiny that concatenates ``route_20``'s inputs the other
way round fails at ``route_20`` in golden mode too (it passed 24/24, error 0, when golden fed the cfg's order).

One conversion (``repliscope convert --to keras``, ~3 s with Keras's start-up) and one libdarknet run on ``dog.jpg``
per module; each diff then takes ~0.4 s."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.diff.layers._darknet_port import (
    converted_port,
    dog_outputs,
    edit_port,
    swap_route_inputs,
)
from tests.yolo._assets import cfg_path, weights_path

pytest.importorskip("keras")


@pytest.fixture(scope="module")
def port() -> Path:
    return converted_port()


@pytest.fixture(scope="module")
def dog() -> tuple[np.ndarray, list[dict[str, np.ndarray]]]:
    return dog_outputs()


def _diff(port: Path, dog: tuple[np.ndarray, list[dict[str, np.ndarray]]], **kwargs):
    from repliscope.convert.darknet_candidate import verify_keras_file

    x, outs = dog
    return verify_keras_file(cfg_path(), weights_path(), x, port, reference_outputs=outs, **kwargs)


def test_swapped_concat_fails_in_golden_mode_where_it_is_made(
    port: Path, dog, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from repliscope.cli.diff_output import print_layer_diff, worst_layers

    r = _diff(edit_port(port, tmp_path / "swapped.keras", swap_route_inputs), dog)
    assert not r.passed and r.summary["golden"].passed == 23  # the converted file passes 24/24 (tests/yolo)
    # every other unit reads what libdarknet's layer reads: only route_20 is fed by the file's own wiring
    assert [n for n in r.notes if "wires it" in n] == [
        "'route_20': golden: fed as the candidate's graph wires it: its unit reads [convolutional_8, upsample_19], "
        "the reference [upsample_19, convolutional_8]"
    ]
    golden, carried = r.first_divergent["golden"], r.first_divergent["carried"]
    assert golden is not None and carried is not None
    assert golden.path == carried.path == "route_20"
    assert golden.ratio > 1e5 and golden.max_abs == pytest.approx(carried.max_abs)  # measured 16.82, 1.06e6 x tol
    # golden feeds every other unit what it reads: only the swapped concatenation fails
    assert [row.path for row in r.layers if row.golden is not None and not row.golden.passed] == ["route_20"]
    # carried sees the error carried into the three layers after it; the worst-layers table ranks by the larger
    # of the two modes, so they come right after route_20 although golden passes them
    carried_only = {row.path for row in r.layers if row.carried is not None and not row.carried.passed} - {"route_20"}
    assert carried_only == {"convolutional_21", "convolutional_22", "yolo_23"}
    worst = [row.path for row in worst_layers(r, 4)]
    assert worst[0] == "route_20" and set(worst[1:]) == carried_only
    print_layer_diff(r)  # the notes as written: their brackets are no console markup
    printed = " ".join(capsys.readouterr().out.split())
    assert "its unit reads [convolutional_8, upsample_19], the reference [upsample_19, convolutional_8]" in printed


def test_a_unit_wired_to_a_later_layer_is_divergent(port: Path, dog) -> None:
    """The two yolo heads paired crosswise: the unit paired with ``yolo_16`` reads ``convolutional_22``, which
    libdarknet computes after ``yolo_16``; golden cannot feed it and calls it divergent, with the reason."""
    r = _diff(port, dog, mapping={"yolo_16": "yolo_23", "yolo_23": "yolo_16"}, modes=("golden",))
    row = next(row for row in r.layers if row.path == "yolo_16")
    assert row.golden is not None and not row.golden.passed
    assert (
        "golden: the candidate's unit reads the output of convolutional_22, which the reference computes after "
        "it: it is wired to a later layer" in row.notes
    )
    assert r.first_divergent["golden"] is not None and r.first_divergent["golden"].path == "yolo_16"
