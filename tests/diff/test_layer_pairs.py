"""The per-pair mapping file of a reference that names its own layers (libdarknet): partial pairing, nested unit
paths, a declared transform per pair, and every mistake in the file named with its file, line and allowed values."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest

from repliscope.diff.layers.mapping import MappingError, NamedCandidate, UnitInfo
from repliscope.diff.layers.pairs import ACTIVATIONS, KEYS, Pair, PairedCandidate, load_pairs, pair_units

REFERENCE = ["convolutional_0", "maxpool_1", "convolutional_2", "route_3", "yolo_4"]


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "m.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_pairs_plain_nested_and_transformed(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "convolutional_0: backbone/conv_0/bn\n"
        "convolutional_2:\n"
        "  unit: [backbone/conv_1/conv, backbone/conv_1/bn]\n"
        "  activation: leaky\n"
        "  layout: NCHW\n"
        "  scale: 0.5\n",
    )
    pairs = load_pairs(path, REFERENCE)
    assert pairs["convolutional_0"] == Pair("backbone/conv_0/bn", line=1)
    second = pairs["convolutional_2"]
    assert second.unit == "backbone/conv_1/bn" and second.units == ("backbone/conv_1/conv", "backbone/conv_1/bn")
    assert (second.activation, second.layout, second.scale, second.line) == ("leaky", "NCHW", 0.5, 2)
    assert second.transform == "layout NCHW, scale 0.5, activation leaky"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "convolutional_0:\n  unit: a\n  activaton: leaky\n",
            r"m.yaml:3: unknown key 'activaton' in the pair of 'convolutional_0' \(did you mean 'activation'\?\) "
            r"\(allowed: unit, activation, layout, scale\)",
        ),
        (
            "convolutional_0: {unit: a, activation: swish}\n",
            r"m.yaml:1: 'convolutional_0.activation' is 'swish' \(allowed: linear, leaky, relu, logistic, tanh\)",
        ),
        (
            "convolutional_0: {unit: a, layout: NWHC}\n",
            r"m.yaml:1: 'convolutional_0.layout' is 'NWHC' \(allowed: NCHW, NHWC\)",
        ),
        (
            "convolutional_0: {unit: a, scale: -2}\n",
            r"m.yaml:1: 'convolutional_0.scale' is '-2' \(allowed: a positive number\)",
        ),
        (
            "convolutional_0: {unit: a, scale: .nan}\n",
            r"'convolutional_0.scale' is '.nan' \(allowed: a positive number\)",
        ),
        ("convolutional_0: {activation: leaky}\n", r"m.yaml:1: the pair of 'convolutional_0' names no candidate unit"),
        (
            "maxpool_1: a\nconvolutional_7: b\n",
            r"m.yaml:2: --mapping names the reference layer 'convolutional_7', which the reference does not have "
            r"\(did you mean 'convolutional_2'\?\) \(layers: convolutional_0 … yolo_4\)",
        ),
        ("maxpool_1: a\nmaxpool_1: b\n", r"m.yaml:2: 'maxpool_1' is paired twice \(first at line 1\)"),
        (
            "maxpool_1: a\nroute_3: a\n",
            r"m.yaml:2: the candidate unit 'a' is paired with 'maxpool_1' and 'route_3'",
        ),
        ("- convolutional_0\n", r"a layer mapping is a non-empty YAML mapping"),
        ("convolutional_0: [a, b]\n", r"m.yaml:1: 'convolutional_0' is paired with a unit name or a mapping of unit"),
        ("convolutional_0: {unit: []}\n", r"m.yaml:1: 'convolutional_0.unit' is a unit name or a non-empty list"),
    ],
)
def test_every_mistake_names_file_line_and_allowed_values(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(MappingError, match=message):
        load_pairs(_write(tmp_path, text), REFERENCE)


def test_a_yaml_tag_is_never_constructed(tmp_path: Path) -> None:
    """The file is composed by the safe loader: a python/object tag is an error, nothing is run."""
    marker = tmp_path / "ran"
    text = f"convolutional_0: !!python/object/apply:os.system ['touch {marker}']\n"
    with pytest.raises(MappingError):
        load_pairs(_write(tmp_path, text), REFERENCE)
    assert not marker.exists()


def test_partial_pairing_skips_unpaired_reference_layers() -> None:
    pairs, skipped = pair_units(REFERENCE, ["convolutional_0", "x/y", "yolo_4"], {"convolutional_2": Pair("x/y")}, "c")
    assert list(pairs) == ["convolutional_0", "convolutional_2", "yolo_4"]
    assert skipped == ["maxpool_1", "route_3"]
    with pytest.raises(
        MappingError,
        match=r"c: the candidate has no unit for 1 pair\(s\): line 4: 'route_3: x/z' \(did you mean 'x/y'\?\)",
    ):
        pair_units(REFERENCE, ["x/y"], {"route_3": Pair("x/z", line=4)}, "c")
    with pytest.raises(MappingError, match="no candidate unit is named after a reference layer"):
        pair_units(REFERENCE, ["a", "b"], None, "c")


class _Nhwc(NamedCandidate):
    """A fake NHWC candidate: unit 'u' is x * 2 (in its own layout), 'v' adds 1; records what it was fed."""

    name = "fake"
    layout = "NHWC"
    output_layout = "NHWC"
    spans_gaps = False

    def __init__(self) -> None:
        super().__init__()
        self.fed: list[np.ndarray] = []

    def units(self, x: np.ndarray) -> list[UnitInfo]:
        return [UnitInfo("u", "Mul", (1, 2, 3, 4)), UnitInfo("v", "Add", (1, 2, 3, 4))]

    def _names(self) -> list[str]:
        return ["u", "v"]

    def run_layer(self, path: str, inputs: Sequence[np.ndarray]) -> np.ndarray:
        own = self.to_candidate_layout(inputs[0])
        self.fed.append(own)
        return own * 2 if path == "u" else own + 1

    def forward_layers(self, x: np.ndarray, paths: Iterable[str]) -> Iterator[tuple[str, np.ndarray]]:
        own = self.to_candidate_layout(x)
        for p in paths:
            yield p, own * 2 if p == "u" else own * 2 + 1


def test_paired_candidate_applies_layout_scale_and_activation() -> None:
    x = np.arange(-12, 12, dtype=np.float32).reshape(1, 2, 3, 4)  # NCHW
    inner = _Nhwc()
    pairs = {
        "convolutional_0": Pair("u", activation="leaky", scale=0.5),
        "convolutional_2": Pair("v", layout="NCHW", chain=("u", "v")),
    }
    cand = PairedCandidate(inner, pairs, REFERENCE, {"candidate": "fake"}, skipped=["maxpool_1", "route_3", "yolo_4"])
    # the default layout (the candidate's NHWC): transposed back, scaled, then the activation
    out = cand.run_layer("convolutional_0", [x])
    np.testing.assert_array_equal(out, ACTIVATIONS["leaky"](x * 2 * 0.5))
    np.testing.assert_array_equal(inner.fed[-1], x.transpose(0, 2, 3, 1))
    # declared NCHW inside an NHWC candidate: the unit gets the array in NCHW and its output is not transposed
    inner.fed.clear()
    out = cand.run_layer("convolutional_2", [x])
    np.testing.assert_array_equal(inner.fed[0], x)
    np.testing.assert_array_equal(out, x * 2 + 1)
    carried = dict(cand.forward_layers(x, ["convolutional_0", "convolutional_2"]))
    np.testing.assert_array_equal(carried["convolutional_0"], ACTIVATIONS["leaky"](x))
    np.testing.assert_array_equal(carried["convolutional_2"], (x.transpose(0, 2, 3, 1) * 2 + 1))
    assert [u.path for u in cand.unmatched()] == ["maxpool_1", "route_3", "yolo_4"]
    assert "skipped (not compared): maxpool_1, route_3, yolo_4" in " ".join(cand.notes)
    assert "'convolutional_0' <- 'u': scale 0.5, activation leaky" in cand.notes
    assert set(KEYS) == {"unit", "activation", "layout", "scale"}


def test_a_unit_covers_only_its_own_chain_in_a_branching_graph() -> None:
    """yolov3-tiny's head: conv_18 reads route_17 (a copy of layer 13), not yolo_16 that precedes it in order;
    conv_21 reads route_20, which reads upsample_19 and conv_8. Golden mode feeds each unit the input of the first
    layer of its own chain, never another branch's."""
    from repliscope.diff.layers.auto_mapping import covers_for

    reference = ["conv_8", "conv_13", "conv_15", "yolo_16", "route_17", "conv_18", "upsample_19", "route_20", "conv_21"]
    producers = {
        "conv_13": ["conv_8"], "conv_15": ["conv_13"], "yolo_16": ["conv_15"], "route_17": ["conv_13"],
        "conv_18": ["route_17"], "upsample_19": ["conv_18"], "route_20": ["upsample_19", "conv_8"],
        "conv_21": ["route_20"],
    }  # fmt: skip
    mapped = ["conv_8", "conv_13", "conv_15", "conv_18", "conv_21"]
    covers = covers_for(reference, mapped, producers)
    assert covers["conv_18"] == ["route_17", "conv_18"]  # not yolo_16, which only precedes it
    assert covers["conv_21"] == ["route_20", "conv_21"]  # route_20 joins two branches: the chain stops there
    assert not any("yolo_16" in group or "upsample_19" in group for group in covers.values())
    assert covers_for(reference, mapped)["conv_18"][0] == "yolo_16"  # without producers: reference order
