"""``detections_from_outputs``: per-sample :class:`Boxes` from a model's named box / score / class outputs."""

from __future__ import annotations

from typing import Any

import numpy as np

from repliscope.errors import RepliscopeError
from repliscope.ops.base import OPS, Boxes, OpParams, PostOp, Predictions
from repliscope.ops.detection._common import parse_format, require_output, with_detections


class DetectionsFromOutputsParams(OpParams):
    boxes: str
    """Output name of the boxes, (N, K, 4)."""
    scores: str
    """Output name of the scores, (N, K)."""
    classes: str | None
    """Output name of the class ids, (N, K) (float ids must be whole numbers); null: a single-class model, every
    class id 0."""
    count: str | None
    """Output name of the valid-detection count, (N,) or (N, 1) (TF OD API ``num_detections``): only the
    first ``count`` rows are read; null: all K rows."""
    format: dict[str, Any]
    """Box format of the ``boxes`` output: {kind, normalized, one_based, space} (see ``box_format``)."""


@OPS.register("detections_from_outputs")
class DetectionsFromOutputs(PostOp):
    """Read detections a model already produced (NMS inside the graph, e.g. TF Object Detection API exports).

    In: ``Predictions.outputs`` with the named outputs, batch first. Out: ``detections``: per row a
    :class:`Boxes` with the first ``count`` (or all K) rows, boxes float32 in ``format``, scores float32,
    classes int64 in the model's class space (map them with ``class_map``). Row order kept.
    """

    name = "detections_from_outputs"
    Params = DetectionsFromOutputsParams
    params: DetectionsFromOutputsParams

    def __init__(self, params: DetectionsFromOutputsParams) -> None:
        super().__init__(params)
        self.box_format = parse_format("format", params.format)

    def __call__(self, preds: Predictions) -> Predictions:
        p = self.params
        boxes = np.asarray(require_output(self, preds, p.boxes))
        scores = np.asarray(require_output(self, preds, p.scores))
        if boxes.ndim != 3 or boxes.shape[2] != 4:
            raise RepliscopeError(f"'{self.name}': output {p.boxes!r} has shape {boxes.shape}, not (N, K, 4)")
        n, k = boxes.shape[:2]
        if scores.shape != (n, k):
            raise RepliscopeError(
                f"'{self.name}': output {p.scores!r} has shape {scores.shape}, not {(n, k)} "
                f"(the boxes are {boxes.shape})"
            )
        classes = np.zeros((n, k), np.int64)
        if p.classes is not None:
            raw = np.asarray(require_output(self, preds, p.classes))
            if raw.shape != (n, k):
                raise RepliscopeError(f"'{self.name}': output {p.classes!r} has shape {raw.shape}, not {(n, k)}")
            if np.any(raw != np.round(raw)):
                raise RepliscopeError(f"'{self.name}': output {p.classes!r} holds non-integer class ids")
            classes = raw.astype(np.int64)
        counts = np.full(n, k, np.int64)
        if p.count is not None:
            raw_count = np.asarray(require_output(self, preds, p.count)).reshape(n, -1)
            if (
                raw_count.shape[1] != 1
                or np.any(raw_count != np.round(raw_count))
                or np.any(raw_count < 0)
                or np.any(raw_count > k)
            ):
                raise RepliscopeError(
                    f"'{self.name}': output {p.count!r} must hold one whole count in [0, {k}] "
                    f"per sample, got {raw_count.reshape(-1)[:4].tolist()}"
                )
            counts = raw_count[:, 0].astype(np.int64)
        rows = [
            Boxes(
                boxes[i, : counts[i]].astype(np.float32),
                scores[i, : counts[i]].astype(np.float32),
                classes[i, : counts[i]].copy(),
                self.box_format,
            )
            for i in range(n)
        ]
        return with_detections(preds, rows)
