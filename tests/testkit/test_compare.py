"""Output flattening and the difference report shared by every check."""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from repliscope.testkit._compare import compare_arrays, compare_named, flatten_outputs

Pair = namedtuple("Pair", ["mean", "var"])


def test_flatten_names_read_like_python() -> None:
    a, b = np.zeros(2), np.ones(3)
    out = {"logits": a, "aux": [b, None, Pair(a, b)], "name": "ignored"}
    names = [name for name, _ in flatten_outputs(out)]
    assert names == ["output['logits']", "output['aux'][0]", "output['aux'][2].mean", "output['aux'][2].var"]
    assert flatten_outputs(a) == [("output", a)]


def test_exact_comparison_reports_count_position_and_values() -> None:
    expected = np.arange(6, dtype=np.float32).reshape(2, 3)
    actual = expected.copy()
    actual[1, 2] += 0.5
    line = compare_arrays(expected, actual, atol=0, rtol=0, exact=True)
    assert line == (
        "1 of 6 elements differ (bit-identical required); max abs diff 0.5 at (1, 2) "
        "(expected 5, got 5.5); max rel diff 0.1"
    )
    assert compare_arrays(expected, expected.astype(np.float64), atol=0, rtol=0, exact=True) == (
        "dtype float64 differs from float32"
    )
    assert compare_arrays(expected, expected.T, atol=0, rtol=0, exact=False) == "shape (3, 2) differs from (2, 3)"


def test_nan_handling_and_tolerance() -> None:
    expected = np.array([1.0, np.nan, 3.0])
    assert compare_arrays(expected, expected.copy(), atol=0, rtol=0, exact=True) == ""
    assert compare_arrays(expected, expected + 1e-7, atol=1e-6, rtol=0, exact=False) == ""
    line = compare_arrays(expected, np.array([1.0, np.nan, np.inf]), atol=1e-6, rtol=0, exact=False)
    assert line.startswith("1 of 3 elements differ beyond atol=1e-06, rtol=0")
    assert line.endswith("1 NaN/Inf mismatch(es), first at (2,) (expected 3, got inf)")


def test_compare_named_counts_and_labels() -> None:
    a = np.zeros(2)
    problems = compare_named([("output[0]", a), ("output[1]", a)], [("y", a + 1)], atol=0.5, actual_label="onnxruntime")
    assert problems[0] == "2 output tensors (output[0], output[1]) in expected, 1 (y) in onnxruntime"
    assert problems[1].startswith("output[0] / onnxruntime 'y': 2 of 2 elements differ beyond atol=0.5")
