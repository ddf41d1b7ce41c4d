"""Group per-node timings of an ONNX-based runtime into layers named by the torch module that produced them.

A node's layer is the unit of the ONNX node it came from in the layer diff's torch module ↔ ONNX node mapping
(:func:`repliscope.diff.layers.onnx_units.partition`: the deepest ``pkg.torch.onnx.name_scopes`` scope, ``scope#n`` for
the module's n-th call); consecutive executed nodes with the same key form one layer. Runtimes rename and fuse
nodes: ONNX Runtime names a fused Conv+Clip after the Clip's output and appends ``_nchwc`` for its blocked
layout; a name that is neither a node nor a node output of the graph is unmapped (key ``None``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_SUFFIXES = ("_nchwc",)


@dataclass(frozen=True)
class NodeTiming:
    """One executed node: runtime ``name``, ``op_type``, [start_ns, end_ns] on the tracer's clock."""

    name: str
    op_type: str
    start_ns: int
    end_ns: int


@dataclass(frozen=True)
class LayerTiming:
    """Consecutive nodes of one module call: ``key`` is ``scope`` or ``scope#n`` (None: unmapped)."""

    key: str | None
    nodes: tuple[NodeTiming, ...]

    @property
    def start_ns(self) -> int:
        return self.nodes[0].start_ns

    @property
    def end_ns(self) -> int:
        return self.nodes[-1].end_ns

    @property
    def op_types(self) -> str:
        return "+".join(dict.fromkeys(n.op_type for n in self.nodes))


class ScopeIndex:
    """Runtime node name -> layer key (``scope`` or ``scope#n``), from the ONNX graph the runtime loaded.

    Keys come from :func:`repliscope.diff.layers.onnx_units.partition` of that graph with every scope as a layer base,
    so the two calls of a shared module (a block's ReLU6 after the expand and after the depthwise conv) are
    ``_blocks.1._swish`` and ``_blocks.1._swish#2`` even after the runtime fused away the nodes between them."""

    def __init__(self, onnx_path: Path) -> None:
        import onnx

        from repliscope.diff.layers.onnx_units import node_scopes, partition

        graph = onnx.load(str(onnx_path), load_external_data=False).graph
        bases = {scope for node in graph.node for scope in node_scopes(node)}
        self._by_name: dict[str, str] = {}
        self._by_output: dict[str, str] = {}
        for unit in partition(graph, bases):
            if unit.key is None:
                continue
            for node in unit.nodes:
                self._by_name[node.name] = unit.key
                for out in node.output:
                    self._by_output[out] = unit.key

    def key(self, runtime_name: str) -> str | None:
        """The layer key of a runtime node name (``''`` is the model itself), None when unknown."""
        for name in (runtime_name, *(runtime_name[: -len(s)] for s in _SUFFIXES if runtime_name.endswith(s))):
            if name in self._by_name:
                return self._by_name[name]
            if name in self._by_output:
                return self._by_output[name]
        return None


def group_layers(nodes: Sequence[NodeTiming], index: ScopeIndex) -> list[LayerTiming]:
    """Nodes of ONE inference, in execution order -> layers (consecutive nodes with the same key)."""
    layers: list[LayerTiming] = []
    current: list[NodeTiming] = []
    key: str | None = None
    for node in nodes:
        k = index.key(node.name)
        if current and k == key and k is not None:
            current.append(node)
            continue
        if current:
            layers.append(LayerTiming(key, tuple(current)))
        current, key = [node], k
    if current:
        layers.append(LayerTiming(key, tuple(current)))
    return layers


def record_layers(
    tracer: Any, layers: Sequence[LayerTiming], tid: int, source: str, *, estimated_start: bool = False
) -> None:
    """Add one ``framework`` span per layer (name = its key, or ``(op types)`` when unmapped) and, at the
    ``library`` level, one span per node inside it."""
    library = tracer.rank >= 4
    for layer in layers:
        name = layer.key if layer.key is not None else f"({layer.op_types})"
        attrs: dict[str, Any] = {"layer": name, "op_type": layer.op_types, "source": source, "nodes": len(layer.nodes)}
        if estimated_start:
            attrs["estimated_start"] = True
        tracer.record(name, "framework", layer.start_ns, layer.end_ns, tid, attrs)
        if library:
            for node in layer.nodes:
                tracer.record(
                    node.name,
                    "library",
                    node.start_ns,
                    node.end_ns,
                    tid,
                    {"op_type": node.op_type, "layer": name, "source": source},
                )
