"""The unit-level diff driver: golden and carried comparison of a candidate with a reference, any runtime behind
either side (the contracts of :mod:`repliscope.diff.base`: the torch module, libdarknet, ...).

Golden mode streams inside the reference forward: when a mapped layer's group starts, its input is copied
aside; when the layer ends, ``candidate.run_layer`` runs on that input and only scalar errors are kept.
Carried mode needs the reference outputs after the reference forward: each mapped output is written to a
temporary directory (``np.save``, one file per layer) during the SAME reference forward, then the
candidate's own forward streams its outputs and each is compared with the memory-mapped file, which is
deleted right after. At no point are all activations in memory.

Units are the reference's module layers AND the functional ops of its ``forward`` (``layer1.0/add``, see
``torch_reference.py``); an op with several activation inputs (``x + y``, ``q @ k``) is fed all of them. A reference op
the candidate reports as missing (``Candidate.unmatched``: no counterpart at all, e.g. a dropped residual add)
becomes a row with ``missing`` set and is a divergence in every mode, unless its output equals its input on the
batch (an identity the candidate may legitimately drop: then it is only listed). Every reference unit that no
compared unit covers is listed in ``uncompared`` with the reason. The candidate's whole-model output
(``Candidate.output``) is compared with the reference output (``LayerDiffResult.output``), judged against the
carried tolerance accumulated over all compared units; ``LayerDiffResult.passed`` needs every mode clean AND the
output within tolerance.
"""

from __future__ import annotations

import math
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from repliscope.diff.base import Candidate, LayerInfo, Reference, Unmatched
from repliscope.diff.layers.layer_result import (
    MODES,
    Cause,
    Divergence,
    LayerDiffResult,
    LayerRow,
    Mode,
    ModeSummary,
    NotCompared,
)
from repliscope.diff.layers.mapping import UnitInputsMismatch
from repliscope.diff.tolerance import FORMULA, ErrorStats, TolerancePolicy, accumulate, compare_arrays, output_scale
from repliscope.errors import RepliscopeError


