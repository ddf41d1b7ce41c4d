"""Group per-node timings of an ONNX-based runtime into layers named by the torch module that produced them.

A node's layer is the deepest ``pkg.torch.onnx.name_scopes`` scope of the ONNX node it came from (read with
:func:`repliscope.diff.onnx_units.node_scopes`, the layer diff's torch module ↔ ONNX node mapping); consecutive
nodes with the same scope form one layer and the n-th run of a scope in one inference is ``scope#n``, the
module's n-th call (as in :func:`repliscope.diff.onnx_units.partition`). Runtimes rename and fuse nodes: ONNX
Runtime names a fused Conv+Clip after the Clip's output and appends ``_nchwc`` for its blocked layout; a name
that is neither a node nor a node output of the graph is unmapped (key ``None``).
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
    """Runtime node name -> torch module scope, from the ONNX graph the runtime loaded."""

    def __init__(self, onnx_path: Path) -> None:
        import onnx

        from repliscope.diff.onnx_units import node_scopes

        graph = onnx.load(str(onnx_path), load_external_data=False).graph
        self._by_name: dict[str, str] = {}
        self._by_output: dict[str, str] = {}
        for node in graph.node:
            scopes = node_scopes(node)
            if not scopes:
                continue
            self._by_name[node.name] = scopes[-1]
            for out in node.output:
                self._by_output[out] = scopes[-1]

    def scope(self, runtime_name: str) -> str | None:
        """The deepest module scope of a runtime node name (``''`` is the model itself), None when unknown."""
        for name in (runtime_name, *(runtime_name[: -len(s)] for s in _SUFFIXES if runtime_name.endswith(s))):
            if name in self._by_name:
                return self._by_name[name]
            if name in self._by_output:
                return self._by_output[name]
        return None


def group_layers(nodes: Sequence[NodeTiming], index: ScopeIndex) -> list[LayerTiming]:
    """Nodes of ONE inference, in execution order -> layers (consecutive same scope; ``#n`` for the n-th run)."""
    layers: list[LayerTiming] = []
    runs: dict[str, int] = {}
    current: list[NodeTiming] = []
    scope: str | None = None
    for node in nodes:
        s = index.scope(node.name)
        if current and s == scope and s is not None:
            current.append(node)
            continue
        if current:
            layers.append(_layer(scope, current, runs))
        current, scope = [node], s
    if current:
        layers.append(_layer(scope, current, runs))
    return layers


def _layer(scope: str | None, nodes: list[NodeTiming], runs: dict[str, int]) -> LayerTiming:
    if scope is None:
        return LayerTiming(None, tuple(nodes))
    runs[scope] = runs.get(scope, 0) + 1
    return LayerTiming(scope if runs[scope] == 1 else f"{scope}#{runs[scope]}", tuple(nodes))


def record_layers(tracer: Any, layers: Sequence[LayerTiming], tid: int, source: str, *,
                  estimated_start: bool = False) -> None:
    """Add one ``framework`` span per layer (name = its key, or ``(op types)`` when unmapped) and, at the
    ``library`` level, one span per node inside it."""
    library = tracer.rank >= 4
    for layer in layers:
        name = layer.key if layer.key is not None else f"({layer.op_types})"
        attrs: dict[str, Any] = {"layer": layer.key or "", "op_type": layer.op_types, "source": source,
                                 "nodes": len(layer.nodes)}
        if estimated_start:
            attrs["estimated_start"] = True
        tracer.record(name, "framework", layer.start_ns, layer.end_ns, tid, attrs)
        if library:
            for node in layer.nodes:
                tracer.record(node.name, "library", node.start_ns, node.end_ns, tid,
                              {"op_type": node.op_type, "layer": layer.key or "", "source": source})
