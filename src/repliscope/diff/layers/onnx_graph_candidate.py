"""Any ONNX model (no torch exporter metadata needed) as a layer-diff candidate, under its own node names.

Used for an ``.onnx`` candidate whose nodes carry no ``pkg.torch.onnx.name_scopes`` (exported by another tool,
e.g. tf2onnx, or edited by hand); :class:`~repliscope.backends.onnxruntime.candidate.OnnxCandidate` handles the torch
exports. Units: the nodes in graph order with a floating-point output, named by their first output tensor;
paired with the reference by ``--mapping`` or the proposed mapping.

* carried (``forward_layers``): ONE onnxruntime session on a copy of the model whose graph outputs are the
  mapped tensors (all of them in memory at once);
* golden (``run_layer``): the mapped node plus every unmapped node it depends on back to mapped nodes or the
  model input, cut out as a small model (initializers and constants it reads included) fed the reference inputs
  in the order it reads them.

Layout: the model's own (4-D NHWC inputs are transposed and ``output_layout`` is ``"NHWC"``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, shape_inference

from repliscope.backends.tflite.candidate import input_layout
from repliscope.diff.layers.mapping import NamedCandidate, UnitInfo, check_unit_inputs
from repliscope.errors import RepliscopeError

_FLOATS = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE, onnx.TensorProto.BFLOAT16}


class OnnxGraphCandidate(NamedCandidate):
    """An ONNX model with one input, units named by node output."""

    name = "onnx"

    def __init__(self, path: str | Path, threads: int = 2) -> None:
        super().__init__()
        self.path = Path(path)
        self.threads = threads
        from repliscope.runtimes.onnx_external import check_external_data

        check_external_data(self.path)  # before onnx.load reads the external data files
        try:
            self.model = onnx.load(str(self.path))
        except Exception as exc:  # protobuf decode errors of a file that is not an ONNX model
            raise RepliscopeError(f"ONNX candidate '{path}' cannot be read: {type(exc).__name__}: {exc}") from None
        graph = self.model.graph
        self._consts = {i.name for i in graph.initializer} | {
            o for n in graph.node if n.op_type == "Constant" for o in n.output
        }
        inputs = [i for i in graph.input if i.name not in self._consts]
        if len(inputs) != 1:
            raise RepliscopeError(
                f"ONNX candidate '{path}': the layer diff needs one input, the model has {len(inputs)}"
            )
        self.input_name = inputs[0].name
        elem = inputs[0].type.tensor_type.elem_type
        self.input_dtype = np.dtype(helper.tensor_dtype_to_np_dtype(elem)) if elem else np.dtype(np.float32)
        """The graph input's dtype: the batch is cast to it (float32 for a float model, uint8 kept for a uint8
        image input)."""
        dims = [d.dim_value or 1 for d in inputs[0].type.tensor_type.shape.dim]
        self.layout = input_layout(dims)  # type: ignore[misc]
        self.output_layout = "NHWC" if self.layout == "NHWC" else "reference"  # type: ignore[misc]
        inferred = shape_inference.infer_shapes(self.model).graph
        self._infos = {v.name: v for v in [*inferred.value_info, *inferred.input, *inferred.output]}
        self._producer = {o: n for n in graph.node for o in n.output}
        self._units: list[UnitInfo] = []
        self._nodes: dict[str, onnx.NodeProto] = {}
        for node in graph.node:
            if node.op_type == "Constant" or not node.output:
                continue
            info = self._infos.get(node.output[0])
            if info is None or info.type.tensor_type.elem_type not in _FLOATS:
                continue
            shape = tuple(int(d.dim_value) if d.HasField("dim_value") else -1 for d in info.type.tensor_type.shape.dim)
            self._nodes[node.output[0]] = node
            self._units.append(UnitInfo(node.output[0], node.op_type, shape))
        self._sessions: dict[tuple[str, ...], ort.InferenceSession] = {}

    @classmethod
    def from_path(cls, path: str | Path, reference_module: Any) -> OnnxGraphCandidate:
        return cls(path)

    def units(self, x: np.ndarray) -> list[UnitInfo]:
        """The units with output shapes for the batch of ``x``. Shapes that shape inference leaves unknown (a
        ``Reshape`` to a computed shape, as the TorchScript exporter writes ``flatten``) are measured by one
        run of the model on the first sample(s) of ``x`` (as many as a fixed input batch needs)."""
        if any(-1 in u.shape[1:] for u in self._units):
            dims = [d.dim_value for d in self._infos[self.input_name].type.tensor_type.shape.dim]
            probe = x[: dims[0]] if dims and dims[0] > 0 else x[:1]
            names = self._names()
            measured = {name: tuple(out.shape) for name, out in self.forward_layers(probe, names)}
            del self._sessions[("carried", *names)]
            self._units = [UnitInfo(u.name, u.op, measured.get(u.name, u.shape)) for u in self._units]
        return [UnitInfo(u.name, u.op, (int(x.shape[0]), *u.shape[1:])) if u.shape else u for u in self._units]

    def describe(self) -> dict[str, str]:
        return {
            "candidate": self.name,
            "model": str(self.path),
            "onnxruntime": ort.__version__,
            "units": str(len(self._units)),
        }

    def chain(self, name: str) -> tuple[list[onnx.NodeProto], list[str]]:
        """(nodes in graph order, external activation inputs in the order they are read) of the golden unit
        ending at the node whose first output is ``name``."""
        if name not in self._nodes:
            raise RepliscopeError(f"ONNX candidate: no node output named '{name}'")
        inside = {name: self._nodes[name]}
        todo = [self._nodes[name]]
        while todo:
            for tensor in todo.pop().input:
                prev = self._producer.get(tensor)
                if (
                    prev is None
                    or tensor in self._consts
                    or prev.output[0] in inside
                    or prev.output[0] in self._mapped
                    or prev.op_type == "Constant"
                ):
                    continue
                inside[prev.output[0]] = prev
                todo.append(prev)
        order = {id(n): k for k, n in enumerate(self.model.graph.node)}
        nodes = sorted(inside.values(), key=lambda n: order[id(n)])
        produced = {o for n in nodes for o in n.output}
        external: list[str] = []
        for n in nodes:
            for tensor in n.input:
                if tensor and tensor not in produced and tensor not in self._consts and tensor not in external:
                    external.append(tensor)
        return nodes, external

    def input_units(self, name: str) -> list[str | None] | None:
        """The units whose outputs the golden unit ending at ``name`` reads, in its order (None: the model input);
        None when one is not a unit's first output (a node with several outputs)."""
        _, external = self.chain(name)
        found: list[str | None] = []
        for tensor in external:
            if tensor == self.input_name:
                found.append(None)
            elif tensor in self._nodes:
                found.append(tensor)
            else:
                return None
        return found

    def node(self, name: str) -> onnx.NodeProto:
        """The node whose first output is ``name`` (a unit)."""
        return self._nodes[name]

    def unit_model(self, name: str) -> tuple[onnx.ModelProto, list[str]]:
        """The golden unit ending at tensor ``name`` (:meth:`chain`) as a model of its own: (model, its inputs in
        the order they are read); its one output is ``name``."""
        nodes, external = self.chain(name)
        return self._sub_model(nodes, external, name), external

    def exposed_model(self, names: Iterable[str]) -> onnx.ModelProto:
        """A copy of the model whose graph outputs are its own followed by the tensors ``names``."""
        model = onnx.ModelProto()
        model.CopyFrom(self.model)
        existing = {o.name for o in model.graph.output}
        model.graph.output.extend(self._value_info(t) for t in names if t not in existing)
        return model

    def tensor_values(self, x: np.ndarray, names: Iterable[str]) -> dict[str, np.ndarray]:
        """Any tensors of the graph (node outputs, not only units' first outputs) on the input ``x`` (the
        candidate's layout), by one onnxruntime session with those tensors exposed."""
        wanted = list(dict.fromkeys(names))
        key = ("tensors", *wanted)
        if key not in self._sessions:
            self._sessions[key] = self._session(self.exposed_model(wanted))
        outs = self._sessions[key].run(wanted, {self.input_name: np.asarray(x, self.input_dtype)})
        return {name: np.asarray(v) for name, v in zip(wanted, outs, strict=True)}

    def run_layer(self, path: str, inputs: Sequence[np.ndarray]) -> np.ndarray:
        nodes, external = self.chain(path)
        check_unit_inputs(f"ONNX unit '{path}' ({'+'.join(n.op_type for n in nodes)})", len(external), len(inputs))
        key = ("golden", path)
        if key not in self._sessions:
            self._sessions[key] = self._session(self._sub_model(nodes, external, path))
        feed = {
            t: self.to_candidate_layout(np.asarray(a, dtype=np.float32)) for t, a in zip(external, inputs, strict=True)
        }
        try:
            return np.asarray(self._sessions[key].run([path], feed)[0])
        except Exception as exc:  # onnxruntime Fail / InvalidArgument: the unit cannot take these inputs
            shapes = ", ".join("x".join(map(str, a.shape)) for a in feed.values())
            raise RepliscopeError(
                f"ONNX unit '{path}' ({'+'.join(n.op_type for n in nodes)}) fails on the reference "
                f"input(s) of its layer ({shapes}): the mapping probably pairs it with the wrong "
                "reference layer; check it (--save-mapping FILE), fix it and pass --mapping FILE "
                f"({type(exc).__name__}: {str(exc).splitlines()[0][:300]})"
            ) from None

    def sublayer_outputs(self, path: str, inputs: Sequence[np.ndarray]) -> list[tuple[str, np.ndarray]]:
        """The golden unit ending at ``path`` node by node (one session exposing every node's first output):
        ("tensor (OpType)", its value, in the layout :meth:`run_layer` returns)."""
        nodes, external = self.chain(path)
        check_unit_inputs(f"ONNX unit '{path}' ({'+'.join(n.op_type for n in nodes)})", len(external), len(inputs))
        steps = [n for n in nodes if n.output and n.output[0] in self._nodes]
        key = ("sublayers", path)
        if key not in self._sessions:
            model = self._sub_model(nodes, external, path)
            model.graph.output.extend(self._value_info(n.output[0]) for n in steps if n.output[0] != path)
            self._sessions[key] = self._session(model)
        feed = {
            t: self.to_candidate_layout(np.asarray(a, dtype=np.float32)) for t, a in zip(external, inputs, strict=True)
        }
        values = self._sessions[key].run([n.output[0] for n in steps], feed)
        return [(f"{n.output[0]} ({n.op_type})", np.asarray(v)) for n, v in zip(steps, values, strict=True)]

    def forward_layers(self, x: np.ndarray, paths: Iterable[str]) -> Iterator[tuple[str, np.ndarray]]:
        order = {u.name: k for k, u in enumerate(self._units)}
        wanted = sorted(set(paths), key=lambda p: order.get(p, -1))
        unknown = [p for p in wanted if p not in self._nodes]
        if unknown:
            raise RepliscopeError(f"ONNX candidate: no node output named {', '.join(unknown[:5])}")
        key = ("carried", *wanted)
        if key not in self._sessions:
            self._sessions[key] = self._session(self.exposed_model(wanted))
        feed = {self.input_name: self.to_candidate_layout(np.asarray(x, self.input_dtype))}
        outs = self._sessions[key].run(wanted, feed)
        for name, value in zip(wanted, outs, strict=True):
            yield name, np.asarray(value)

    def output(self, x: np.ndarray) -> np.ndarray | None:
        key = ("output",)
        if key not in self._sessions:
            self._sessions[key] = self._session(self.model)
        first = self.model.graph.output[0].name
        feed = {self.input_name: self.to_candidate_layout(np.asarray(x, self.input_dtype))}
        return np.asarray(self._sessions[key].run([first], feed)[0])

    def _sub_model(self, nodes: list[onnx.NodeProto], external: list[str], output: str) -> onnx.ModelProto:
        graph = self.model.graph
        used = {t for n in nodes for t in n.input}
        constants = [n for n in graph.node if n.op_type == "Constant" and n.output[0] in used]
        sub = helper.make_graph(
            [*constants, *nodes],
            "unit",
            inputs=[self._value_info(t) for t in external],
            outputs=[self._value_info(output)],
            initializer=[i for i in graph.initializer if i.name in used],
        )
        model = helper.make_model(sub, opset_imports=list(self.model.opset_import), ir_version=self.model.ir_version)
        model.functions.extend(self.model.functions)
        return model

    def _value_info(self, name: str) -> onnx.ValueInfoProto:
        info = self._infos.get(name)
        return info if info is not None else helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None)

    def _session(self, model: onnx.ModelProto) -> ort.InferenceSession:
        options = ort.SessionOptions()
        options.intra_op_num_threads = self.threads
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        return ort.InferenceSession(model.SerializeToString(), sess_options=options, providers=["CPUExecutionProvider"])