def diff_layers(
    reference: Reference,
    candidate: Candidate,
    x: np.ndarray,
    modes: Sequence[Mode] = ("golden", "carried"),
    tolerance: TolerancePolicy | None = None,
    samples: Sequence[str] = (),
    workdir: Path | None = None,
    formula: str = FORMULA,
) -> LayerDiffResult:
    """Compare ``candidate`` with ``reference`` on the batch ``x`` (reference layout and dtype, e.g. float32
    NCHW (N, 3, 224, 224) of real pre-processed samples whose ids are ``samples``).

    ``modes``: any of ``golden`` (each candidate layer fed the reference input) and ``carried`` (the
    candidate's own forward). ``workdir``: where carried mode spills reference outputs (default: a
    temporary directory, removed afterwards). ``formula``: the tolerance formula as the result states it.
    """
    unknown_modes = [m for m in modes if m not in MODES]
    if unknown_modes or not modes:
        raise RepliscopeError(f"unknown diff mode(s) {unknown_modes or modes!r} (allowed: golden, carried)")
    policy = tolerance or TolerancePolicy()
    start = time.perf_counter()
    layers = reference.layers(x)
    info = {layer.path: layer for layer in layers}
    position = {layer.path: i for i, layer in enumerate(layers)}
    mapped = candidate.mapped_layers(layers)
    missing = [p for p in mapped if p not in info]
    if missing:
        raise RepliscopeError(
            f"the candidate maps {len(missing)} path(s) the reference does not have: {', '.join(missing[:20])}"
        )
    covers = {p: candidate.covers(p) for p in mapped}
    unmatched = {u.path: u for u in candidate.unmatched() if u.path in info}
    covered = {p for group in covers.values() for p in group}
    absent = [p for p, u in unmatched.items() if u.missing and p not in covered]
    order = sorted([*mapped, *absent], key=position.__getitem__)
    rows = {p: _row(i, p, covers.get(p, [p]), info) for i, p in enumerate(order)}
    for p in absent:
        rows[p].missing = unmatched[p].reason
    opener = {group[0]: p for p, group in covers.items()}
    wiring = _candidate_wiring(candidate, rows, info) if "golden" in modes else {}
    uses: Counter[str] = Counter(s for sources in wiring.values() for s in sources)
    kept: dict[str, np.ndarray] = {"": x} if "" in uses else {}
    tmp = Path(tempfile.mkdtemp(prefix="repliscope-diff-", dir=workdir)) if "carried" in modes else None
    local_tol: dict[str, float] = {}
    stash: dict[str, list[np.ndarray]] = {}
    identity: list[str] = []
    golden_shape: dict[str, str] = {}
    causes: list[Cause] = []

    def explain(mode: Mode, row: LayerRow, ref: np.ndarray, cand: np.ndarray) -> None:
        """A named cause for a diverging unit, from the reference (at most ``MAX_EXPLAINED`` per mode)."""
        stats = row.golden if mode == "golden" else row.carried
        if stats is None or stats.passed or not math.isfinite(stats.max_abs):
            return
        if sum(1 for c in causes if c.mode == mode) >= MAX_EXPLAINED:
            return
        found = reference.explain(row.path, ref, _reference_layout(cand, candidate))
        if found is not None:
            causes.append(found.model_copy(update={"mode": mode}))

    def on_start(path: str, inputs: list[np.ndarray]) -> None:
        if "golden" in modes and path in opener and opener[path] not in wiring:
            stash[opener[path]] = [np.array(a, copy=True) for a in inputs]

    def fed(path: str, tol: float) -> list[np.ndarray] | None:
        """Golden inputs of ``path``: the reference's own, or the reference outputs of the layers the candidate's
        unit reads (None, and the row divergent, when it reads a layer the reference computes after it)."""
        if path not in wiring:
            return stash.pop(path)
        sources = wiring[path]
        late = [s for s in sources if s not in kept]
        if late:
            rows[path].notes.append(
                f"golden: the candidate's unit reads the output of {', '.join(late)}, which the reference computes "
                "after it: it is wired to a later layer"
            )
            rows[path].golden = _diverged(tol)
            return None
        arrays = [kept[s] for s in sources]
        for s in sources:
            uses[s] -= 1
            if uses[s] <= 0:
                kept.pop(s, None)
        return arrays

    def on_end(path: str, inputs: list[np.ndarray], output: np.ndarray) -> None:
        if path in uses:
            kept[path] = np.array(output, copy=True)
        row = rows.get(path)
        if row is None:
            return
        scale = output_scale(output)
        row.ref_shape, row.ref_max_abs, row.dtype = list(output.shape), scale, str(output.dtype)
        if row.missing:
            if len(inputs) == 1 and inputs[0].shape == output.shape and np.array_equal(inputs[0], output):
                identity.append(path)
            return
        local_tol[path] = policy.tolerance(path, row.kind.split("+"), output.dtype, row.reduction, scale)
        given = fed(path, local_tol[path]) if "golden" in modes else None
        if given is not None:
            try:
                cand = candidate.run_layer(path, given)
            except UnitInputsMismatch as exc:
                reads = _external_inputs(row.covers, info)
                if reads is not None and reads != exc.candidate_inputs:  # e.g. a dropped residual add
                    row.notes.append(
                        f"{exc}. The reference computes it from {reads} tensor(s): the candidate reads "
                        "other inputs (a dropped or extra input such as a residual, or a wrong "
                        "mapping)"
                    )
                    row.golden = _diverged(local_tol[path])
                else:  # the inputs of a fused group enter at several reference layers: cannot be fed
                    row.notes.append(f"golden mode cannot feed it ({exc}); compared in carried mode only")
            else:
                before = len(row.notes)
                row.golden = _compare(row, output, cand, candidate, local_tol[path], policy.rel_floor)
                if len(row.notes) > before:  # a shape mismatch: judged with carried mode below
                    golden_shape[path] = row.notes.pop()
                else:
                    explain("golden", row, output, cand)
                    if not row.golden.passed and math.isfinite(row.golden.max_abs):
                        _made_by(reference, candidate, row, given, output, policy)
        if tmp is not None:
            np.save(tmp / f"{row.index}.npy", output)

    try:
        # golden only: the candidate's own forward runs first, while memory is low (carried mode reuses its run)
        cand_out = candidate.output(x) if tmp is None else None
        ref_out = reference.run(x, on_start, on_end)
        if tmp is not None:
            carried_tol = dict(zip(mapped, accumulate([local_tol.get(p, 0.0) for p in mapped]), strict=True))
            if policy.carried == "local":
                carried_tol = local_tol
            for path, cand in candidate.forward_layers(x, mapped):
                row = rows[path]
                file = tmp / f"{row.index}.npy"
                ref = np.load(file, mmap_mode="r")
                row.carried = _compare(row, np.asarray(ref), cand, candidate, carried_tol[path], policy.rel_floor)
                explain("carried", row, np.asarray(ref), cand)
                del ref
                file.unlink()
        if tmp is not None:
            cand_out = candidate.output(x)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    for path, note in golden_shape.items():
        # the candidate's op, fed the reference input, gives another shape: a divergence, unless its own forward
        # gives the reference's shape and value (carried passed), i.e. it reads its input in another layout
        # (a port reducing a permuted tensor over the permuted axis): then golden cannot compare it
        row = rows[path]
        if row.carried is not None and row.carried.passed:
            row.golden = None
            row.notes.append(
                f"golden mode cannot compare it: fed the reference input, the candidate's unit gives "
                f"another shape ({note}), so it reads its input in another layout; compared in "
                "carried mode only, where it passes"
            )
        elif note not in row.notes:
            row.notes.append(
                note
                if row.carried is not None
                else f"{note} (carried mode, --mode both, tells a bug from an input read in another layout)"
            )
    uncompared = [
        NotCompared(
            path=p,
            kind=rows[p].kind,
            source=rows[p].source,
            reason="identity on this batch (output equals input); the candidate has no node for it",
            op=info[p].op,
        )
        for p in identity
    ]
    for p in identity:
        del rows[p]
    ordered = sorted(rows.values(), key=lambda r: r.index)
    for i, row in enumerate(ordered):  # no gaps where identity ops were dropped (the plot's x axis)
        row.index = i
    uncompared += [
        NotCompared(
            path=layer.path,
            kind=layer.kind,
            source=layer.source,
            reason=_why_not(layer, unmatched, candidate),
            op=layer.op,
        )
        for layer in layers
        if layer.path not in covered and layer.path not in rows and layer.path not in identity
    ]
    multi = reference.multi_output_ops(x)
    uncompared += [
        NotCompared(
            path=m.path,
            kind=m.kind,
            source=m.source,
            reason="returns several tensors; not a unit (each consumer is compared, fed the reference tensors)",
            op=m.op,
        )
        for m in multi
    ]
    uncompared.sort(key=lambda n: position.get(n.path, -1))
    notes = [*reference.notes, *candidate.notes]
    notes += [f"'{r.path}': {note}" for r in ordered for note in r.notes]  # why a unit diverged structurally
    if "carried" in modes:
        notes += [
            f"'{r.path}': no carried output from the candidate" for r in ordered if r.carried is None and not r.missing
        ]
    notes += [f"'{c.path}' ({c.mode}): {c.explanation}" for c in causes]
    output, output_note = _compare_output(ref_out, cand_out, [local_tol[p] for p in mapped if p in local_tol], policy)
    return assemble(
        ordered,
        modes,
        ops={layer.path for layer in layers if layer.is_op},
        reference=reference.describe(),
        candidate=candidate.describe(),
        input_shape=list(x.shape),
        input_dtype=str(x.dtype),
        samples=list(samples),
        tolerance=policy,
        formula=formula,
        reference_layers=sum(1 for layer in layers if not layer.is_op),
        reference_ops=sum(1 for layer in layers if layer.is_op),
        uncompared=uncompared,
        output=output,
        output_note=output_note,
        seconds=time.perf_counter() - start,
        notes=notes,
        causes=causes,
    )


