"""softmax / topk / labels: values against scipy, tie-breaking, batched equals per-row."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.special

from repliscope.errors import OpSpecError, RepliscopeError
from repliscope.ops import BuildContext, PostOp, Predictions, build_op
from tests.ops._helpers import CTX


def post(ctx: BuildContext = CTX, **spec: object) -> PostOp:
    op = build_op(spec, "post", ctx)
    assert isinstance(op, PostOp)
    return op


def logits(n: int = 4, c: int = 10, seed: int = 0) -> np.ndarray:
    return (np.random.default_rng(seed).normal(0, 5, (n, c))).astype(np.float32)


class TestSoftmax:
    @pytest.mark.parametrize("axis", [-1, 1])
    def test_matches_scipy_and_sums_to_one(self, axis: int) -> None:
        x = logits()
        before = x.copy()
        out = post(op="softmax", axis=axis)(Predictions(x))
        np.testing.assert_array_equal(x, before)
        assert out.is_probability and out.scores.dtype == np.float32
        np.testing.assert_allclose(out.scores, scipy.special.softmax(x.astype(np.float64), axis=1), rtol=1e-6)
        np.testing.assert_allclose(out.scores.sum(axis=1), 1.0, rtol=1e-6)

    def test_numerically_stable(self) -> None:
        x = np.array([[1000.0, 1000.0, -1000.0], [-1e4, 0.0, 1e4]], dtype=np.float32)
        out = post(op="softmax", axis=-1)(Predictions(x)).scores
        assert np.isfinite(out).all()
        np.testing.assert_allclose(out, [[0.5, 0.5, 0.0], [0.0, 0.0, 1.0]])

    def test_batched_equals_per_row(self) -> None:
        x, op = logits(6), post(op="softmax", axis=1)
        rows = np.concatenate([op(Predictions(x[i : i + 1])).scores for i in range(6)])
        np.testing.assert_array_equal(op(Predictions(x)).scores, rows)

    def test_axis_must_be_class_axis(self) -> None:
        with pytest.raises(OpSpecError) as exc:
            post(op="softmax", axis=0)
        assert exc.value.key == "axis" and exc.value.allowed == ["-1", "1"]


class TestTopK:
    def test_values(self) -> None:
        x = np.array([[0.1, 0.5, 0.2, 0.9], [3.0, 2.0, 1.0, 0.0]], dtype=np.float32)
        out = post(op="topk", k=2)(Predictions(x))
        assert out.topk_indices is not None and out.topk_scores is not None
        assert out.topk_indices.dtype == np.int64
        np.testing.assert_array_equal(out.topk_indices, [[3, 1], [0, 1]])
        np.testing.assert_array_equal(out.topk_scores, np.array([[0.9, 0.5], [3.0, 2.0]], dtype=np.float32))
        np.testing.assert_array_equal(out.scores, x)

    def test_ties_go_to_lower_index(self) -> None:
        x = np.array([[0.2, 0.7, 0.1, 0.7, 0.7, 0.2]], dtype=np.float32)
        out = post(op="topk", k=5)(Predictions(x))
        assert out.topk_indices is not None
        np.testing.assert_array_equal(out.topk_indices, [[1, 3, 4, 0, 5]])

    def test_agrees_with_full_sort(self) -> None:
        x = logits(8, 50)
        out = post(op="topk", k=5)(Predictions(x))
        assert out.topk_indices is not None
        np.testing.assert_array_equal(out.topk_indices, np.argsort(-x, axis=1)[:, :5])

    def test_k_larger_than_classes(self) -> None:
        with pytest.raises(RepliscopeError, match="only 10 classes"):
            post(op="topk", k=11)(Predictions(logits()))

    @pytest.mark.parametrize("k", [0, -1])
    def test_k_positive(self, k: int) -> None:
        with pytest.raises(OpSpecError) as exc:
            post(op="topk", k=k)
        assert exc.value.key == "k"


class TestLabels:
    def test_names(self) -> None:
        preds = post(op="topk", k=2)(Predictions(np.array([[0.1, 0.5, 0.2]], dtype=np.float32)))
        out = post(BuildContext(class_names=("cat", "dog", "eel")), op="labels")(preds)
        assert out.topk_labels == [["dog", "eel"]]

    def test_needs_class_names_at_build(self) -> None:
        with pytest.raises(OpSpecError, match="top-level `labels` source") as exc:
            post(BuildContext(), op="labels")
        assert exc.value.key == "op"

    def test_needs_topk_first(self) -> None:
        with pytest.raises(RepliscopeError, match="topk"):
            post(op="labels")(Predictions(logits()))

    def test_no_parameters(self) -> None:
        with pytest.raises(OpSpecError, match="unknown parameter") as exc:
            post(op="labels", k=3)
        assert exc.value.key == "k" and exc.value.allowed == []
