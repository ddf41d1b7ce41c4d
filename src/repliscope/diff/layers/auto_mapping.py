"""Propose a reference -> candidate mapping by aligning the two execution orders (no names needed).

Inputs: the reference layers in the order they end, with output shapes (traced on a batch of one), and the
candidate's units in execution order (:class:`~repliscope.diff.layers.mapping.UnitInfo`, shapes in the candidate's
layout). A reference layer and a candidate unit may be paired when

* their output shapes agree, batch axis ignored (an NHWC candidate's 4-D ``(H, W, C)`` against the
  reference's ``(C, H, W)``), and
* the candidate unit could compute the reference layer: a layer with weights (conv, linear, norm) is only
  paired with a unit with weights or a bias add, never with an activation, pooling, padding or reshape; a
  binary element-wise op (a residual ``add``, a ``mul``) only with a unit of the same family; a data movement
  (``transpose``, ``flatten``, ``reshape``) only with a data-movement unit;
* the reference layers one unit stands for (the paired one and the unpaired ones since the previous pair)
  hold at most ONE heavy layer (conv, linear, matmul), and then the unit has weights: a fused unit computes
  one convolution, never two.

Among the alignments with the most pairs, the one whose unit names hold the module paths of the reference layers
they compute wins (``q`` -> ``/q/Add_output_0``, not ``/k/MatMul_output_0``). Units named after the reference
paths are paired by name first (``layer2_0_proj_0`` is ``layer2.0.proj.0``:
parallel branches may run in another order in the candidate). A reference layer nested in a paired one (the
``static_padding`` of a "same" conv) is not paired itself: the outer layer's unit covers it, so golden mode
feeds the outer layer's input. The alignment of the rest keeps the order on both
sides and pairs as many layers as possible (dynamic programming,
O(reference x candidate x 2)). Several reference layers with the same output shape before one candidate unit
(conv + batch norm + ReLU6 fused into one TFLite ``CONV_2D``) go to the LAST of them, and the unit
``covers`` the earlier ones: its output is the output of the last. Candidate units without a partner (a
``PAD``, a ``RESHAPE``) are listed, never compared. A reference layer that cannot be placed in order (TensorFlow
lists attention's ``v`` projection after the softmax, and one unit never covers ``v`` and the score matmul
together) is left out of the alignment at the cost of one pair, so the rest still aligns; it is then paired
out of order with the one unused unit named after it whose shape and op agree (``v`` -> ``v_1/BiasAdd``), else
left UNCOVERED (``uncovered_reference``, with the reason in ``reasons``). A ``-1`` (unknown) dimension of a
candidate shape agrees with any size. It is a proposal: print it, save it (``--save-mapping``),
edit it, and pass it back with ``--mapping``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from repliscope.diff.layers.mapping import UnitInfo

_WEIGHTED = re.compile(
    r"conv|linear|dense|gemm|matmul|fully_?connected|batch_?norm|layer_?norm|group_?norm|"
    r"instance_?norm|einsum|bilinear|embedding|multihead",
    re.IGNORECASE,
)
_HEAVY = re.compile(
    r"conv|linear|dense|gemm|matmul|fully_?connected|einsum|bilinear|multihead|^bmm$|^mm$", re.IGNORECASE
)
_BINARY = [
    re.compile(p, re.IGNORECASE)
    for p in (r"_*i?add(v2)?_*|add_n", r"_*i?mul_*|multiply", r"_*i?sub_*|subtract", r"_*i?(true)?div_*|divide|realdiv")
]
_MOVE = re.compile(r"transpose|permute|flatten|reshape|^view$|squeeze|expand_?dims", re.IGNORECASE)
_BIAS = re.compile(r"bias_?add|^add$|^addv2$", re.IGNORECASE)


@dataclass(frozen=True)
class ReferenceUnit:
    """A reference layer: ``path``, ``kind`` (class or op) and output ``shape`` (batch first)."""

    path: str
    kind: str
    shape: tuple[int, ...]


@dataclass
class Proposal:
    """The proposed ``mapping`` (reference path -> candidate unit name, reference order), what each pair
    ``covers`` (reference paths, in order), candidate units left without a partner and reference layers no
    pair covers."""

    mapping: dict[str, str]
    covers: dict[str, list[str]]
    unmatched_candidate: list[str] = field(default_factory=list)
    uncovered_reference: list[str] = field(default_factory=list)
    ops: dict[str, str] = field(default_factory=dict)
    """Candidate unit name -> op type, for printing."""
    reasons: dict[str, str] = field(default_factory=dict)
    """Uncovered reference path -> why it was left out (layers the alignment could not place in order)."""

    def header(self, candidate: str) -> str:
        return (
            f"layer mapping proposed by repliscope (sequence alignment by order, output shape and op type) for "
            f"{candidate}: {len(self.mapping)} pairs, {len(self.unmatched_candidate)} candidate units "
            f"unpaired, {len(self.uncovered_reference)} reference layers uncovered.\n"
            "Check and edit it, then pass it back with --mapping FILE (reference_path: candidate_unit)."
        )


def reference_units(reference: Any, x: np.ndarray) -> list[ReferenceUnit]:
    """The reference layers of a :class:`~repliscope.diff.layers.torch_reference.TorchReference` with output shapes."""
    return [ReferenceUnit(t.info.path, t.info.kind, tuple(t.output_shape)) for t in reference.trace(x)]


def shapes_agree(ref: Sequence[int], cand: Sequence[int], layout: str) -> bool:
    """Output shapes equal without the batch axis; an NHWC candidate's (H, W, C) matches (C, H, W); a negative
    (unknown, e.g. a TensorFlow graph's ``-1``) candidate dimension agrees with any size."""
    r, c = tuple(ref[1:]), tuple(cand[1:])

    def same(a: tuple[int, ...]) -> bool:
        return len(a) == len(c) and all(d < 0 or d == e for d, e in zip(c, a, strict=True))

    return same(r) or (layout == "NHWC" and len(r) == 3 and same((r[1], r[2], r[0])))


def could_compute(ref_kind: str, cand_op: str) -> bool:
    """A reference layer with weights needs a candidate unit with weights (or a bias add after a matmul); a
    binary element-wise op (add, mul, sub, div) needs a unit of the same family (possibly with a fused
    activation, e.g. TFLite ``ADD``); a data movement (transpose, permute, flatten, reshape, view, (un)squeeze)
    needs a data-movement unit."""
    for family in _BINARY:
        if family.fullmatch(ref_kind):
            return bool(family.fullmatch(cand_op))
    if _MOVE.search(ref_kind):
        return bool(_MOVE.search(cand_op))
    if not _WEIGHTED.search(ref_kind):
        return True
    return bool(_WEIGHTED.search(cand_op) or _BIAS.search(cand_op))


def normalized(name: str) -> str:
    """Lower case, every run of non-alphanumerics one ``_``: ``layer1.0/add`` and ``layer1_0_add`` agree."""
    return re.sub(r"[^0-9a-z]+", "_", name.lower()).strip("_")


def propose(reference: Sequence[ReferenceUnit], candidate: Sequence[UnitInfo], layout: str = "NCHW") -> Proposal:
    """Pair ``reference`` and ``candidate`` (both in execution order): first by name (a unit whose normalized
    name equals exactly one reference path's, with agreeing shapes: a port named after the torch modules), then
    the rest by :func:`align`; a pair covers the unpaired reference layers since the previous pair."""
    by_name: dict[str, list[int]] = {}
    for k, c in enumerate(candidate):
        by_name.setdefault(normalized(c.name), []).append(k)
    ref_names = [normalized(r.path) for r in reference]
    shifted = shifted_containers([r.path for r in reference], [c.name for c in candidate])
    anchors: dict[int, int] = {}
    for i, r in enumerate(reference):
        if "/" in r.path and r.path.split("/", 1)[0] in shifted:
            continue
        found = by_name.get(ref_names[i], [])
        if (
            len(found) == 1
            and ref_names.count(ref_names[i]) == 1
            and shapes_agree(r.shape, candidate[found[0]].shape, layout)
        ):
            anchors[i] = found[0]
    rest_ref = [i for i in range(len(reference)) if i not in anchors]
    used = set(anchors.values())
    rest_cand = [k for k in range(len(candidate)) if k not in used]
    sub_ref, sub_cand = [reference[i] for i in rest_ref], [candidate[k] for k in rest_cand]
    aligned, left_out = align(sub_ref, sub_cand, layout, _heavy_namesakes(sub_ref, sub_cand, layout))
    pairs = dict(anchors)
    pairs.update({rest_ref[i]: rest_cand[k] for i, k in aligned})
    out_of_order = _pair_out_of_order([rest_ref[i] for i in left_out], reference, candidate, pairs, layout)
    pairs.update(out_of_order)
    skipped = {rest_ref[i] for i in left_out} - set(out_of_order)
    bases = {reference[ri].path.split("#", 1)[0] for ri in pairs}
    for ri in list(pairs):  # a layer nested in a paired layer (a conv's own padding) is covered by it
        base = reference[ri].path.split("#", 1)[0]
        if any(base.startswith(b + ".") for b in bases):
            del pairs[ri]
    mapping: dict[str, str] = {}
    covers: dict[str, list[str]] = {}
    start = 0
    for ri in sorted(pairs):
        path = reference[ri].path
        mapping[path] = candidate[pairs[ri]].name
        if ri in out_of_order:  # computes itself only; the layers before it belong to the next in-order pair
            covers[path] = [path]
            continue
        covers[path] = start_order(
            [
                r.path
                for k, r in enumerate(reference[start : ri + 1], start)
                if k not in skipped and k not in out_of_order
            ]
        )
        start = ri + 1
    paired = set(pairs.values())
    uncovered = sorted(skipped | {k for k in range(start, len(reference)) if k not in out_of_order})
    reason = "no candidate unit in execution order; give --mapping to pair it"
    return Proposal(
        mapping=mapping,
        covers=covers,
        unmatched_candidate=[c.name for k, c in enumerate(candidate) if k not in paired],
        uncovered_reference=[reference[k].path for k in uncovered],
        ops={c.name: c.op for c in candidate},
        reasons={reference[k].path: reason for k in sorted(skipped)},
    )


def _heavy_namesakes(reference: Sequence[ReferenceUnit], candidate: Sequence[UnitInfo], layout: str) -> dict[int, int]:
    """Heavy module layers (conv, linear) -> the ONE candidate unit with weights or a bias add named after them
    and after no other reference layer, with agreeing shape (``v`` -> ``functional_1/v_1/BiasAdd``, which
    TensorFlow may list after the softmax it does not feed). A layer the next one may be fused into (a conv
    before its batch norm: same shape, not heavy) is none: the fused unit goes to the last layer it computes."""
    used: set[int] = set()
    named = [[i for i, r in enumerate(reference) if _named_after(r.path, c.name)] for c in candidate]
    found: dict[int, int] = {}
    for i, r in enumerate(reference):
        if "/" in r.path or not _HEAVY.search(r.kind):
            continue
        after = reference[i + 1] if i + 1 < len(reference) else None
        if after is not None and not _HEAVY.search(after.kind) and after.shape[1:] == r.shape[1:]:
            continue
        fits = [
            k
            for k, c in enumerate(candidate)
            if k not in used
            and named[k] == [i]
            and bool(_HEAVY.search(c.op) or _BIAS.search(c.op))
            and could_compute(r.kind, c.op)
            and shapes_agree(r.shape, c.shape, layout)
        ]
        if len(fits) == 1:
            found[i] = fits[0]
    return found


def _pair_out_of_order(
    left_out: Sequence[int],
    reference: Sequence[ReferenceUnit],
    candidate: Sequence[UnitInfo],
    pairs: dict[int, int],
    layout: str,
) -> dict[int, int]:
    """Reference layers the alignment left out (indices into ``reference``) paired with the ONE unused candidate
    unit named after them (:func:`_named_after`) whose shape agrees and that could compute them (a heavy layer:
    a unit with weights or a bias add); none when there are several or none."""
    used = set(pairs.values())
    found: dict[int, int] = {}
    for ri in left_out:
        r = reference[ri]
        heavy = bool(_HEAVY.search(r.kind))
        fits = [
            k
            for k, c in enumerate(candidate)
            if k not in used
            and _named_after(r.path, c.name)
            and shapes_agree(r.shape, c.shape, layout)
            and could_compute(r.kind, c.op)
            and (not heavy or bool(_HEAVY.search(c.op) or _BIAS.search(c.op)))
        ]
        if len(fits) == 1:
            found[ri] = fits[0]
            used.add(fits[0])
    return found


def shifted_containers(reference: Iterable[str], candidate: Iterable[str]) -> set[str]:
    """Containers whose functional ops are named differently on the two sides (a torch port calling ``F.gelu``
    where the reference calls ``F.relu``): an op name is its position among the ops of its container call
    (``/relu#2`` is the second relu), so after a changed op the same name means another op. Their ops are
    paired by the alignment, never by name. Only candidates naming ops ``container/op`` (a torch port) count."""

    def ops(names: Iterable[str]) -> dict[str, list[str]]:
        found: dict[str, list[str]] = {}
        for name in names:
            if "/" in name:
                container, op = name.split("/", 1)
                found.setdefault(container, []).append(op)
        return found

    ref, cand = ops(reference), ops(candidate)
    return {c for c in ref if c in cand and ref[c] != cand[c]}


def align(
    reference: Sequence[ReferenceUnit],
    candidate: Sequence[UnitInfo],
    layout: str = "NCHW",
    namesakes: dict[int, int] | None = None,
) -> tuple[list[tuple[int, int]], list[int]]:
    """Order-preserving pairs (reference index, candidate index) maximizing their number, and the reference
    indices left out (neither paired nor covered: placing them would cost more pairs than it gives); see the
    module docstring. ``namesakes`` (reference index -> candidate index, :func:`_heavy_namesakes`): those two
    pair only with each other, and leaving such a layer out (to pair it out of order) costs little."""
    n, m = len(reference), len(candidate)
    heavy = [bool(_HEAVY.search(r.kind)) for r in reference]
    cand_heavy = [bool(_HEAVY.search(c.op) or _BIAS.search(c.op)) for c in candidate]
    namesakes = namesakes or {}
    owner = {j: i for i, j in namesakes.items()}
    agree = [
        [
            shapes_agree(r.shape, c.shape, layout)
            and could_compute(r.kind, c.op)
            and namesakes.get(i, j) == j
            and owner.get(j, i) == i
            for j, c in enumerate(candidate)
        ]
        for i, r in enumerate(reference)
    ]

    def can_match(i: int, j: int, h: int) -> bool:
        """Pair reference i with unit j when the pending group already holds ``h`` heavy layers."""
        group_heavy = h + heavy[i]
        return agree[i][j] and group_heavy <= 1 and (group_heavy == 0 or cand_heavy[j])

    # a pair scores ``unit`` plus a tie-break bonus (less than ``unit`` over the whole alignment): 2 when the
    # candidate name holds the module path of the reference layer or of one it may fuse (the same-shape layers
    # before it, back to the first heavy one: ``/stem/Conv_output_0`` for ``bn`` after ``stem``), 1 when it holds
    # no module path, 0 when it holds another module's; so among the alignments with the most pairs, the one that
    # agrees with the names wins (``q`` -> ``/q/Add_output_0``, not ``/k/MatMul_output_0``), and a fused unit
    # still goes to the LAST layer it computes
    unit = 2 * min(n, m) + 1
    fusable: list[list[str]] = []
    for i, r in enumerate(reference):
        group = [r.path]
        k = i
        while k > 0 and not heavy[k] and tuple(reference[k - 1].shape[1:]) == tuple(r.shape[1:]):
            k -= 1
            group.append(reference[k].path)
        fusable.append(group)
    modules = [r.path for r in reference if "/" not in r.path]

    def named(i: int, name: str) -> int:
        """2 when ``name`` holds a path of ``fusable[i]``, 1 when it holds no reference module path, 0 when it
        holds another module's (``ln_1/add_1`` is the norm's, not the residual ``/add#2``'s)."""
        if any(_named_after(p, name) for p in modules if p not in fusable[i]):
            return 0
        return 2 if any(_named_after(p, name) for p in fusable[i]) else 1

    bonus = [[named(i, c.name) for c in candidate] for i in range(n)]

    def gain(i: int, j: int) -> int:
        return unit + bonus[i][j]

    # leaving a reference layer out costs more than one pair (done only when it lets at least two more pairs be
    # made, never to pair a lone ReLU unit after a conv); a layer with a namesake unit is paired with it out of
    # order instead, so that costs less than an in-order pair
    leave = [-(unit - 1) if i in namesakes else unit + 2 for i in range(n)]

    neg = -(10**9)
    # score[i, j, h]: most pairs aligning reference[:i] with candidate[:j], h = the unpaired reference layers
    # since the last pair include a heavy one (a candidate unit computes at most one conv / matmul)
    score = np.full((n + 1, m + 1, 2), neg, dtype=np.int64)
    score[0, :, 0] = 0
    for i in range(n + 1):
        for j in range(m + 1):
            for h in (0, 1):
                here = score[i, j, h]
                if here == neg:
                    continue
                if j < m and score[i, j + 1, h] < here:
                    score[i, j + 1, h] = here  # candidate unit j left unpaired
                if i < n:
                    nh = h + heavy[i]
                    if nh <= 1 and score[i + 1, j, nh] < here:
                        score[i + 1, j, nh] = here  # reference layer i covered by the next pair
                    if score[i + 1, j, h] < here - leave[i]:
                        score[i + 1, j, h] = here - leave[i]  # reference layer i left out (not placeable in order)
                    if j < m and can_match(i, j, h) and score[i + 1, j + 1, 0] < here + gain(i, j):
                        score[i + 1, j + 1, 0] = here + gain(i, j)
    pairs: list[tuple[int, int]] = []
    left_out: list[int] = []
    # end where the most pairs were made; reference layers after the last pair that cannot all be covered
    # (two heavy layers with no possible pair between them) stay uncovered instead of ending the alignment
    best = int(score[:, m, :].max())
    if best <= 0:
        return pairs, left_out
    i, h = max(((i, h) for i in range(n + 1) for h in (0, 1) if score[i, m, h] == best), key=lambda t: (t[0], -t[1]))
    j = m
    while i > 0 or j > 0:
        value = score[i, j, h]
        if h == 0 and i > 0 and j > 0:
            prev = next(
                (
                    ph
                    for ph in (0, 1)
                    if can_match(i - 1, j - 1, ph) and score[i - 1, j - 1, ph] + gain(i - 1, j - 1) == value
                ),
                None,
            )
            if prev is not None:  # prefer pairing the latest reference layer (fusion)
                pairs.append((i - 1, j - 1))
                i, j, h = i - 1, j - 1, prev
                continue
        if j > 0 and score[i, j - 1, h] == value:  # an unpaired candidate unit, so later layers pair later
            j -= 1
            continue
        ph = h - heavy[i - 1]
        if ph < 0 or score[i - 1, j, ph] != value:  # not covered by the next pair: left out
            left_out.append(i - 1)
            ph = h
        i, h = i - 1, ph
    pairs.reverse()
    left_out.reverse()
    return pairs, left_out


def _named_after(path: str, name: str) -> bool:
    """The candidate unit ``name`` holds the reference module path of ``path`` as whole tokens (``/q/Add_output_0``
    for ``q``, ``layer1_0_conv1`` for ``layer1.0.conv1``); for a functional op of the root module, its op name
    (``relu_1/Relu`` for ``/relu#2``, ``silu_1/IdentityN`` for ``/silu``: a Keras model's layers named after
    the ops)."""
    module, _, op = path.partition("/")
    token = (module or op).split("#", 1)[0]
    return bool(token) and f"_{normalized(token)}_" in f"_{normalized(name)}_"


def start_order(group: list[str]) -> list[str]:
    """``group`` (reference paths in the order they END) in the order they START: the outermost ancestor of
    the first one comes first (a parent starts before its children), e.g. ``[_conv_stem, _conv_stem.static_
    padding, _bn0]``. Golden mode feeds a unit the input of the first."""
    first = group[0].split("#", 1)[0]
    ancestors = [p for p in group if first.startswith(p.split("#", 1)[0] + ".")]
    if not ancestors:
        return group
    head = min(ancestors, key=lambda p: p.count("."))
    return [head, *[p for p in group if p != head]]


def covers_for(
    reference: Sequence[str], mapped: Sequence[str], producers: Mapping[str, Sequence[str]] | None = None
) -> dict[str, list[str]]:
    """For a user mapping: what each mapped reference path covers, as a fused candidate unit would.

    Without ``producers``: the unmapped layers since the previous mapped one (reference order). With ``producers``
    (each reference path -> the paths whose outputs it reads; "" for the model input), a graph that branches (a
    Darknet route, a skip connection): only the unmapped layers on the mapped one's own single-input chain back to
    the previous mapped one. A layer off that chain (another branch's head) is covered by nobody and listed as
    not compared, and golden mode feeds the unit the input of the first layer of its own chain."""
    wanted = set(mapped)
    covers: dict[str, list[str]] = {}
    if producers is not None:
        taken: set[str] = set()
        for path in reference:
            if path not in wanted:
                continue
            chain = [path]
            while True:
                sources = list(producers.get(chain[-1], ()))
                if len(sources) != 1 or not sources[0] or sources[0] in wanted or sources[0] in taken:
                    break
                chain.append(sources[0])
            taken.update(chain)
            covers[path] = chain[::-1]
        return covers
    pending: list[str] = []
    for path in reference:
        pending.append(path)
        if path in wanted:
            covers[path], pending = start_order(pending), []
    return covers