def assemble(
    rows: list[LayerRow], modes: Sequence[Mode], *, ops: set[str] | None = None, **fields: Any
) -> LayerDiffResult:
    """The :class:`LayerDiffResult` of a unit-level diff from its ``rows`` (in execution order): the first divergent
    unit and the summary of each mode are derived here, the same way for every unit-level diff (this driver's and
    the node-by-node runtime diff's); ``ops``: the rows' paths that are functional ops; ``fields``: the rest."""
    return LayerDiffResult(
        modes=list(modes),
        layers=rows,
        first_divergent={m: _first_divergent(rows, m) for m in modes},
        summary={m: _summary(rows, m, ops or set()) for m in modes},
        **fields,
    )


MAX_EXPLAINED = 8
"""Diverging units per mode the reference is asked to explain (:meth:`~repliscope.diff.base.Reference.explain`)."""


def _reference_layout(cand: np.ndarray, candidate: Candidate) -> np.ndarray:
    """The candidate's output as :func:`_compare` compares it (NHWC transposed to NCHW when it declares NHWC)."""
    cand = np.asarray(cand)
    return cand.transpose(0, 3, 1, 2) if candidate.output_layout == "NHWC" and cand.ndim == 4 else cand


def _why_not(layer: LayerInfo, unmatched: dict[str, Unmatched], candidate: Candidate) -> str:
    if layer.path in unmatched:
        return unmatched[layer.path].reason
    if layer.is_op and not candidate.supports_ops:
        return f"the {candidate.name} candidate compares module layers only, not functional ops"
    return "the candidate maps no unit to it"


