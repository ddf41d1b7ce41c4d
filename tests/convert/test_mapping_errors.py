"""The converter's refusals: every offender listed, with the shapes or the allowed values."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from repliscope.convert import ConversionError, MappingError, load_mapping
from repliscope.convert.keras_target import convert_state_dict, load_port, plan_conversion
from repliscope.convert.mapping import compile_pattern
from tests.convert import _helpers as H


def _raw() -> dict[str, Any]:
    data = yaml.safe_load(H.MAPPING.read_text())
    assert isinstance(data, dict)
    return data


def _problems(mapping: Any, model: Any | None = None) -> tuple[dict[str, list[str]], str]:
    model = model if model is not None else H.converted()[0]
    with pytest.raises(ConversionError) as info:
        convert_state_dict(H.torch_lite0().state_dict(), model, mapping, H.torch_lite0())
    return info.value.problems, str(info.value)


def test_pattern_placeholders_match_one_component() -> None:
    rx = compile_pattern("_blocks.{i}._swish")
    assert rx.fullmatch("_blocks.12._swish")["i"] == "12"  # type: ignore[index]
    assert rx.fullmatch("_blocks.1.2._swish") is None
    assert rx.fullmatch("_blocks.3._swish#2") is None
    assert compile_pattern("_blocks.*._bn1").fullmatch("_blocks.7._bn1")
    assert compile_pattern(r"re:_blocks\.(?P<i>\d+)\._bn1").fullmatch("_blocks.7._bn1")


def test_unknown_top_level_key_is_an_error_naming_the_allowed_keys() -> None:
    data = _raw() | {"layer_rules": []}
    with pytest.raises(MappingError, match=r"field 'layer_rules': unknown key \(allowed: .*layers"):
        load_mapping(data)


def test_unknown_rule_key_and_unknown_kind_are_errors() -> None:
    data = _raw()
    data["layers"][0] = {"torch": "_conv_stem", "keras": "stem_conv", "kind": "conv", "transpose": [1, 0]}
    data["layers"][1] = {"torch": "_bn0", "keras": "stem_bn", "kind": "batchnorm"}
    with pytest.raises(MappingError) as info:
        load_mapping(data)
    text = str(info.value)
    assert "field 'layers.0.transpose': unknown key (allowed: torch, keras, kind, permute)" in text
    assert "field 'layers.1.kind'" in text and "'batch_norm'" in text


def test_permute_of_a_tensor_the_kind_does_not_convert_is_an_error() -> None:
    data = _raw()
    data["layers"].insert(0, {"torch": "_fc", "keras": "fc", "kind": "dense", "permute": {"scale": [0]}})
    with pytest.raises(MappingError, match=r"permute names tensor 'scale'.*converts: weight, bias"):
        load_mapping(data)


def test_missing_rule_lists_every_unmapped_tensor_and_every_unassigned_weight() -> None:
    data = _raw()
    data["layers"] = [r for r in data["layers"] if r["torch"] != "_blocks.{i}._bn1"]
    problems, text = _problems(load_mapping(data))
    expected = [f"_blocks.{i}._bn1.{t}" for i in range(16) for t in ("weight", "bias", "running_mean", "running_var")]
    assert len(problems["unmapped"]) == 64
    for key in expected:
        assert key in text
    assert "_blocks.3._bn1.running_var (144,)" in text  # with its shape
    assert "_blocks.0._bn1.num_batches_tracked" not in text  # ignored by the mapping's glob
    assert len(problems["unassigned"]) == 64
    assert "block15_dw_bn/moving_variance (1152,)" in text
    assert set(problems) == {"unmapped", "unassigned"}


def test_duplicate_target_is_an_error_listing_the_sources() -> None:
    data = _raw()
    data["layers"].insert(0, {"torch": "_blocks.{i}._project_conv", "keras": "block1_project_conv", "kind": "conv"})
    problems, text = _problems(load_mapping(data))
    assert problems["duplicate_target"] == [
        "block1_project_conv/kernel <- " + ", ".join(f"_blocks.{i}._project_conv.weight" for i in range(16))
    ]
    assert "Keras weights mapped more than once (1)" in text
    assert len(problems["unassigned"]) == 15  # every other block's project conv is left empty


def test_shape_mismatch_shows_source_transformed_and_target_shapes() -> None:
    mapping = load_mapping(H.MAPPING).with_rules_first(
        [
            {"torch": "_conv_stem", "keras": "stem_conv", "kind": "conv", "permute": {"weight": [3, 2, 0, 1]}},
            {"torch": "_blocks.5._depthwise_conv", "keras": "block5_dw_conv", "kind": "conv"},
        ]
    )
    problems, text = _problems(mapping)
    assert problems["shape"] == [
        "_conv_stem.weight (32, 3, 3, 3) -> transformed by permute [3, 2, 0, 1] (3, 3, 32, 3) vs "
        "stem_conv/kernel (3, 3, 3, 32)",
        "_blocks.5._depthwise_conv.weight (240, 1, 3, 3) -> transformed by permute [2, 3, 1, 0] (3, 3, 1, 240) vs "
        "block5_dw_conv/kernel (3, 3, 240, 1)",
    ]
    assert "shape mismatches (source -> transformed vs target) (2)" in text


def test_a_dropped_bias_cannot_slip_through_the_strict_mapping() -> None:
    model = load_port(H.PORT_DIR, H.mapping(), fc_use_bias=False)
    problems, _ = _problems(H.mapping(), model)
    assert problems == {"missing_target": ["_fc.bias -> fc/bias: layer 'fc' has kernel"]}


def test_wrong_batch_norm_epsilon_is_refused_by_check_and_fixed_by_set() -> None:
    model = load_port(H.PORT_DIR, H.mapping(), bn_epsilon=1e-5)
    problems, _ = _problems(H.mapping(), model)
    assert list(problems) == ["epsilon"] and len(problems["epsilon"]) == 49
    assert "_bn0 eps=0.001 vs stem_bn epsilon=1e-05" in problems["epsilon"]
    report = convert_state_dict(
        H.torch_lite0().state_dict(), model, H.mapping().with_changes(batch_norm_epsilon="set"), H.torch_lite0()
    )
    assert len(report.epsilon_set) == 49
    assert model.get_layer("block7_dw_bn").epsilon == pytest.approx(1e-3)


def test_plan_without_torch_module_notes_that_epsilons_were_not_checked() -> None:
    plan, report, problems = plan_conversion(H.torch_lite0().state_dict(), H.converted()[0], H.mapping())
    assert not any(problems.values())
    assert len(plan) == 247 and len(report.ignored) == 49
    assert report.notes == ["batch-norm epsilons not checked: no torch module given (a state_dict holds none)"]


def test_mapping_file_errors_name_the_line(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    shipped = Path(__file__).resolve().parents[2] / "examples" / "keras_efficientnet_lite" / "mapping.yaml"
    lines = shipped.read_text().splitlines()
    first_rule = next(i for i, ln in enumerate(lines) if ln.lstrip().startswith("- {torch: _conv_stem"))
    lines[first_rule] = lines[first_rule].replace("kind: conv}", "kind: conv, transpose: true}")
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(MappingError, match=rf"field 'layers\.0\.transpose' \(line {first_rule + 1}\): unknown key"):
        load_mapping(path)
