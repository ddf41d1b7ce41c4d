"""The ONNX export of the reference model, run in onnxruntime unit by unit (registered as ``onnxruntime``).

Which graph: the SAME cached export the ``onnxruntime`` runtime runs (``runtimes/onnx_export.py``: dynamo
exporter, optimized, BatchNorm and "same" padding folded into Conv). We diff what users deploy rather than
an un-optimized twin, so a bug introduced by folding is caught; the price is that one ONNX Conv stands for
torch conv + padding + batch norm: that unit is keyed by the batch-norm path and ``covers()`` lists the
three (see ``onnx_units.py`` for how nodes map to torch paths). Functional ops of the reference's ``forward``
(``layer1.0/add``) are units too: one per FX node, paired with the reference ops by ``onnx_ops.match_ops``; a
reference op with no ONNX node is reported by ``unmatched()`` as missing (a divergence).

Execution: every unit (consecutive nodes of one torch module call) becomes a small ONNX model with its
own ``InferenceSession`` (built lazily, cached per unit; CPU, ``ORT_ENABLE_ALL``, memory arena and memory
pattern OFF so a session frees its activations after each run and memory stays bounded; thread spinning
OFF so the idle sessions' threads do not steal the CPU from torch and from each other).

* golden (``run_layer``): the unit's session on the reference input of ``covers(path)[0]``;
* carried (``forward_layers``): all units in graph order on the candidate's OWN tensors, each tensor freed
  as soon as its last consumer ran. Same nodes and kernels as the full graph, but onnxruntime cannot fuse
  across unit boundaries (e.g. Conv + Clip), which changes nothing numerically for these ops.

Layout: ONNX exported from torch keeps NCHW, so outputs are in the reference layout.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, shape_inference

from repliscope.diff.base import LayerInfo, RuntimeCandidate, Unmatched
from repliscope.diff.layers.onnx_ops import match_ops
from repliscope.diff.layers.onnx_units import Unit, assign_covers, node_scopes, partition
from repliscope.errors import RepliscopeError
from repliscope.runtimes.base import ModelArtifact


class OnnxCandidate(RuntimeCandidate):
    """An ONNX model (path or ``ModelProto``, single input) compared with its torch reference.

    ``run_layer(path, [x])``: ``x`` is the reference input of ``covers(path)[0]`` in the model's dtype and
    NCHW layout, e.g. float32 (N, 32, 112, 112); returns the unit's output, e.g. float32 (N, 16, 112, 112).
    """

    name = "onnxruntime"
    supports_ops = True
    OUTPUT_CHUNK = 2

    def __init__(self, model: onnx.ModelProto | Path | str, threads: int = 2, source: str = "") -> None:
        if not isinstance(model, onnx.ModelProto):
            from repliscope.runtimes.onnx_external import check_external_data

            check_external_data(model)  # before onnx.load reads the external data files
        proto = model if isinstance(model, onnx.ModelProto) else onnx.load(str(model))
        self.source = source or (str(model) if not isinstance(model, onnx.ModelProto) else "<in-memory model>")
        self.threads = threads
        self._model = proto
        graph = proto.graph
        self._inits = {i.name: i for i in graph.initializer}
        self._constants = {o: n for n in graph.node if n.op_type == "Constant" for o in n.output}
        self._values = _value_infos(proto)
        inputs = [i.name for i in graph.input if i.name not in self._inits]
        if len(inputs) != 1:
            raise RepliscopeError(
                f"the layer diff supports ONNX models with one input; this one has {len(inputs)}: {', '.join(inputs)}"
            )
        self.input_name = inputs[0]
        self._units: list[Unit] = []
        self._by_key: dict[str, Unit] = {}
        self._covers: dict[str, list[str]] = {}
        self._sessions: dict[int, ort.InferenceSession] = {}
        self._unmatched: list[Unmatched] = []
        self._last: tuple[np.ndarray, np.ndarray] | None = None
        self.output_name = graph.output[0].name
        self.notes: list[str] = []

    @classmethod
    def from_artifact(cls, artifact: ModelArtifact, *, cache_dir: Path, threads: int = 2) -> OnnxCandidate:
        """The ONNX source itself, or the cached torch -> ONNX export the onnxruntime runtime uses."""
        from repliscope.runtimes._common import onnx_source

        path = onnx_source(artifact, Path(cache_dir), {})
        return cls(path, threads=threads, source=str(path))

    # -- mapping -------------------------------------------------------------------------------------

    def mapped_layers(self, reference_layers: Sequence[LayerInfo]) -> list[str]:
        """Reference paths with a golden-runnable unit (module layers and functional ops, see
        ``onnx_ops.match_ops``), in reference order; also fixes ``covers`` and ``unmatched``."""
        layers = [layer for layer in reference_layers if not layer.is_op]
        ops = [layer for layer in reference_layers if layer.is_op]
        known = {layer.path for layer in layers}
        bases = {p.split("#", 1)[0] for p in known}
        self._units = partition(self._model.graph, bases)
        self._by_key = {}
        self._unmatched = []
        self.notes = []
        for unit in self._units:
            if unit.key is None:
                continue
            if unit.key not in known:
                self.notes.append(f"ONNX unit '{unit.key}' ({_ops(unit)}) has no reference layer of that name")
            elif not unit.outputs:
                self._unmatched.append(
                    Unmatched(unit.key, f"its ONNX unit ({_ops(unit)}) is dead code: no node reads its output")
                )
            elif not unit.golden_ok:
                self._unmatched.append(
                    Unmatched(
                        unit.key,
                        f"its ONNX unit ({_ops(unit)}) reads {len(unit.inputs)} "
                        f"activation tensors and writes {len(unit.outputs)}; "
                        "it cannot be fed the reference input",
                    )
                )
            else:
                self._by_key[unit.key] = unit
        if not any(node_scopes(n) for n in self._model.graph.node):
            self._unmatched += [
                Unmatched(
                    op.path,
                    "the ONNX graph has no pkg.torch.onnx.name_scopes metadata (not "
                    "exported by torch.onnx.export(dynamo=True)): its nodes cannot "
                    "be matched to torch ops",
                )
                for op in ops
            ]
            ops = []
        pairs, missing, notes = match_ops(ops, self._units, reference_layers)
        self.notes += notes
        self._unmatched += missing
        arity = {op.path: op.arity for op in ops}
        for path, unit in pairs.items():
            if len(unit.outputs) == 1 and len(unit.inputs) != arity[path]:  # e.g. an Add edited into an Identity
                self._unmatched.append(
                    Unmatched(
                        path,
                        f"its ONNX unit {unit.fx} ({_ops(unit)}) reads {len(unit.inputs)} activation tensor(s), "
                        f"the reference op reads {arity[path]}: a dropped or extra input (such as a residual)",
                        missing=True,
                    )
                )
                continue
            if len(unit.outputs) != 1:
                self._unmatched.append(
                    Unmatched(
                        path,
                        f"its ONNX unit {unit.fx} ({_ops(unit)}) reads "
                        f"{len(unit.inputs)} activation tensor(s) and writes "
                        f"{len(unit.outputs)}; it cannot be fed the reference inputs",
                    )
                )
                continue
            unit.key = path
            self._by_key[path] = unit
        self._covers = assign_covers(reference_layers, list(self._by_key))
        return list(self._covers)

    def unmatched(self) -> list[Unmatched]:
        return list(self._unmatched)

    def covers(self, path: str) -> list[str]:
        return self._covers.get(path, [path])

    def describe(self) -> dict[str, str]:
        return {
            "candidate": self.name,
            "model": self.source,
            "onnxruntime": ort.__version__,
            "units": str(len(self._units)),
            "mapped": str(len(self._by_key)),
        }

    # -- execution -----------------------------------------------------------------------------------

    def run_layer(self, path: str, inputs: Sequence[np.ndarray]) -> np.ndarray:
        unit = self._by_key.get(path)
        if unit is None:
            raise RepliscopeError(
                f"'{path}' is not a mapped layer of this ONNX model "
                "(call mapped_layers() first; see describe() and notes)"
            )
        if len(inputs) != len(unit.inputs):
            raise RepliscopeError(f"'{path}': the ONNX unit takes {len(unit.inputs)} input(s), got {len(inputs)}")
        feed = {name: np.ascontiguousarray(a) for name, a in zip(unit.inputs, inputs, strict=True)}
        (out,) = self._session(unit).run(unit.outputs, feed)
        return np.asarray(out)

    def forward_layers(self, x: np.ndarray, paths: Iterable[str]) -> Iterator[tuple[str, np.ndarray]]:
        wanted = set(paths)
        if not self._units:
            raise RepliscopeError("call mapped_layers() before forward_layers()")
        remaining: dict[str, int] = {}
        for unit in self._units:
            for name in unit.inputs if unit.outputs else ():
                remaining[name] = remaining.get(name, 0) + 1
        values: dict[str, np.ndarray] = {self.input_name: np.ascontiguousarray(x)}
        for unit in self._units:
            if not unit.outputs:  # dead code: nothing reads it
                continue
            feed = {name: values[name] for name in unit.inputs}
            outs = self._session(unit).run(unit.outputs, feed)
            for name in unit.inputs:
                remaining[name] -= 1
                if remaining[name] == 0:
                    del values[name]
            for name, value in zip(unit.outputs, outs, strict=True):
                if remaining.get(name, 0) > 0:
                    values[name] = np.asarray(value)
                if name == self.output_name:
                    self._last = (x, np.asarray(value))
            if unit.key in wanted and unit.key in self._by_key:
                yield unit.key, np.asarray(outs[0])

    def output(self, x: np.ndarray) -> np.ndarray | None:
        """The graph's output on ``x``: the one of the last ``forward_layers(x, ...)`` run when it was run on
        this very array, else a unit-by-unit forward (same kernels as carried mode) over chunks of
        :attr:`OUTPUT_CHUNK` samples, which bounds the activations held at once (inference graphs treat the
        samples of a batch independently)."""
        if self._last is not None and self._last[0] is x:
            return self._last[1]
        parts = []
        for lo in range(0, len(x), self.OUTPUT_CHUNK):
            chunk = x[lo : lo + self.OUTPUT_CHUNK]
            for _ in self.forward_layers(chunk, ()):
                pass
            if self._last is None:
                return None
            parts.append(self._last[1])
        self._last = None
        return np.concatenate(parts) if parts else None

    def _session(self, unit: Unit) -> ort.InferenceSession:
        session = self._sessions.get(unit.index)
        if session is None:
            options = ort.SessionOptions()
            options.intra_op_num_threads = self.threads
            options.inter_op_num_threads = 1
            options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            options.enable_cpu_mem_arena = False
            options.enable_mem_pattern = False
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            blob = self._unit_model(unit).SerializeToString()
            session = ort.InferenceSession(blob, sess_options=options, providers=["CPUExecutionProvider"])
            self._sessions[unit.index] = session
        return session

    def _unit_model(self, unit: Unit) -> onnx.ModelProto:
        used = {name for n in unit.nodes for name in n.input}
        constants = [self._constants[n] for n in sorted(used & set(self._constants))]
        graph = helper.make_graph(
            [*constants, *unit.nodes],
            f"unit_{unit.index}",
            inputs=[self._value_info(n) for n in unit.inputs],
            outputs=[self._value_info(n) for n in unit.outputs],
            initializer=[self._inits[n] for n in sorted(used & set(self._inits))],
        )
        model = helper.make_model(
            graph, opset_imports=list(self._model.opset_import), ir_version=self._model.ir_version
        )
        model.functions.extend(self._model.functions)
        return model

    def _value_info(self, name: str) -> onnx.ValueInfoProto:
        info = self._values.get(name)
        if info is not None:
            return info
        return helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None)


def _value_infos(model: onnx.ModelProto) -> dict[str, onnx.ValueInfoProto]:
    """Types and shapes of every tensor, by shape inference on a weight-free copy of the model (initializers
    declared as typed graph inputs), so the weights are never duplicated in memory."""
    graph = model.graph
    weightless = helper.make_graph(
        list(graph.node),
        graph.name,
        inputs=[
            *graph.input,
            *[helper.make_tensor_value_info(i.name, i.data_type, list(i.dims)) for i in graph.initializer],
        ],
        outputs=list(graph.output),
        value_info=list(graph.value_info),
    )
    light = helper.make_model(weightless, opset_imports=list(model.opset_import), ir_version=model.ir_version)
    light.functions.extend(model.functions)
    inferred = shape_inference.infer_shapes(light).graph
    return {v.name: v for v in [*inferred.value_info, *inferred.input, *inferred.output]}


def _ops(unit: Unit) -> str:
    return "+".join(n.op_type for n in unit.nodes)
