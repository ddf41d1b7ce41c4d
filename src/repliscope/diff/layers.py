"""Layer-level diff driver: golden and carried comparison of a candidate with the torch reference.

Golden mode streams inside the reference forward: when a mapped layer's group starts, its input is copied
aside; when the layer ends, ``candidate.run_layer`` runs on that input and only scalar errors are kept.
Carried mode needs the reference outputs after the reference forward: each mapped output is written to a
temporary directory (``np.save``, one file per layer) during the SAME reference forward, then the
candidate's own forward streams its outputs and each is compared with the memory-mapped file, which is
deleted right after. At no point are all activations in memory.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from repliscope.diff.base import Candidate, LayerInfo
from repliscope.diff.layer_result import MODES, Divergence, LayerDiffResult, LayerRow, Mode, ModeSummary
from repliscope.diff.reference import TorchReference
from repliscope.diff.tolerance import FORMULA, ErrorStats, TolerancePolicy, accumulate, compare_arrays, output_scale
from repliscope.errors import RepliscopeError


def diff_layers(reference: TorchReference, candidate: Candidate, x: np.ndarray,
                modes: Sequence[Mode] = ("golden", "carried"), tolerance: TolerancePolicy | None = None,
                samples: Sequence[str] = (), workdir: Path | None = None) -> LayerDiffResult:
    """Compare ``candidate`` with ``reference`` on the batch ``x`` (reference layout and dtype, e.g. float32
    NCHW (N, 3, 224, 224) of real pre-processed samples whose ids are ``samples``).

    ``modes``: any of ``golden`` (each candidate layer fed the reference input) and ``carried`` (the
    candidate's own forward). ``workdir``: where carried mode spills reference outputs (default: a
    temporary directory, removed afterwards).
    """
    unknown_modes = [m for m in modes if m not in MODES]
    if unknown_modes or not modes:
        raise RepliscopeError(f"unknown diff mode(s) {unknown_modes or modes!r} (allowed: golden, carried)")
    policy = tolerance or TolerancePolicy()
    start = time.perf_counter()
    layers = reference.layers(x)
    info = {layer.path: layer for layer in layers}
    mapped = candidate.mapped_layers(layers)
    missing = [p for p in mapped if p not in info]
    if missing:
        raise RepliscopeError(f"the candidate maps {len(missing)} path(s) the reference does not have: "
                              f"{', '.join(missing[:20])}")
    covers = {p: candidate.covers(p) for p in mapped}
    rows = {p: _row(i, p, covers[p], info) for i, p in enumerate(mapped)}
    opener = {group[0]: p for p, group in covers.items()}
    tmp = Path(tempfile.mkdtemp(prefix="repliscope-diff-", dir=workdir)) if "carried" in modes else None
    local_tol: dict[str, float] = {}
    stash: dict[str, list[np.ndarray]] = {}

    def on_start(path: str, inputs: list[np.ndarray]) -> None:
        if "golden" in modes and path in opener:
            stash[opener[path]] = [np.array(a, copy=True) for a in inputs]

    def on_end(path: str, inputs: list[np.ndarray], output: np.ndarray) -> None:
        row = rows.get(path)
        if row is None:
            return
        scale = output_scale(output)
        row.ref_shape, row.ref_max_abs, row.dtype = list(output.shape), scale, str(output.dtype)
        local_tol[path] = policy.tolerance(path, row.kind.split("+"), output.dtype, row.reduction, scale)
        if "golden" in modes:
            cand = candidate.run_layer(path, stash.pop(path))
            row.golden = _compare(row, output, cand, candidate, local_tol[path], policy.rel_floor)
        if tmp is not None:
            np.save(tmp / f"{row.index}.npy", output)

    try:
        reference.run(x, on_start, on_end)
        if tmp is not None:
            carried_tol = dict(zip(mapped, accumulate([local_tol.get(p, 0.0) for p in mapped]), strict=True))
            if policy.carried == "local":
                carried_tol = local_tol
            for path, cand in candidate.forward_layers(x, mapped):
                row = rows[path]
                file = tmp / f"{row.index}.npy"
                ref = np.load(file, mmap_mode="r")
                row.carried = _compare(row, np.asarray(ref), cand, candidate, carried_tol[path], policy.rel_floor)
                del ref
                file.unlink()
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    ordered = sorted(rows.values(), key=lambda r: r.index)
    covered = {p for group in covers.values() for p in group}
    notes = list(getattr(candidate, "notes", []))
    if "carried" in modes:
        notes += [f"'{r.path}': no carried output from the candidate" for r in ordered if r.carried is None]
    return LayerDiffResult(
        reference={"framework": reference.name, "module": type(reference.module).__qualname__},
        candidate=candidate.describe(), modes=list(modes), input_shape=list(x.shape), input_dtype=str(x.dtype),
        samples=list(samples), tolerance=policy, formula=FORMULA, layers=ordered, reference_layers=len(layers),
        not_compared=[layer.path for layer in layers if layer.path not in covered],
        first_divergent={m: _first_divergent(ordered, m) for m in modes},
        summary={m: _summary(ordered, m) for m in modes}, seconds=time.perf_counter() - start, notes=notes,
    )


def _row(index: int, path: str, group: list[str], info: dict[str, LayerInfo]) -> LayerRow:
    unknown = [p for p in group if p not in info]
    if unknown:
        raise RepliscopeError(f"candidate layer '{path}' covers unknown reference layer(s) {', '.join(unknown)}")
    members = [info[p] for p in group]
    main = max(members, key=lambda m: (m.reduction, m.path == path))
    return LayerRow(index=index, path=path, covers=list(group), kind="+".join(m.kind for m in members),
                    source=main.source, reduction=max(m.reduction for m in members), dtype="", ref_shape=[],
                    ref_max_abs=0.0)


def _compare(row: LayerRow, ref: np.ndarray, cand: np.ndarray, candidate: Candidate, tol: float,
             rel_floor: float) -> ErrorStats:
    cand = np.asarray(cand)
    if candidate.output_layout == "NHWC" and cand.ndim == 4:
        cand = cand.transpose(0, 3, 1, 2)
        row.candidate_layout = "NHWC (transposed to NCHW)"
    if cand.shape != ref.shape:
        note = f"shape mismatch: reference {tuple(ref.shape)} vs candidate {tuple(cand.shape)}"
        if note not in row.notes:
            row.notes.append(note)
        return ErrorStats(max_abs=float("inf"), mean_abs=float("inf"), max_rel=float("inf"), ulp=float("inf"),
                          tolerance=tol, passed=False)
    return compare_arrays(ref, cand, tol, rel_floor, row.ref_max_abs)


def _first_divergent(rows: list[LayerRow], mode: Mode) -> Divergence | None:
    for row in rows:
        stats = row.golden if mode == "golden" else row.carried
        if stats is not None and not stats.passed:
            return Divergence(mode=mode, index=row.index, path=row.path, covers=row.covers, kind=row.kind,
                              source=row.source, max_abs=stats.max_abs, tolerance=stats.tolerance,
                              ratio=stats.ratio)
    return None


def _summary(rows: list[LayerRow], mode: Mode) -> ModeSummary:
    stats = [s for s in (r.golden if mode == "golden" else r.carried for r in rows) if s is not None]
    passed = sum(1 for s in stats if s.passed)
    return ModeSummary(compared=len(stats), passed=passed, failed=len(stats) - passed,
                       max_ratio=max((s.ratio for s in stats), default=0.0))
