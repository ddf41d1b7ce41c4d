"""Pair the reference's functional ops (``layer1.0/add``) with the ONNX graph's functional units.

Both sides are grouped by (module scope, call site): the reference op's container path without ``#n`` and
the ``file:line`` of the call in ``forward``; the ONNX unit's deepest name scope and the last frame of its
``pkg.torch.onnx.stack_trace`` (compared by file name and line, so an export made in another checkout still
matches). Inside a group the two op-name sequences (aliases unified: ``flatten``/``reshape`` are aten
``view``, ``x[0]`` is ``select``) are aligned with :class:`difflib.SequenceMatcher`:

* equal names: paired;
* a run of different names of the SAME length (``relu`` where the ONNX has ``elu``): paired too, with a note,
  so golden mode measures the difference the wrong op makes;
* reference ops left over: the ONNX graph has no node for them (a dropped residual add, a removed scale):
  reported as missing (:class:`~repliscope.diff.base.Unmatched` with ``missing=True``);
* ONNX units left over: run in carried mode only (the candidate computes something the reference does not).

Reference ops whose group has no ONNX unit at all (no call site in common, e.g. an export with line numbers
from an older source) are then aligned within their module scope alone, in the same way.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Sequence

from repliscope.diff.base import LayerInfo, Unmatched
from repliscope.diff.onnx_units import Unit

_ALIASES = {
    "flatten": "view", "reshape": "view", "_unsafe_view": "view", "view_as": "view", "unflatten": "view",
    "squeeze": "view", "unsqueeze": "view",
    "getitem": "index", "select": "index", "slice": "index", "index": "index",
    "permute": "transpose", "T": "transpose", "mT": "transpose", "t": "transpose",
    "_softmax": "softmax", "native_layer_norm": "layer_norm", "mm": "matmul", "bmm": "matmul",
    "rsub": "sub", "true_divide": "div", "multiply": "mul", "sigmoid_": "sigmoid",
}


def canonical(op: str) -> str:
    """The op name both sides agree on (``flatten`` and aten ``view`` -> ``view``)."""
    return _ALIASES.get(op, op)


def match_ops(ops: Sequence[LayerInfo], units: Sequence[Unit]) -> tuple[dict[str, Unit], list[Unmatched],
                                                                       list[str]]:
    """Returns (reference op path -> ONNX unit, reference ops without a counterpart, notes)."""
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
        _align(members, by_site[key], pairs, notes, used)
    by_scope: dict[str, list[Unit]] = {}
    for unit in functional:
        if unit.index not in used:
            by_scope.setdefault(unit.scope, []).append(unit)
    scoped: dict[str, list[LayerInfo]] = {}
    for op in left_ops:
        scoped.setdefault(_scope(op.path), []).append(op)
    for scope, members in scoped.items():
        _align(members, by_scope.get(scope, []), pairs, notes, used)
    missing = [Unmatched(op.path, _missing_reason(op), missing=True) for op in ops if op.path not in pairs]
    return pairs, missing, notes


def _align(ops: list[LayerInfo], units: list[Unit], pairs: dict[str, Unit], notes: list[str],
           used: set[int]) -> None:
    a = [canonical(op.op) for op in ops]
    b = [canonical(u.op) for u in units]
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal" or (tag == "replace" and i2 - i1 == j2 - j1):
            for op, unit in zip(ops[i1:i2], units[j1:j2], strict=True):
                pairs[op.path] = unit
                used.add(unit.index)
                if tag == "replace":
                    notes.append(f"'{op.path}': the reference calls {op.op}, the ONNX graph has {unit.op} "
                                 f"({'+'.join(n.op_type for n in unit.nodes)}) at the same place")


def _missing_reason(op: LayerInfo) -> str:
    return (f"the ONNX graph has no node for this {op.op} (scope '{_scope(op.path) or '<root>'}', "
            f"{_site(op.source)})")


def _scope(path: str) -> str:
    """Container path of an op path without the call index: ``blocks.0#2/add#3`` -> ``blocks.0``."""
    return path.rsplit("/", 1)[0].split("#", 1)[0]


def _site(source: str) -> str:
    """``file:line`` reduced to the file's base name (``tiny_resnet.py:31``)."""
    return os.path.basename(source) if source else ""
