"""Cut an ONNX graph into units, each mapped back to the torch module path that produced it.

Mapping: the dynamo exporter (``torch.onnx.export(dynamo=True)``) writes, on every node, the metadata
``pkg.torch.onnx.name_scopes``: the module path scopes the node was traced in, outermost first, ending with
the aten op name, e.g. ``['', '_blocks.0', '_blocks.0._bn1', '_native_batch_norm_legit_no_training_1']``.
A node's unit key is the DEEPEST scope that is a reference layer path (``_blocks.0._bn1``); consecutive
nodes (in graph order) with the same key form one unit, and the n-th run of a key is that module's n-th
call (``path#n``). Nodes whose scopes name no reference layer (a residual ``Add`` traced inside a block
container, the root's ``view``) are functional ops: one unit per FX node (the trailing name scope, e.g.
``add_40``), with its aten op (``pkg.torch.onnx.fx_node``: ``target=torch.ops.aten.add.Tensor`` -> ``add``) and
the file:line of the call (last frame of ``pkg.torch.onnx.stack_trace``); ``onnx_ops.match_ops`` pairs them with
the reference's functional ops.

The optimizer folds BatchNorm into the preceding Conv (and the ZeroPad2d into the Conv's pads); the fused
node keeps the BatchNorm's scope, so the unit is keyed by the batch-norm path and covers the conv (and its
padding) too - see :func:`assign_covers`.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import onnx

from repliscope.diff.base import LayerInfo

SCOPES_KEY = "pkg.torch.onnx.name_scopes"
FX_NODE_KEY = "pkg.torch.onnx.fx_node"
STACK_KEY = "pkg.torch.onnx.stack_trace"
_TARGET = re.compile(r"target=torch\.ops\.\w+\.(\w+)(?:\.\w+)?\]")
_FRAME = re.compile(r'File "([^"]+)", line (\d+)')
_ARGS = re.compile(r"\]\(args = \((.*?)\), kwargs = ")


@dataclass
class Unit:
    """Consecutive nodes sharing one key. ``inputs``: activation tensors read from outside the unit (no
    initializers / constants); ``outputs``: tensors read by other units or by the graph's outputs."""

    index: int
    key: str | None
    scope: str
    nodes: list[onnx.NodeProto]
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    fx: str = ""
    """Functional units: the FX node name (``add_40``); empty for module units."""
    op: str = ""
    """Functional units: the aten op (``add``, ``softmax``), else the FX name without its ``_n`` suffix."""
    source: str = ""
    """Functional units: ``file:line`` of the call in the exported model's ``forward`` ("" when unknown)."""

    @property
    def golden_ok(self) -> bool:
        """A mapped unit with one activation input and one output can be fed the reference input."""
        return self.key is not None and len(self.inputs) == 1 and len(self.outputs) == 1


def node_scopes(node: onnx.NodeProto) -> list[str]:
    """The module scopes of a node (outermost first, the trailing op name dropped); [] when absent."""
    return _raw_scopes(node)[:-1]


def _raw_scopes(node: onnx.NodeProto) -> list[str]:
    value = _meta(node, SCOPES_KEY)
    if value is None:
        return []
    try:
        scopes = ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return []
    return [str(s) for s in scopes] if isinstance(scopes, list) else []


def _meta(node: onnx.NodeProto, key: str) -> str | None:
    for prop in node.metadata_props:
        if prop.key == key:
            return str(prop.value)
    return None


def node_op(node: onnx.NodeProto) -> tuple[str, str, str]:
    """(FX node name, aten op name, ``file:line`` of the call) of a node; empty strings when unknown."""
    raw = _raw_scopes(node)
    fx = raw[-1] if raw else ""
    match = _TARGET.search(_meta(node, FX_NODE_KEY) or "")
    op = match.group(1) if match else re.sub(r"_\d+$", "", fx)
    frames = _FRAME.findall(_meta(node, STACK_KEY) or "")
    source = f"{frames[-1][0]}:{frames[-1][1]}" if frames else ""
    return fx, op, source


