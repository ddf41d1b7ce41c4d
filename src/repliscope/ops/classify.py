"""Classification post-processing: ``softmax``, ``topk``, ``labels``. Each returns a new Predictions."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Literal

import numpy as np
from pydantic import Field

from repliscope.errors import OpSpecError, RepliscopeError
from repliscope.ops.base import OPS, BuildContext, OpParams, PostOp, Predictions


def _scores_2d(op: str, preds: Predictions) -> np.ndarray:
    if preds.scores.ndim != 2:
        raise RepliscopeError(f"'{op}' needs scores of shape (N, C), got {preds.scores.shape}")
    return preds.scores


class SoftmaxParams(OpParams):
    axis: Literal[-1, 1]
    """The class axis of the (N, C) scores."""


@OPS.register("softmax")
class Softmax(PostOp):
    """Numerically stable softmax over the class axis: ``exp(x - max) / sum(exp(x - max))`` in float32.

    In: scores (N, C), logits. Out: scores (N, C) float32 summing to 1 per row, ``is_probability=True``.
    Applied as the manifest says, even to scores that already are probabilities.
    """

    name = "softmax"
    Params = SoftmaxParams
    params: SoftmaxParams

    def __call__(self, preds: Predictions) -> Predictions:
        x = _scores_2d(self.name, preds).astype(np.float32)
        shifted = x - x.max(axis=1, keepdims=True)
        e = np.exp(shifted)
        return dataclasses.replace(preds, scores=e / e.sum(axis=1, keepdims=True), is_probability=True)


class TopKParams(OpParams):
    k: Annotated[int, Field(ge=1)]


@OPS.register("topk")
class TopK(PostOp):
    """The k best classes per row, best first; ties go to the LOWER class index (stable sort of -score).

    In: scores (N, C) with C >= k. Out: ``topk_indices`` (N, k) int64 and ``topk_scores`` (N, k) (scores'
    dtype); ``scores`` unchanged.
    """

    name = "topk"
    Params = TopKParams
    params: TopKParams

    def __call__(self, preds: Predictions) -> Predictions:
        if preds.detections is not None:
            raise RepliscopeError("'topk' is a classification op but these are detection predictions (boxes)")
        scores = _scores_2d(self.name, preds)
        k = self.params.k
        if k > scores.shape[1]:
            raise RepliscopeError(f"'topk' with k={k} but the model has only {scores.shape[1]} classes")
        order = np.argsort(-scores, axis=1, kind="stable")[:, :k].astype(np.int64)
        top_scores = np.take_along_axis(scores, order, axis=1)
        return dataclasses.replace(preds, topk_indices=order, topk_scores=top_scores)


class LabelsParams(OpParams):
    pass


@OPS.register("labels")
class Labels(PostOp):
    """Class names for ``topk_indices`` from the manifest's top-level ``labels`` source.

    In: Predictions after ``topk``. Out: ``topk_labels`` (N lists of k strings); the rest unchanged.
    Built with :meth:`from_context` (needs ``BuildContext.class_names``).
    """

    name = "labels"
    Params = LabelsParams
    params: LabelsParams

    def __init__(self, params: LabelsParams, class_names: tuple[str, ...] = ()) -> None:
        super().__init__(params)
        self.class_names = tuple(class_names)

    @classmethod
    def from_context(cls, params: LabelsParams, context: BuildContext) -> Labels:
        if context.class_names is None:
            raise OpSpecError("op", "'labels' needs class names: the manifest needs a top-level `labels` source")
        return cls(params, context.class_names)

    def __call__(self, preds: Predictions) -> Predictions:
        if preds.topk_indices is None:
            raise RepliscopeError("'labels' needs top-k indices: put 'topk' before it")
        n = len(self.class_names)
        if preds.topk_indices.size and int(preds.topk_indices.max()) >= n:
            raise RepliscopeError(
                f"'labels' has {n} class names but the model predicted class {int(preds.topk_indices.max())}"
            )
        names = [[self.class_names[i] for i in row] for row in preds.topk_indices.tolist()]
        return dataclasses.replace(preds, topk_labels=names)
