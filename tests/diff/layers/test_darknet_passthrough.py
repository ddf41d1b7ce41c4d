"""Two Darknet layers paired with one candidate unit: accepted when one passes the other's output on unchanged
(``route_17``, ``layers = -4``, a one-input route of ``convolutional_13``: a hand-written Keras port has no layer for
it), the unit compared once; refused before anything runs, with the reason, otherwise. ~0.5 s per diff after one
conversion and one libdarknet run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from repliscope.cli.main import app
from tests.diff.layers._darknet_port import converted_port, dog_outputs, drop_passthrough_route, edit_port
from tests.yolo._assets import MANIFEST, cfg_path, seed_cache, weights_path

pytest.importorskip("keras")


@pytest.fixture(scope="module")
def port(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return edit_port(converted_port(), tmp_path_factory.mktemp("port") / "no-route.keras", drop_passthrough_route)


def test_a_passthrough_shares_the_unit_of_the_layer_it_passes_on(port: Path, tmp_path: Path) -> None:
    from repliscope.convert.darknet_candidate import verify_candidate

    x, outs = dog_outputs()
    mapping = tmp_path / "map.yaml"
    mapping.write_text("route_17: convolutional_13\nconvolutional_13: convolutional_13\n")
    r = verify_candidate(
        cfg_path(), weights_path(), x, str(port), "keras", mapping_file=mapping, reference_outputs=outs
    )
    assert r.passed and r.summary["golden"].passed == r.summary["carried"].passed == 23
    assert r.summary["golden"].reference_units == 24 and not r.uncompared  # route_17 inside convolutional_18's row
    assert next(row.covers for row in r.layers if row.path == "convolutional_18") == ["route_17", "convolutional_18"]
    assert r.candidate["shared"] == {"route_17": "convolutional_13"}
    assert (
        "'route_17' shares the candidate unit 'convolutional_13' with 'convolutional_13': it passes "
        "'convolutional_13''s output on unchanged (a one-input route), so the unit is compared once, as "
        "'convolutional_13'" in r.notes
    )


def test_two_layers_of_different_outputs_on_one_unit_are_refused_up_front(port: Path, tmp_path: Path) -> None:
    """From the command line, with a candidate file that does not even exist: the mapping is refused first."""
    from repliscope.diff.layers.mapping import MappingError
    from repliscope.diff.layers.pairs import Pair, pair_layers

    seed_cache()
    mapping = tmp_path / "map.yaml"
    mapping.write_text("convolutional_12: convolutional_12\nroute_17: convolutional_12\n")
    args = ["diff", str(MANIFEST), "--candidate", str(tmp_path / "absent.keras"), "--candidate-format", "keras"]
    res = CliRunner().invoke(app, [*args, "--mapping", str(mapping), "--layers", "--json", "--no-store"])
    assert res.exit_code == 2, res.output
    assert json.loads(res.stdout)["error"] == (
        f"{mapping}:2: the candidate unit 'convolutional_12' is paired with 'convolutional_12' and 'route_17'; a unit "
        "is paired with one reference layer, or with a layer and the one-input routes that pass its output on "
        "unchanged (route_17 passes convolutional_13 through), and 'route_17' is no pass-through of "
        "'convolutional_12'"
    )
    declared = {"convolutional_12": Pair("convolutional_12", line=1), "route_17": Pair("convolutional_12", line=2)}
    with pytest.raises(MappingError, match=r"^p:2: the candidate unit 'convolutional_12' is paired with"):
        pair_layers(["convolutional_12", "route_17"], ["convolutional_12"], declared, "p", {"route_17": "x"})
    # without the pass-throughs the pairing is as before: a named layer whose unit is taken is skipped
    found = pair_layers(
        ["convolutional_13", "route_17"], ["convolutional_13"], {"route_17": Pair("convolutional_13")}, "p"
    )
    assert list(found.pairs) == ["route_17"] and found.skipped == ["convolutional_13"] and not found.shared
