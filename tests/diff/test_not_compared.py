"""One list of what a layer diff did not compare: ``uncompared``; ``not_compared`` (its module layers) is derived."""

from __future__ import annotations

from repliscope.diff.layers.layer_result import LayerDiffResult, NotCompared
from repliscope.diff.tolerance import TolerancePolicy


def _result(**extra: object) -> LayerDiffResult:
    return LayerDiffResult(
        reference={"framework": "torch"},
        candidate={"candidate": "onnxruntime"},
        modes=["golden"],
        input_shape=[1, 3],
        input_dtype="float32",
        tolerance=TolerancePolicy(),
        formula="f",
        layers=[],
        reference_layers=2,
        first_divergent={"golden": None},
        summary={},
        seconds=0.0,
        uncompared=[
            NotCompared(path="fc", kind="Linear", source="m.py:3", reason="not mapped"),
            NotCompared(path="layer1/add", kind="add", source="m.py:9", reason="not mapped", op="add"),
        ],
        **extra,
    )


def test_not_compared_is_the_module_layers_of_uncompared_and_stays_in_the_json() -> None:
    result = _result()
    assert result.not_compared == ["fc"]
    dumped = result.model_dump(mode="json")
    assert dumped["not_compared"] == ["fc"] and [u["op"] for u in dumped["uncompared"]] == ["", "add"]
    assert LayerDiffResult.model_validate(dumped) == result  # a stored dump loads back


def test_a_given_not_compared_is_dropped_for_the_derived_one() -> None:
    assert _result(not_compared=["stale"]).not_compared == ["fc"]