def partition(graph: onnx.GraphProto, layer_bases: set[str]) -> list[Unit]:
    """Units in graph (topological) order. ``layer_bases``: reference layer paths without ``#n``."""
    units: list[Unit] = []
    runs: dict[str, int] = {}
    for node in graph.node:
        scopes = node_scopes(node)
        base = next((s for s in reversed(scopes) if s in layer_bases), None)
        scope = scopes[-1] if scopes else ""
        fx, op, source = node_op(node) if base is None else ("", "", "")
        last = units[-1] if units else None
        if (
            last is not None
            and last.scope == (base if base is not None else scope)
            and ((base is None) == (last.key is None))
            and last.fx == fx
        ):
            last.nodes.append(node)
            continue
        key = None
        if base is not None:
            runs[base] = runs.get(base, 0) + 1
            key = base if runs[base] == 1 else f"{base}#{runs[base]}"
        units.append(
            Unit(
                index=len(units),
                key=key,
                scope=base if base is not None else scope,
                nodes=[node],
                fx=fx,
                op=op,
                source=source,
            )
        )
    _wire(graph, units)
    return units


def _wire(graph: onnx.GraphProto, units: list[Unit]) -> None:
    constants = {i.name for i in graph.initializer} | {
        o for n in graph.node if n.op_type == "Constant" for o in n.output
    }
    producer = {o: u.index for u in units for n in u.nodes for o in n.output}
    consumers: dict[str, set[int]] = {}
    for u in units:
        for n in u.nodes:
            for name in n.input:
                consumers.setdefault(name, set()).add(u.index)
    graph_outputs = {o.name for o in graph.output}
    for u in units:
        produced = {o for n in u.nodes for o in n.output}
        seen: list[str] = []
        for n in u.nodes:
            for name in n.input:
                if name and name not in produced and name not in constants and name not in seen:
                    seen.append(name)
        u.inputs = _in_call_order(u, seen)
        u.outputs = [
            o
            for n in u.nodes
            for o in n.output
            if o and (o in graph_outputs or consumers.get(o, set()) - {u.index}) and producer.get(o) == u.index
        ]


def _in_call_order(unit: Unit, names: list[str]) -> list[str]:
    """A functional unit's activation inputs in the order of its FX node's arguments (``args = (%q, %k, %v)`` in
    ``pkg.torch.onnx.fx_node``; the exporter names ONNX values after FX nodes), so the reference op's inputs can be
    fed positionally; names not among the arguments keep their graph order, after them."""
    if not unit.fx or len(names) < 2:
        return names
    match = _ARGS.search(_meta(unit.nodes[0], FX_NODE_KEY) or "")
    args = re.findall(r"%(\w+)", match.group(1)) if match else []
    rank = {name: i for i, name in reversed(list(enumerate(args)))}
    return sorted(names, key=lambda n: (rank.get(n, len(args)), names.index(n)))


def assign_covers(layers: Sequence[LayerInfo], keys: Sequence[str]) -> dict[str, list[str]]:
    """For each unit key (a reference path), the reference layers it computes, in the order they start.

    Every reference layer belongs to the first key at or after it in the reference order (the order layers
    END); so a fused ONNX Conv keyed ``_bn0`` covers ``[_conv_stem, _conv_stem.static_padding, _bn0]``. A
    functional op (``layer1.0/add``) covers only itself and stops the grouping: module layers before it without
    a unit stay uncovered (reported, never fed to a later unit). The
    first entry is the layer whose INPUT the unit takes: the group's first-ending layer, replaced by its
    outermost ancestor in the group (a parent starts before its children).
    """
    order = {layer.path: i for i, layer in enumerate(layers)}
    key_set = set(keys)
    covers: dict[str, list[str]] = {}
    pending: list[str] = []
    for layer in layers:
        if layer.is_op:  # an op unit covers itself; unmatched ops and modules before it are never folded in
            if layer.path in key_set:
                covers[layer.path] = [layer.path]
                pending = []
            continue
        pending.append(layer.path)
        if layer.path in key_set:
            covers[layer.path] = _start_order(pending)
            pending = []
    return {k: covers[k] for k in sorted(covers, key=order.__getitem__)}


def _start_order(group: list[str]) -> list[str]:
    first = group[0]
    ancestors = [p for p in group if _base(first).startswith(_base(p) + ".")]
    head = min(ancestors, key=lambda p: _base(p).count(".")) if ancestors else first
    return [head, *[p for p in group if p != head]]


def _base(path: str) -> str:
    return path.split("#", 1)[0]
