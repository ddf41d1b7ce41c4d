"""Pair the reference's functional ops (``layer1.0/add``) with the ONNX graph's functional units.

Both sides are grouped by (module scope, call site): the reference op's container path without ``#n`` and
the ``file:line`` of the call in ``forward``; the ONNX unit's deepest name scope and the last frame of its
``pkg.torch.onnx.stack_trace`` (compared by file name and line, so an export made in another checkout still
matches). Inside a group:

* as many reference ops as ONNX units: paired in order; where the names differ (``relu`` where the ONNX has
  ``elu``) the pair is kept, with a note, so golden mode measures the difference the wrong op makes;
* otherwise an order-preserving alignment of same-name ops (aliases unified: ``flatten``/``reshape`` are aten
  ``view``, ``x[0]`` is ``select``) maximising, per pair, 1 + the module units both sides read from + the module
  units both sides feed (the data flow tells the two residual adds of a block apart when one is dropped).
  Reference ops left over: the ONNX graph has no node for them (a dropped residual add, a removed scale),
  reported as missing (:class:`~repliscope.diff.base.Unmatched` with ``missing=True``); ONNX units left over run
  in carried mode only (the candidate computes something the reference does not).

Reference ops whose group has no ONNX unit at all (no call site in common, e.g. an export with line numbers
from an older source) are then aligned within their module scope alone, in the same way.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from repliscope.diff.base import LayerInfo, Unmatched
from repliscope.diff.layers.onnx_units import Unit

_ALIASES = {
    "flatten": "view",
    "reshape": "view",
    "_unsafe_view": "view",
    "view_as": "view",
    "unflatten": "view",
    "squeeze": "view",
    "unsqueeze": "view",
    "getitem": "index",
    "select": "index",
    "slice": "index",
    "index": "index",
    "permute": "transpose",
    "T": "transpose",
    "mT": "transpose",
    "t": "transpose",
    "_softmax": "softmax",
    "native_layer_norm": "layer_norm",
    "mm": "matmul",
    "bmm": "matmul",
    "rsub": "sub",
    "true_divide": "div",
    "multiply": "mul",
    "sigmoid_": "sigmoid",
}


def canonical(op: str) -> str:
    """The op name both sides agree on (``flatten`` and aten ``view`` -> ``view``)."""
    return _ALIASES.get(op, op)


def match_ops(
    ops: Sequence[LayerInfo], units: Sequence[Unit], layers: Sequence[LayerInfo] = ()
) -> tuple[dict[str, Unit], list[Unmatched], list[str]]:
    """Returns (reference op path -> ONNX unit, reference ops without a counterpart, notes). ``layers``: every
    reference unit (for the data flow between ops and module layers; optional)."""
    flow = _Flow(units, layers)
    functional = [u for u in units if u.key is None and u.fx]
    pairs: dict[str, Unit] = {}
    notes: list[str] = []
    left_ops: list[LayerInfo] = []
    used: set[int] = set()
    by_site: dict[tuple[str, str], list[Unit]] = {}
    for unit in functional:
        by_site.setdefault((unit.scope, _site(unit.source)), []).append(unit)
    groups: dict[tuple[str, str], list[LayerInfo]] = {}
    for op in ops:
        groups.setdefault((_scope(op.path), _site(op.source)), []).append(op)
    for key, members in groups.items():
        if key not in by_site:
            left_ops.extend(members)
            continue
        _align(members, by_site[key], pairs, notes, used, flow)
    by_scope: dict[str, list[Unit]] = {}
    for unit in functional:
        if unit.index not in used:
            by_scope.setdefault(unit.scope, []).append(unit)
    scoped: dict[str, list[LayerInfo]] = {}
    for op in left_ops:
        scoped.setdefault(_scope(op.path), []).append(op)
    for scope, members in scoped.items():
        _align(members, by_scope.get(scope, []), pairs, notes, used, flow)
    missing = [Unmatched(op.path, _missing_reason(op), missing=True) for op in ops if op.path not in pairs]
    return pairs, missing, notes


class _Flow:
    """Module units each side's ops read from and feed (module paths = ONNX unit keys)."""

    def __init__(self, units: Sequence[Unit], layers: Sequence[LayerInfo]) -> None:
        modules = {layer.path for layer in layers if not layer.is_op}
        self.ref_in = {layer.path: {p for p in layer.producers if p in modules} for layer in layers}
        self.ref_out: dict[str, set[str]] = {}
        for layer in layers:
            if not layer.is_op:
                for p in layer.producers:
                    self.ref_out.setdefault(p, set()).add(layer.path)
        made = {o: u for u in units for n in u.nodes for o in n.output}
        self.onnx_in: dict[int, set[str]] = {}
        self.onnx_out: dict[int, set[str]] = {}
        for u in units:
            for name in u.inputs:
                src = made.get(name)
                if src is not None and u.key is not None and not u.fx:
                    self.onnx_out.setdefault(src.index, set()).add(u.key)
                if src is not None and src.key is not None and not src.fx:
                    self.onnx_in.setdefault(u.index, set()).add(src.key)

    def weight(self, op: LayerInfo, unit: Unit) -> int:
        if canonical(op.op) != canonical(unit.op):
            return 0
        shared_in = self.ref_in.get(op.path, set()) & self.onnx_in.get(unit.index, set())
        shared_out = self.ref_out.get(op.path, set()) & self.onnx_out.get(unit.index, set())
        return 1 + len(shared_in) + len(shared_out)


def _align(
    ops: list[LayerInfo], units: list[Unit], pairs: dict[str, Unit], notes: list[str], used: set[int], flow: _Flow
) -> None:
    if len(ops) == len(units):
        chosen = list(zip(ops, units, strict=True))
    else:
        chosen = _best_alignment(ops, units, flow)
    for op, unit in chosen:
        pairs[op.path] = unit
        used.add(unit.index)
        if canonical(op.op) != canonical(unit.op):
            notes.append(
                f"'{op.path}': the reference calls {op.op}, the ONNX graph has {unit.op} "
                f"({'+'.join(n.op_type for n in unit.nodes)}) at the same place"
            )


def _best_alignment(ops: list[LayerInfo], units: list[Unit], flow: _Flow) -> list[tuple[LayerInfo, Unit]]:
    """Order-preserving pairs of same-name ops with the largest total :meth:`_Flow.weight` (dynamic
    programming over both sequences; ties keep the earlier ops paired)."""
    n, m = len(ops), len(units)
    best = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        for j in range(m - 1, -1, -1):
            w = flow.weight(ops[i], units[j])
            best[i][j] = max(best[i + 1][j], best[i][j + 1], best[i + 1][j + 1] + w if w else 0)
    chosen, i, j = [], 0, 0
    while i < n and j < m:
        w = flow.weight(ops[i], units[j])
        if w and best[i][j] == best[i + 1][j + 1] + w:
            chosen.append((ops[i], units[j]))
            i, j = i + 1, j + 1
        elif best[i][j] == best[i][j + 1]:
            j += 1
        else:
            i += 1
    return chosen


def _missing_reason(op: LayerInfo) -> str:
    return f"the ONNX graph has no node for this {op.op} (scope '{_scope(op.path) or '<root>'}', {_site(op.source)})"


def _scope(path: str) -> str:
    """Container path of an op path without the call index: ``blocks.0#2/add#3`` -> ``blocks.0``."""
    return path.rsplit("/", 1)[0].split("#", 1)[0]


def _site(source: str) -> str:
    """``file:line`` reduced to the file's base name (``tiny_resnet.py:31``)."""
    return os.path.basename(source) if source else ""