def _compare_output(
    ref: np.ndarray | None, cand: np.ndarray | None, local: list[float], policy: TolerancePolicy
) -> tuple[ErrorStats | None, str]:
    """The final output, judged like a carried unit: the local tolerances of every compared unit accumulated
    (or, with no compared unit, the element-wise formula at the output's magnitude). Not compared, with no
    note, when the reference has no single whole-model output (libdarknet's YOLO: one output per yolo layer,
    each a compared unit)."""
    if ref is None:
        return None, ""
    if cand is None:
        return None, "the candidate does not give its whole-model output"
    cand = np.asarray(cand)
    if cand.shape != ref.shape:
        return None, f"output shape mismatch: reference {ref.shape} vs candidate {cand.shape}"
    scale = output_scale(ref)
    tol = accumulate(local)[-1] if local else policy.tolerance("<output>", [], ref.dtype, 1, scale)
    return compare_arrays(ref, cand, tol, policy.rel_floor, scale), ""


def _row(index: int, path: str, group: list[str], info: dict[str, LayerInfo]) -> LayerRow:
    unknown = [p for p in group if p not in info]
    if unknown:
        raise RepliscopeError(f"candidate layer '{path}' covers unknown reference layer(s) {', '.join(unknown)}")
    members = [info[p] for p in group]
    main = max(members, key=lambda m: (m.reduction, m.path == path))
    return LayerRow(
        index=index,
        path=path,
        covers=list(group),
        kind="+".join(m.kind for m in members),
        source=main.source,
        reduction=max(m.reduction for m in members),
        dtype="",
        ref_shape=[],
        ref_max_abs=0.0,
        op=info[path].op or info[path].type_name,
    )


def _compare(
    row: LayerRow, ref: np.ndarray, cand: np.ndarray, candidate: Candidate, tol: float, rel_floor: float
) -> ErrorStats:
    if candidate.output_layout == "NHWC" and np.ndim(cand) == 4:
        row.candidate_layout = "NHWC (transposed to NCHW)"
    cand = _reference_layout(cand, candidate)
    if cand.shape != ref.shape:
        note = f"shape mismatch: reference {tuple(ref.shape)} vs candidate {tuple(cand.shape)}"
        if note not in row.notes:
            row.notes.append(note)
        return _diverged(tol)
    return compare_arrays(ref, cand, tol, rel_floor, row.ref_max_abs)


def _made_by(
    reference: Reference,
    candidate: Candidate,
    row: LayerRow,
    given: list[np.ndarray],
    output: np.ndarray,
    policy: TolerancePolicy,
) -> None:
    """Golden mode, a diverging unit: which of the candidate's sub-layers makes the error (``row.made_by``, with a
    note). The candidate's sub-layer outputs on the same inputs are matched in order against the values the
    reference unit goes through (:meth:`~repliscope.diff.base.Reference.stages`, each judged with the unit's
    tolerance at its own magnitude): the first sub-layer whose output matches no reference stage makes the error;
    a unit whose sub-layers all match but stop before the reference's last stage lacks a step."""
    subs = candidate.sublayer_outputs(row.path, given)
    if not subs:
        return
    kinds = row.kind.split("+")
    stages = [
        (words, value, policy.tolerance(row.path, kinds, value.dtype, row.reduction, output_scale(value)))
        for words, value in (reference.stages(row.path, output) or [("output", output)])
    ]
    reached, matched = -1, ""
    for label, out in subs:
        comparable = [k for k, (_, value, _) in enumerate(stages) if value.shape == out.shape and k >= reached]
        if not comparable:
            continue  # another shape (a padding before a convolution): not comparable with any stage
        hits = [
            k
            for k in comparable
            if compare_arrays(stages[k][1], out, stages[k][2], policy.rel_floor, output_scale(stages[k][1])).passed
        ]
        if hits:
            reached, matched = max(hits), label
            continue
        target = next((k for k in comparable if k > reached), comparable[-1])
        error = float(np.max(np.abs(np.asarray(out, np.float64) - stages[target][1])))
        row.made_by = label
        given_words = f"its input ({matched}'s output) matches the reference {stages[reached][0]}; " if matched else ""
        row.notes.append(
            f"golden: the error is made by the candidate's sub-layer {label}: {given_words}its output differs from "
            f"the reference {stages[target][0]} by up to {error:.3g}"
        )
        return
    if matched and reached < len(stages) - 1:
        row.made_by = matched
        row.notes.append(
            f"golden: the candidate's unit stops short: its last sub-layer {matched} matches the reference "
            f"{stages[reached][0]}, not {stages[-1][0]} (a step is missing)"
        )


