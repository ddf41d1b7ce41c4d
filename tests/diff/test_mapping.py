"""User layer-name mappings: loader, validation, MappedCandidate."""

from __future__ import annotations

from pathlib import Path

import pytest

from repliscope.diff.layers.mapping import MappingError, load_mapping, validate_mapping


def test_load_in_file_order(tmp_path: Path) -> None:
    f = tmp_path / "m.yaml"
    f.write_text("_conv_stem: stem_conv\n_bn0: stem_bn\n")
    assert list(load_mapping(f).items()) == [("_conv_stem", "stem_conv"), ("_bn0", "stem_bn")]


@pytest.mark.parametrize(
    "text, match",
    [
        ("- a\n- b\n", "non-empty YAML mapping"),
        ("", "non-empty YAML mapping"),
        ("a: 1\nb: [x]\nc: ok\n", "2 entr"),
        ("a: [unclosed\n", "not valid YAML"),
    ],
)
def test_load_errors(tmp_path: Path, text: str, match: str) -> None:
    f = tmp_path / "m.yaml"
    f.write_text(text)
    with pytest.raises(MappingError, match=match):
        load_mapping(f)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(MappingError, match="cannot read"):
        load_mapping(tmp_path / "absent.yaml")


def test_unknown_names_are_all_listed_with_hints() -> None:
    mapping = {"_conv_stem": "stem", "_bn00": "bn", "_fc": "dense_9", "_xyz": "dense"}
    with pytest.raises(MappingError) as info:
        validate_mapping(mapping, ["_conv_stem", "_bn0", "_fc"], ["stem", "bn", "dense"])
    msg = str(info.value)
    assert "2 unknown reference path(s): '_bn00' (did you mean '_bn0'?), '_xyz'" in msg
    assert "1 unknown candidate layer(s): 'dense_9' (did you mean 'dense'?)" in msg


def test_doubly_mapped_candidate_layer() -> None:
    with pytest.raises(MappingError, match="mapped more than once: stem"):
        validate_mapping({"a": "stem", "b": "stem"}, ["a", "b"])


def test_valid_mapping_passes() -> None:
    validate_mapping({"a": "x"}, ["a", "b"], ["x", "y"])


def test_save_mapping_round_trips_awkward_names(tmp_path: Path) -> None:
    from repliscope.diff.layers.mapping import save_mapping

    mapping = {
        "/relu": "model/relu_1/Relu;model/bn_1/add",
        "_blocks.1._swish#2": "StatefulPartitionedCall_1:0",
        "layer1.0/add": "a: b # c",
        "yes": "'quoted' \"both\"",
        "1.5": "- dash",
    }
    file = tmp_path / "m.yaml"
    save_mapping(mapping, file, header="two\nlines")
    text = file.read_text()
    assert text.splitlines()[:2] == ["# two", "# lines"] and len(text.splitlines()) == 2 + len(mapping)
    assert list(load_mapping(file).items()) == list(mapping.items())
