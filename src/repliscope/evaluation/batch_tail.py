"""The element-wise tail of a pipeline applied to a whole batch at once, bit for bit what each sample's ops give.

A classification pipeline ends, after its last op that moves pixels (``center_crop``), with ops that touch every
value alone: ``to_float``, ``subtract_mean``, ``divide_std`` in float, and ``data_layout``. Run per sample, each
allocates a new float array (four 600 KB arrays for a Lite0 input), and the batch is then stacked (a fifth copy).
:class:`BatchTail` instead stacks the samples' small uint8 crops, casts them straight into the batch's model
input in its final layout (one strided copy), then subtracts and divides in place: less memory traffic per image
on the cores the loop shares with the runtime (``data_parallel``: each worker prepares and infers its batches).

The results are the same bits: the cast of an integer to float is exact, each float operation is the same IEEE
operation on the same operands in the same order (numpy's ``x - v`` / ``x / v`` in the array's dtype, in place or
not), and a transpose moves values without computing. Only that tail is batched: ``to_float`` first, then any of
the three others (exact op types; ``reshape_layout``, ``scale`` and integer arithmetic are not in it), and only
for a batch whose samples reach it as 3-D images of one shape, layout and dtype; any other batch runs the tail per
sample (:func:`repliscope.evaluation.engine.finish_item`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from repliscope.ops._common import per_channel
from repliscope.ops.base import Item, PreOp
from repliscope.ops.dtype import ToFloat
from repliscope.ops.layout import DataLayout
from repliscope.ops.normalize import DivideStd, SubtractMean
from repliscope.ops.pipeline import Pipeline

_AXES = {("HWC", "CHW"): (0, 3, 1, 2), ("CHW", "HWC"): (0, 2, 3, 1)}
"""Batch axes of a (start layout -> final layout) transpose."""


@dataclass(frozen=True)
class BatchTail:
    """The ops ``pipeline.pre_ops[start:]``, all element-wise (module docstring)."""

    start: int
    ops: tuple[PreOp, ...]

    @classmethod
    def of(cls, pipeline: Pipeline) -> BatchTail | None:
        """The pipeline's element-wise tail, starting at its last ``to_float``; None when it has none."""
        ops = pipeline.pre_ops
        start = len(ops)
        while start > 0 and type(ops[start - 1]) in (SubtractMean, DivideStd, DataLayout):
            start -= 1
        if start == 0 or type(ops[start - 1]) is not ToFloat:
            return None
        return cls(start - 1, tuple(ops[start - 1 :]))

    def final_layout(self, layout: str) -> str:
        for op in self.ops:
            if isinstance(op, DataLayout):
                layout = "CHW" if op.params.layout == "NCHW" else "HWC"
        return layout

    def fits(self, items: Sequence[Item]) -> bool:
        """Can these samples (each after ``pre_ops[:start]``) take the tail as one batch?"""
        first = items[0]
        if first.layout not in ("HWC", "CHW") or first.data.ndim != 3 or first.data.dtype.kind not in "uif":
            return False
        if any(
            i.layout != first.layout or i.data.shape != first.data.shape or i.data.dtype != first.data.dtype
            for i in items
        ):
            return False
        axis = -1 if first.layout == "HWC" else 0
        for op in self.ops:  # a per-channel list of the wrong length: the per-sample path raises the op's error
            values = op.params.value if isinstance(op, (SubtractMean, DivideStd)) else None
            if isinstance(values, list) and len(values) != first.data.shape[axis]:
                return False
        return True

    def apply(self, items: Sequence[Item]) -> np.ndarray:
        """The model inputs of ``items`` (which :meth:`fits`), stacked: (N, *final sample shape), C-contiguous."""
        first = items[0]
        layout: str = first.layout
        end = self.final_layout(layout)
        cast = self.ops[0]
        assert isinstance(cast, ToFloat)
        dtype = np.dtype(cast.params.dtype)
        shape = first.data.shape if layout == end else tuple(first.data.shape[i - 1] for i in _AXES[(layout, end)][1:])
        out = np.empty((len(items), *shape), dtype=dtype)
        view = out if layout == end else out.transpose(np.argsort(_AXES[(layout, end)]))  # out seen in `layout`
        for i, item in enumerate(items):
            np.copyto(view[i], item.data, casting="unsafe")  # to_float: exact for integers, astype for floats
        for op in self.ops[1:]:
            if isinstance(op, DataLayout):
                target = "CHW" if op.params.layout == "NCHW" else "HWC"
                if target != layout:
                    view = view.transpose(_AXES[(layout, target)])
                    layout = target
            elif isinstance(op, SubtractMean):
                np.subtract(view, per_channel(op.params.value, -1 if layout == "HWC" else 0, dtype), out=view)
            elif isinstance(op, DivideStd):
                np.divide(view, per_channel(op.params.value, -1 if layout == "HWC" else 0, dtype), out=view)
        return out