def _group_reads(group: list[str], info: dict[str, LayerInfo]) -> list[str] | None:
    """The reference units whose outputs the layers of ``group`` read from outside it, in the order they are
    first read ("" for the model input); None when a producer is unknown."""
    inside = set(group)
    found: list[str] = []
    for path in group:
        producers = info[path].producers
        if not producers:
            return None
        found += [p for p in producers if p not in inside and p not in found]
    return found


def _read_names(sources: Sequence[str]) -> str:
    return "[" + ", ".join(s or "the model input" for s in sources) + "]"


def _candidate_wiring(
    candidate: Candidate, rows: dict[str, LayerRow], info: dict[str, LayerInfo]
) -> dict[str, list[str]]:
    """Golden mode: for each compared unit whose candidate reads OTHER reference layers' outputs than the reference
    does (another order included: a concatenation of swapped inputs), those layers in the candidate's order. Such a
    unit is fed what its own graph reads, so a wiring mistake fails where it is made; a note on the row says so."""
    wiring: dict[str, list[str]] = {}
    for path, row in rows.items():
        if row.missing:
            continue
        sources = candidate.input_sources(path)
        if sources is None:
            continue
        reads = _group_reads(row.covers, info)
        if reads is not None and list(sources) == reads:
            continue
        unknown = [s for s in sources if s and s not in info]
        if unknown:
            raise RepliscopeError(f"candidate unit '{path}' reads unknown reference layer(s) {', '.join(unknown)}")
        wiring[path] = list(sources)
        theirs = "" if reads is None else f", the reference {_read_names(reads)}"
        row.notes.append(
            f"golden: fed as the candidate's graph wires it: its unit reads {_read_names(sources)}{theirs}"
        )
    return wiring


def _external_inputs(group: list[str], info: dict[str, LayerInfo]) -> int | None:
    """How many distinct tensors the reference layers of ``group`` read from outside it (their traced
    producers), or None when a producer is unknown (a tensor no unit made, other than the model input)."""
    inside = set(group)
    found: set[str] = set()
    for k, path in enumerate(group):
        producers = info[path].producers
        if not producers:
            return None
        for producer in producers:
            if producer == "" and (k or len(producers) > 1):
                return None
            if producer not in inside:
                found.add(producer)
    return len(found)


def _diverged(tol: float) -> ErrorStats:
    """A unit whose candidate output cannot be compared element-wise (shape or inputs differ): failed, inf error."""
    return ErrorStats(
        max_abs=float("inf"), mean_abs=float("inf"), max_rel=float("inf"), ulp=float("inf"), tolerance=tol, passed=False
    )


def _first_divergent(rows: list[LayerRow], mode: Mode) -> Divergence | None:
    """The first row that is missing or fails in ``mode`` (a missing row has no error: infinite, tolerance 0)."""
    for row in rows:
        stats = row.golden if mode == "golden" else row.carried
        if row.missing:
            error: dict[str, Any] = {"max_abs": math.inf, "tolerance": 0.0, "ratio": math.inf, "missing": row.missing}
        elif stats is not None and not stats.passed:
            error = {"max_abs": stats.max_abs, "tolerance": stats.tolerance, "ratio": stats.ratio}
        else:
            continue
        by = row.made_by if mode == "golden" else ""
        return Divergence(
            mode=mode,
            index=row.index,
            path=row.path,
            covers=row.covers,
            kind=row.kind,
            source=row.source,
            made_by=by,
            **error,
        )
    return None


def _summary(rows: list[LayerRow], mode: Mode, ops: set[str]) -> ModeSummary:
    done = [r for r in rows if (r.golden if mode == "golden" else r.carried) is not None]
    stats = [s for s in (r.golden if mode == "golden" else r.carried for r in done) if s is not None]
    passed = sum(1 for s in stats if s.passed)
    return ModeSummary(
        compared=len(stats),
        passed=passed,
        failed=len(stats) - passed,
        max_ratio=max((s.ratio for s in stats), default=0.0),
        ops=sum(1 for r in done if r.path in ops),
        reference_units=sum(len(r.covers) for r in done),
        missing=sum(1 for r in rows if r.missing),
    )
