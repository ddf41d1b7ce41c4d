"""A TensorFlow SavedModel folder as a layer-diff candidate: its frozen graph, run whole or in pruned pieces.

Loading: ``tf.saved_model.load``, the ``serving_default`` signature (or the only one), variables folded into
constants (``convert_variables_to_constants_v2``) and the GraphDef re-imported in a
``tf.compat.v1.wrap_function`` so that any tensor can be fed or fetched (``.prune(feeds, fetches)``).

Units: the graph operations computed from the model input (weight-only arithmetic such as a batch norm's
``rsqrt(var + eps)`` is not a unit), in graph order, named by operation name (e.g.
``StatefulPartitionedCall/efficientnet_lite0_1/stem_bn_1/batchnorm/add_1``); ``Identity`` and ``NoOp`` are
skipped.

* carried (``forward_layers``): ONE pruned call fetching every mapped tensor; they are yielded in graph order
  (all mapped activations of the batch are in memory at once).
* golden (``run_layer``): the mapped operation plus the unmapped operations feeding it through a chain of
  single data inputs (a Dense's ``MatMul`` before its mapped ``BiasAdd``, a batch norm's ``mul_1`` before
  ``add_1``), pruned with the chain's data inputs as feeds; the reference inputs are fed in the order the
  chain reads them. A unit whose chain reads a different number of data inputs than the reference layer has
  inputs is refused with that reason.

Layout: a Keras/TensorFlow image model is NHWC: 4-D inputs are transposed and ``output_layout`` is ``"NHWC"``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from repliscope.diff.base import CANDIDATES
from repliscope.diff.mapping import NamedCandidate, UnitInfo
from repliscope.diff.tflite_candidate import input_layout
from repliscope.errors import RepliscopeError

_SKIP = {"Identity", "NoOp", "Placeholder", "Const"}


class TensorflowCandidate(NamedCandidate):
    """A SavedModel with one float input."""

    name = "savedmodel"

    def __init__(self, path: str | Path) -> None:
        super().__init__()
        import tensorflow as tf
        from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

        self.path = Path(path)
        if not (self.path / "saved_model.pb").is_file():
            raise RepliscopeError(f"SavedModel candidate '{path}': no saved_model.pb in that folder")
        try:
            loaded = tf.saved_model.load(str(self.path))
        except Exception as exc:
            raise RepliscopeError(f"SavedModel candidate '{path}' cannot be loaded: {type(exc).__name__}: {exc}"
                                  ) from exc
        signatures = dict(loaded.signatures)
        key = "serving_default" if "serving_default" in signatures else next(iter(signatures), None)
        if key is None or ("serving_default" not in signatures and len(signatures) > 1):
            raise RepliscopeError(f"SavedModel candidate '{path}': no 'serving_default' signature (has: "
                                  f"{', '.join(signatures) or 'none'})")
        self.signature = key
        frozen = convert_variables_to_constants_v2(signatures[key])
        inputs = [t for t in frozen.inputs if t.dtype != tf.resource]
        if len(inputs) != 1:
            raise RepliscopeError(f"SavedModel candidate '{path}': the layer diff needs one input, signature "
                                  f"'{key}' has {len(inputs)}")
        graph_def = frozen.graph.as_graph_def()
        self._wrapped = tf.compat.v1.wrap_function(
            lambda: tf.compat.v1.import_graph_def(graph_def, name=""), [])
        graph = self._wrapped.graph
        self._output = graph.get_tensor_by_name(frozen.outputs[0].name)
        self._input = graph.get_tensor_by_name(inputs[0].name)
        self.input_dtype = self._input.dtype.as_numpy_dtype
        self.layout = input_layout([d or 1 for d in self._input.shape.as_list()])  # type: ignore[misc]
        self.output_layout = "NHWC" if self.layout == "NHWC" else "reference"  # type: ignore[misc]
        self._ops: dict[str, Any] = {}
        self._units: list[UnitInfo] = []
        self._reached: set[str] = {self._input.op.name}
        for op in graph.get_operations():
            if op.name in self._reached or not any(t.op.name in self._reached for t in op.inputs):
                continue
            self._reached.add(op.name)
            if op.type in _SKIP or not op.outputs or not op.outputs[0].dtype.is_floating:
                continue
            self._ops[op.name] = op
            dims = op.outputs[0].shape.as_list() if op.outputs[0].shape.rank is not None else []
            self._units.append(UnitInfo(op.name, op.type, tuple(-1 if d is None else int(d) for d in dims)))
        self._mapped: set[str] = set()
        self._pruned: dict[tuple[str, ...], Any] = {}

    @classmethod
    def from_path(cls, path: str | Path, reference_module: Any) -> TensorflowCandidate:
        return cls(path)

    def units(self, x: np.ndarray) -> list[UnitInfo]:
        return [UnitInfo(u.name, u.op, (int(x.shape[0]), *u.shape[1:])) if u.shape else u for u in self._units]

    def _names(self) -> list[str]:
        return [u.name for u in self._units]

    def set_mapped(self, names: Iterable[str]) -> None:
        """The unit names a mapping uses: golden chains stop at them."""
        self._mapped = set(names)

    def describe(self) -> dict[str, str]:
        import tensorflow as tf

        return {"candidate": self.name, "model": str(self.path), "signature": self.signature,
                "tensorflow": tf.__version__, "units": str(len(self._units))}

    def chain(self, name: str) -> tuple[list[Any], list[Any]]:
        """(operations in order, external data input tensors in the order the chain reads them) of the golden
        unit ending at operation ``name``."""
        op = self._op(name)
        ops = [op]
        while True:
            data = self._data_inputs(ops[0])
            if len(data) != 1:
                break
            prev = data[0].op
            if (prev.name == self._input.op.name or prev.name in self._mapped or prev.name not in self._ops
                    or len(prev.outputs[0].consumers()) != 1):
                break
            ops.insert(0, prev)
        inside = {o.name for o in ops}
        external: list[Any] = []
        for o in ops:
            for t in self._data_inputs(o):
                if t.op.name not in inside and t.name not in {e.name for e in external}:
                    external.append(t)
        return ops, external

    def run_layer(self, path: str, inputs: Sequence[np.ndarray]) -> np.ndarray:
        import tensorflow as tf

        ops, external = self.chain(path)
        if len(external) != len(inputs):
            raise RepliscopeError(
                f"SavedModel unit '{path}' ({'+'.join(o.type for o in ops)}) reads {len(external)} data input(s), "
                f"the reference layer {len(inputs)}: map it to another operation or compare in carried mode only "
                "(--mode carried)")
        key = ("golden", path)
        if key not in self._pruned:
            self._pruned[key] = self._wrapped.prune(feeds=external, fetches=ops[-1].outputs[0])
        feeds = [tf.constant(self.to_candidate_layout(np.asarray(a, dtype=t.dtype.as_numpy_dtype)))
                 for a, t in zip(inputs, external, strict=True)]
        return np.asarray(self._pruned[key](*feeds))

    def output(self, x: np.ndarray) -> np.ndarray | None:
        """The signature's (first) output on ``x``, in its own layout (e.g. float32 logits (N, C))."""
        import tensorflow as tf

        if ("output",) not in self._pruned:
            self._pruned[("output",)] = self._wrapped.prune(feeds=[self._input], fetches=self._output)
        feed = tf.constant(self.to_candidate_layout(np.asarray(x, dtype=self.input_dtype)))
        return np.asarray(self._pruned[("output",)](feed))

    def forward_layers(self, x: np.ndarray, paths: Iterable[str]) -> Iterator[tuple[str, np.ndarray]]:
        import tensorflow as tf

        order = {u.name: k for k, u in enumerate(self._units)}
        wanted = sorted(set(paths), key=lambda p: order.get(p, -1))
        for p in wanted:
            self._op(p)
        key = ("carried", *wanted)
        if key not in self._pruned:
            self._pruned[key] = self._wrapped.prune(feeds=[self._input],
                                                    fetches=[self._ops[p].outputs[0] for p in wanted])
        outs = self._pruned[key](tf.constant(self.to_candidate_layout(np.asarray(x, dtype=self.input_dtype))))
        for name, value in zip(wanted, outs, strict=True):
            yield name, np.asarray(value)

    def _op(self, name: str) -> Any:
        op = self._ops.get(name)
        if op is None:
            raise RepliscopeError(f"SavedModel candidate: no operation named '{name}' computed from the input")
        return op

    def _data_inputs(self, op: Any) -> list[Any]:
        """Floating-point inputs computed from the model input (a Reshape's shape tensor is not data)."""
        return [t for t in op.inputs if t.op.name in self._reached and t.dtype.is_floating]


CANDIDATES.add("savedmodel", TensorflowCandidate)
