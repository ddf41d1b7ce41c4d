"""A TensorFlow SavedModel folder as a layer-diff candidate: its frozen graph, run whole or in pruned pieces.

Loading: ``tf.saved_model.load``, the ``serving_default`` signature (or the only one), variables folded into
constants (``convert_variables_to_constants_v2``) and the GraphDef imported in a ``tf.Graph`` run by a
``tf.compat.v1.Session``, which feeds and fetches ANY tensor (the session prunes the graph to what a fetch
needs from the feeds; no per-unit compilation). Grappler is off (no op fusion), so every operation stays
fetchable and runs its own kernel.

Units: the graph operations computed from the model input (weight-only arithmetic such as a batch norm's
``rsqrt(var + eps)`` is not a unit), in graph order, named by operation name (e.g.
``StatefulPartitionedCall/efficientnet_lite0_1/stem_bn_1/batchnorm/add_1``); ``Identity`` and ``NoOp`` are
skipped.

* carried (``forward_layers``): ONE ``session.run`` fetching every mapped tensor; they are yielded in graph
  order (all mapped activations of the batch are in memory at once).
* golden (``run_layer``): the mapped operation plus the unmapped operations feeding it through a chain of
  single data inputs (a Dense's ``MatMul`` before its mapped ``BiasAdd``, a batch norm's ``mul_1`` before
  ``add_1``), run with the chain's data inputs as feeds; the reference inputs are fed in the order the
  chain reads them. A unit whose chain reads a different number of data inputs than the reference layer has
  inputs is refused with that reason.

Layout: a Keras/TensorFlow image model is NHWC: 4-D inputs are transposed and ``output_layout`` is ``"NHWC"``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from repliscope.backends.tflite.candidate import input_layout
from repliscope.diff.base import CANDIDATES
from repliscope.diff.layers.mapping import NamedCandidate, UnitInfo, check_unit_inputs
from repliscope.errors import RepliscopeError

_SKIP = {"Identity", "NoOp", "Placeholder", "Const"}


class TensorflowCandidate(NamedCandidate):
    """A SavedModel with one float input."""

    name = "savedmodel"

    def __init__(self, path: str | Path, threads: int = 2) -> None:
        super().__init__()
        import tensorflow as tf
        from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

        self.path = Path(path)
        if not (self.path / "saved_model.pb").is_file():
            raise RepliscopeError(f"SavedModel candidate '{path}': no saved_model.pb in that folder")
        try:
            loaded = tf.saved_model.load(str(self.path))
        except Exception as exc:
            raise RepliscopeError(
                f"SavedModel candidate '{path}' cannot be loaded: {type(exc).__name__}: {exc}"
            ) from exc
        signatures = dict(loaded.signatures)
        key = "serving_default" if "serving_default" in signatures else next(iter(signatures), None)
        if key is None or ("serving_default" not in signatures and len(signatures) > 1):
            raise RepliscopeError(
                f"SavedModel candidate '{path}': no 'serving_default' signature (has: "
                f"{', '.join(signatures) or 'none'})"
            )
        self.signature = key
        frozen = convert_variables_to_constants_v2(signatures[key])
        inputs = [t for t in frozen.inputs if t.dtype != tf.resource]
        if len(inputs) != 1:
            raise RepliscopeError(
                f"SavedModel candidate '{path}': the layer diff needs one input, signature '{key}' has {len(inputs)}"
            )
        graph_def = frozen.graph.as_graph_def()
        graph = tf.Graph()
        with graph.as_default():
            tf.compat.v1.import_graph_def(graph_def, name="")
        config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=threads, inter_op_parallelism_threads=1)
        config.graph_options.rewrite_options.disable_meta_optimizer = True  # no fusion: every op stays fetchable
        self._session = tf.compat.v1.Session(graph=graph, config=config)
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

    @classmethod
    def from_path(cls, path: str | Path, reference_module: Any) -> TensorflowCandidate:
        return cls(path)

    def units(self, x: np.ndarray) -> list[UnitInfo]:
        return [UnitInfo(u.name, u.op, (int(x.shape[0]), *u.shape[1:])) if u.shape else u for u in self._units]

    def describe(self) -> dict[str, str]:
        import tensorflow as tf

        return {
            "candidate": self.name,
            "model": str(self.path),
            "signature": self.signature,
            "tensorflow": tf.__version__,
            "units": str(len(self._units)),
        }

    def chain(self, name: str) -> tuple[list[Any], list[Any]]:
        """(operations in graph order, external data input tensors in the order the unit reads them) of the
        golden unit ending at operation ``name``: it and every unmapped operation it depends on back to mapped
        operations or the model input (``x * sigmoid(x)`` is Sigmoid + Mul, fed one tensor)."""
        op = self._op(name)
        inside_ops = {op.name: op}
        todo = [op]
        while todo:
            for t in self._data_inputs(todo.pop()):
                prev = t.op
                if (
                    prev.name in inside_ops
                    or prev.name == self._input.op.name
                    or prev.name in self._mapped
                    or prev.name not in self._ops
                ):
                    continue
                inside_ops[prev.name] = prev
                todo.append(prev)
        order = {u.name: k for k, u in enumerate(self._units)}
        ops = sorted(inside_ops.values(), key=lambda o: order[o.name])
        inside = set(inside_ops)
        external: list[Any] = []
        for o in ops:
            for t in self._data_inputs(o):
                if t.op.name not in inside and t.name not in {e.name for e in external}:
                    external.append(t)
        return ops, external

    def run_layer(self, path: str, inputs: Sequence[np.ndarray]) -> np.ndarray:
        ops, external = self.chain(path)
        check_unit_inputs(f"SavedModel unit '{path}' ({'+'.join(o.type for o in ops)})", len(external), len(inputs))
        feeds = {
            t: self.to_candidate_layout(np.asarray(a, dtype=t.dtype.as_numpy_dtype))
            for a, t in zip(inputs, external, strict=True)
        }
        try:
            return np.asarray(self._session.run(ops[-1].outputs[0], feeds))
        except Exception as exc:  # ValueError (feed shape) or tf.errors.*: the unit cannot take these inputs
            shapes = ", ".join("x".join(map(str, a.shape)) for a in feeds.values())
            raise RepliscopeError(
                f"SavedModel unit '{path}' ({'+'.join(o.type for o in ops)}) fails on the reference "
                f"input(s) of its layer ({shapes}): the mapping probably pairs it with the wrong "
                "reference layer; check it (--save-mapping FILE), fix it and pass --mapping FILE "
                f"({type(exc).__name__}: {str(exc).splitlines()[0][:300]})"
            ) from None

    def output(self, x: np.ndarray) -> np.ndarray | None:
        """The signature's (first) output on ``x``, in its own layout (e.g. float32 logits (N, C))."""
        feed = self.to_candidate_layout(np.asarray(x, dtype=self.input_dtype))
        return np.asarray(self._session.run(self._output, {self._input: feed}))

    def forward_layers(self, x: np.ndarray, paths: Iterable[str]) -> Iterator[tuple[str, np.ndarray]]:
        order = {u.name: k for k, u in enumerate(self._units)}
        wanted = sorted(set(paths), key=lambda p: order.get(p, -1))
        for p in wanted:
            self._op(p)
        feed = self.to_candidate_layout(np.asarray(x, dtype=self.input_dtype))
        outs = self._session.run([self._ops[p].outputs[0] for p in wanted], {self._input: feed})
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
