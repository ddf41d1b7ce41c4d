"""The Keras candidate: units (a torch module <-> the Keras layers that take the same input), layouts, the
streaming forward, and the bug zoo: golden mode names exactly the layer that carries each porting bug."""

from __future__ import annotations

from functools import cache
from typing import Any

import numpy as np
import pytest

from repliscope.diff.base import CANDIDATES
from tests.convert import _helpers as H

TOLERANCE = 1e-4
"""Relative (max |err| / max |ref|) per layer: the correct port stays below 1e-6, every bug above 1e-2."""

# bug -> the torch module path the diff must name (independent of bugs.py's own ``carrier``)
BUG_LAYERS = {
    "bn_epsilon_one": "_blocks.5._bn1",
    "symmetric_padding": "_blocks.3._depthwise_conv",
    "swish": "_blocks.6._swish",
    "depthwise_transposed": "_blocks.9._depthwise_conv",
    "dropped_bias": "_fc",
    "bgr_input": "_conv_stem",
}
ALL_BN_BUG = "bn_epsilon_all"


@cache
def records() -> list[H.Record]:
    x, _ = H.foolbox_images()
    return H.capture(H.torch_lite0(), x[:2])


@cache
def candidate(bug_name: str | None = None) -> Any:
    from repliscope.backends.keras.candidate import KerasCandidate

    bug = H.bugs()[bug_name] if bug_name else None
    return KerasCandidate(*(H.build_converted(bug) if bug else H.converted()))


def test_registered_as_keras() -> None:
    from repliscope.backends.keras.candidate import KerasCandidate

    assert CANDIDATES.get("keras") is KerasCandidate


def test_every_reference_layer_is_mapped() -> None:
    errors = H.golden_errors(candidate(), records())
    assert list(errors) == [r.path for r in records()]
    assert len(errors) == 134
    assert {"_swish", "_swish#2", "_blocks.0._swish", "_blocks.1._swish#2"} <= set(errors)


@pytest.mark.parametrize(
    ("path", "layers"),
    [
        ("_conv_stem", ["stem_pad", "stem_conv"]),  # torch pads inside the conv module
        ("_blocks.3._depthwise_conv", ["block3_dw_pad", "block3_dw_conv"]),
        ("_blocks.4._expand_conv", ["block4_expand_conv"]),  # the residual Add before it is not absorbed
        ("_blocks.6._swish#2", ["block6_dw_relu"]),
        ("_dropout", ["flatten", "dropout"]),  # x.view(bs, -1) precedes torch's dropout
        ("_fc", ["fc"]),
    ],
)
def test_units(path: str, layers: list[str]) -> None:
    assert [layer.name for layer in candidate().unit(path)] == layers


def test_units_cover_the_nested_static_padding() -> None:
    from repliscope.diff.base import LayerInfo

    c = candidate()
    infos = [LayerInfo(p, "", "", 1) for p in ("_conv_stem.static_padding", "_conv_stem", "_bn0")]
    assert c.mapped_layers(infos) == ["_conv_stem", "_bn0"]
    assert c.covers("_conv_stem") == ["_conv_stem", "_conv_stem.static_padding"]
    assert c.covers("_bn0") == ["_bn0"]


def test_run_layer_takes_and_returns_the_reference_layout() -> None:
    rec = next(r for r in records() if r.path == "_blocks.1._depthwise_conv")
    out = candidate().run_layer(rec.path, rec.inputs)
    assert rec.inputs[0].shape == (2, 96, 112, 112) and out.shape == rec.output.shape == (2, 96, 56, 56)
    fc = next(r for r in records() if r.path == "_fc")
    assert candidate().run_layer("_fc", fc.inputs).shape == (2, 1000)


def test_correct_port_passes_every_layer_in_golden_mode() -> None:
    errors = H.golden_errors(candidate(), records())
    assert H.failing(errors, TOLERANCE) == []
    assert max(errors.values()) < 1e-5


def test_forward_layers_streams_mapped_outputs_in_order() -> None:
    x, _ = H.foolbox_images()
    wanted = ["_conv_stem", "_blocks.2._bn2", "_blocks.6._swish#2", "_avg_pooling", "_fc"]
    by_path = {r.path: r.output for r in records()}
    got = list(candidate().forward_layers(x[:2], wanted))
    assert [p for p, _ in got] == wanted
    for path, out in got:
        assert H.relative_error(out, by_path[path]) < 1e-4, path  # carried: errors add up, still tiny


def test_from_path_builds_the_port_and_converts_the_reference_weights() -> None:
    from repliscope.backends.keras.candidate import KerasCandidate

    H.require_keras()
    c = KerasCandidate.from_path(H.PORT_DIR, H.torch_lite0())
    rec = records()[0]
    assert H.relative_error(c.run_layer(rec.path, rec.inputs), rec.output) < 1e-6
    assert c.describe()["mapping"] == str(H.MAPPING)


@pytest.mark.parametrize("bug", sorted(BUG_LAYERS))
def test_bug_zoo_golden_names_exactly_the_buggy_layer(bug: str) -> None:
    assert H.bugs()[bug].carrier == BUG_LAYERS[bug]
    errors = H.golden_errors(candidate(bug), records())
    assert H.failing(errors, TOLERANCE) == [BUG_LAYERS[bug]]


def test_bug_zoo_wrong_epsilon_everywhere_fails_every_batch_norm_first_the_stem() -> None:
    errors = H.golden_errors(candidate(ALL_BN_BUG), records())
    failing = H.failing(errors, TOLERANCE)
    bn_paths = {r.path for r in records() if r.kind == "BatchNorm2d"}
    assert failing[0] == "_bn0"
    # only batch norms fail; those whose running variances dwarf 1e-3 hardly notice the epsilon
    assert set(failing) <= bn_paths and len(failing) > len(bn_paths) // 2


# -- the same through the layer-diff driver (repliscope.diff.layers.driver) ------------------------------------------


def _engine() -> tuple[Any, Any]:
    # the project's own modules: an import error must fail the test, never skip it
    from repliscope.diff.layers.driver import diff_layers
    from repliscope.diff.layers.torch_reference import TorchReference

    return diff_layers, TorchReference


@cache
def _engine_result(bug: str | None, modes: tuple[str, ...] = ("golden",)) -> Any:
    diff_layers, torch_reference = _engine()
    x, _ = H.foolbox_images()
    return diff_layers(torch_reference(H.torch_lite0()), candidate(bug), x[:2], modes=modes)


def test_engine_correct_port_passes_every_layer_in_both_modes() -> None:
    result = _engine_result(None, ("golden", "carried"))
    assert result.passed, result.first_divergent
    assert result.summary["golden"].compared == 133  # + the stem's static_padding, covered by _conv_stem
    assert result.not_compared == []


@pytest.mark.parametrize("bug", [*sorted(BUG_LAYERS), ALL_BN_BUG])
def test_engine_bug_zoo_first_divergent_is_the_buggy_layer(bug: str) -> None:
    result = _engine_result(bug)
    first = result.first_divergent["golden"]
    assert first is not None
    expected = "_bn0" if bug == ALL_BN_BUG else BUG_LAYERS[bug]
    assert first.path == expected
    failing = [row.path for row in result.layers if row.golden is not None and not row.golden.passed]
    if bug != ALL_BN_BUG:
        assert failing == [expected]
    else:
        assert len(failing) == 49


def test_relative_error_is_infinite_on_shape_mismatch() -> None:
    assert H.relative_error(np.zeros((1, 2)), np.zeros((2, 1))) == float("inf")
