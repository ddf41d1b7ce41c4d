"""Differential test of a user's pre-processing against the manifest's (``repliscope diff MANIFEST --pipeline``).

Per real sample: the manifest pipeline runs on the file's bytes, the candidate (:mod:`.pipeline_candidate`) on its
path; the candidate's output is aligned with the manifest's model input (batch axis, HWC/CHW) and compared value by
value in float64. Tolerance, per sample: ``k * eps(dtype) * max(1, max|ref|)`` for a float model input (float32:
eps = 2**-23, default k = :data:`DEFAULT_K`), 0 for an integer one (bit-exact). A value *differs* when its
|error| exceeds the tolerance. When any sample differs, :mod:`.pipeline_diagnosis` searches the registered pitfall
variants for the one that reproduces the candidate.

Stages (a stage list or a Compose) are matched to manifest ops once, on the first sample both sides pre-process:
each stage to the op after the previous match whose name plays its role (:data:`ROLES`), else whose output is
closest; the last stage to the model input. A stage equal to its op's output up to a per-channel affine map (e.g.
``ToTensor``'s [0, 1] where the manifest keeps [0, 255]) counts as "same content, other units" unless the op is a
normalization constant (``subtract_mean`` / ``divide_std``). The first divergent stage is the first one over
tolerance.

Timing: each side's per-image pre-processing wall time (reading the file included), one thread for OpenCV and
torch, the first sample left out as warm-up.
"""

from __future__ import annotations

import math
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from repliscope.datasets.base import Sample, read_sample
from repliscope.diff.pipeline.candidate import LOADER_STAGE, PipelineCandidate, align, describe_array, to_array
from repliscope.diff.pipeline.diagnosis import Diagnosis, Differing, hints, search
from repliscope.diff.pipeline.units import Units, find_units, undo
from repliscope.diff.task_level import TaskDiffResult
from repliscope.diff.tolerance import dtype_eps
from repliscope.errors import RepliscopeError
from repliscope.evaluation.engine import apply_op, stable_reason
from repliscope.manifest.loader import LoadedManifest
from repliscope.ops.pipeline import Pipeline, decode_input
from repliscope.pitfalls.base import PitfallContext

DEFAULT_K = 4.0
"""Tolerance factor: a float input may differ by 4 rounding steps of its largest value (e.g. (x - m) / s vs
x / s - m / s)."""
KEEP_DIFFERING = 16
"""Differing samples kept (worst first) for the diagnosis."""
ROLES: dict[str, tuple[str, ...]] = {
    "decode": ("decode", "load", "read", "open", "imread"),
    "color_layout": ("color", "bgr", "rgb", "cvtcolor"),
    "resize": ("resize", "rescale"),
    "letterbox": ("letterbox", "pad", "resize"),
    "center_crop": ("crop",),
    "to_float": ("float", "cast", "tensor", "dtype"),
    "cast": ("float", "cast", "dtype"),
    "scale": ("scale",),
    "subtract_mean": ("normal", "mean"),
    "divide_std": ("normal", "std"),
    "data_layout": ("layout", "transpose", "permute", "chw", "tensor"),
}
"""Manifest op -> words in a stage name that say the stage plays that op's role."""
STRICT_OPS = ("subtract_mean", "divide_std")
"""Ops whose constants ARE the content: a stage matched to one is never excused as "other units"."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SampleResult(_Model):
    sample_id: str
    max_abs_error: float | None = None
    mean_abs_error: float | None = None
    fraction_differing: float | None = None
    tolerance: float | None = None
    error: str | None = None
    """Why the sample was not compared (the candidate raised, another shape, unreadable file)."""


class StageResult(_Model):
    stage: str
    compared_with: str | None
    """``preprocess[2] center_crop`` (the manifest op whose output plays the same role), or None."""
    output: str = ""
    samples: int = 0
    max_abs_error: float | None = None
    mean_abs_error: float | None = None
    fraction_differing: float | None = None
    within_tolerance: bool | None = None
    units: str = ""
    """The units difference found (:mod:`.units`), e.g. ``values in other units: 0–1 where the manifest has
    0–255 ...``; the errors are then those left after undoing it, in the manifest's units."""
    note: str = ""


class Timing(_Model):
    reference_ms_per_image: float | None
    candidate_ms_per_image: float | None
    ratio: float | None
    """candidate / reference."""
    samples_timed: int
    threads: int = 1
    method: str = "wall time per image, file read included, first sample left out (warm-up), one thread"


class PipelineDiffResult(_Model):
    kind: str = "pipeline_diff"
    manifest: str
    manifest_name: str
    task: str
    candidate: str
    candidate_kind: str
    dataset: str
    samples: int
    """Samples compared value by value."""
    failed: int = 0
    candidate_output: str = ""
    manifest_input: str = ""
    output_message: str = ""
    alignment: list[str] = Field(default_factory=list)
    tolerance: float = 0.0
    tolerance_rule: str = ""
    max_abs_error: float | None = None
    mean_abs_error: float | None = None
    fraction_differing: float | None = None
    verdict: str = "match"
    diagnosis: Diagnosis
    units: str = ""
    """The model input in other units than the manifest's (:mod:`.units`), found on the worst sample; empty when
    not. The errors above stay those of the values as given (the model is fed them)."""
    units_content_max_abs_error: float | None = None
    """What differs once those units are undone (worst sample, the manifest's units)."""
    first_divergent_stage: str | None = None
    stages: list[StageResult] = Field(default_factory=list)
    timing: Timing
    per_sample: list[SampleResult] = Field(default_factory=list)
    worst_samples: list[str] = Field(default_factory=list)
    model_effect: TaskDiffResult | None = None
    notes: list[str] = Field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.verdict == "match"


@dataclass
class _Acc:
    """Running error statistics of one compared quantity."""

    max_abs: float = 0.0
    sum_abs: float = 0.0
    differing: int = 0
    values: int = 0
    samples: int = 0

    def add(self, ref: np.ndarray, cand: np.ndarray, tol: float) -> tuple[float, float, float]:
        if ref.size == 0:
            return 0.0, 0.0, 0.0
        diff = np.subtract(cand, ref, dtype=np.float64)
        np.abs(diff, out=diff)
        mx = float(diff.max())
        n_diff = int(diff.size - np.count_nonzero(diff <= tol))  # NaN counts as differing
        if math.isfinite(mx):
            total = float(diff.sum())
        else:  # inf / NaN somewhere: the max says so, the mean is over the finite values
            mx = math.inf
            finite = diff[np.isfinite(diff)]
            total = float(finite.sum())
        mean = total / diff.size
        self.max_abs = max(self.max_abs, mx)
        self.sum_abs += total
        self.differing += n_diff
        self.values += diff.size
        self.samples += 1
        return mx, mean, n_diff / diff.size


def tolerance_of(ref: np.ndarray, k: float) -> float:
    """``k * eps(dtype) * max(1, max|ref|)`` for float, 0 for integer dtypes."""
    if not np.issubdtype(ref.dtype, np.floating):
        return 0.0
    scale = float(np.max(np.abs(ref))) if ref.size else 0.0
    return k * dtype_eps(ref.dtype) * max(1.0, scale if math.isfinite(scale) else 1.0)


def preprocess_pipeline(loaded: LoadedManifest) -> Pipeline:
    """The manifest's pre-processing ops, and the post-processing ops that build without the model's class names
    (pitfall variants look at them to know a detection pipeline; model inputs never depend on them)."""
    from repliscope.errors import OpSpecError
    from repliscope.ops.base import BuildContext, PostOp
    from repliscope.ops.pipeline import build_op

    try:
        pre = Pipeline.from_specs(loaded.manifest.preprocess, []).pre_ops
    except OpSpecError as exc:
        raise RepliscopeError(f"{loaded.path}: {exc}") from None
    post: list[PostOp] = []
    for spec in loaded.manifest.postprocess:
        try:
            op = build_op(spec, "post", BuildContext())
        except RepliscopeError:  # e.g. 'labels' needs the class names: irrelevant to a model input
            continue
        if isinstance(op, PostOp):
            post.append(op)
    return Pipeline(pre, post)


@contextmanager
def single_thread() -> Iterator[None]:
    """OpenCV and (when imported) torch on one thread for the timed loop; restored after."""
    import cv2

    old_cv = cv2.getNumThreads()
    torch = sys.modules.get("torch")
    old_torch = torch.get_num_threads() if torch is not None else None
    cv2.setNumThreads(1)
    if torch is not None:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        cv2.setNumThreads(old_cv)
        if torch is not None and old_torch is not None:
            torch.set_num_threads(old_torch)


@dataclass
class _StageMatch:
    op_index: int | None
    units: str = ""  # "scale [..] offset [..]" when matched up to an affine map
    other_units: Units | None = None
    """A units difference with a content difference left (:func:`find_units`): compared after undoing it."""
    strict_units: str = ""
    """A normalisation-constant stage in other units (compared strictly; the units are named in its note)."""


@dataclass
class _Run:
    """Everything gathered over the samples."""

    per_sample: list[SampleResult] = field(default_factory=list)
    acc: _Acc = field(default_factory=_Acc)
    differing: list[tuple[float, Differing, np.ndarray]] = field(default_factory=list)  # (max err, ..., reference)
    ref_ms: list[float] = field(default_factory=list)
    cand_ms: list[float] = field(default_factory=list)
    described: str = ""
    alignment: set[str] = field(default_factory=set)
    stage_map: list[_StageMatch] | None = None
    stage_accs: list[_Acc] = field(default_factory=list)
    stage_units: list[str] = field(default_factory=list)
    stage_shapes: list[str] = field(default_factory=list)
    tolerance: float = 0.0
    shape_errors: int = 0


def diff_pipeline(
    loaded: LoadedManifest,
    candidate: PipelineCandidate,
    samples: Sequence[Sample],
    dataset: str,
    *,
    k: float = DEFAULT_K,
    diagnose: bool = True,
    on_pair: Callable[[Sample, np.ndarray, np.ndarray | None, Any], None] | None = None,
    worst: list[tuple[str, np.ndarray, np.ndarray]] | None = None,
) -> PipelineDiffResult:
    """Compare ``candidate`` with the manifest's pre-processing on ``samples``.

    ``on_pair(sample, reference input, candidate input or None, geometry)`` sees every sample the reference
    pre-processed (``geometry``: the manifest pipeline's, for post-processing detections)
    (the model-effect comparison uses it); ``worst`` receives (sample id, reference, candidate) of the (up to 3)
    samples that differ most (the heatmap panels)."""
    m = loaded.manifest
    spec = m.inputs[0]
    expected = tuple(int(d) for d in spec.shape[1:])
    layout = spec.layout
    pipeline = preprocess_pipeline(loaded)
    run = _Run()
    with single_thread(), tempfile.TemporaryDirectory(prefix="repliscope-pipediff-") as tmp:
        for index, smp in enumerate(samples):
            _one_sample(index, smp, pipeline, candidate, expected, layout, k, run, Path(tmp), on_pair)
    compared = [s for s in run.per_sample if s.max_abs_error is not None]
    if samples and not compared:
        first = next((s.error for s in run.per_sample if s.error), "no sample")
        raise RepliscopeError(f"no sample could be compared: {run.per_sample[0].sample_id}: {first}")
    # run settings only matter to the variants that change no pre-processing (listed apart, never searched)
    ctx = PitfallContext(
        input_shape=tuple(spec.shape), input_layout=layout, runtime=m.framework.name, batch_size=8, threads=2
    )
    differing = sorted(run.differing, key=lambda t: -t[0])
    verdict_match = not differing and all(s.error is None for s in run.per_sample)
    if differing and diagnose:
        diag = search(pipeline, ctx, m.task, [d for _, d, _ in differing], expected, run.tolerance, differing[0][0])
    elif differing:
        diag = Diagnosis(verdict="unexplained", message="not searched (--no-diagnosis)")
    elif verdict_match:
        diag = Diagnosis(
            verdict="match",
            message=f"the candidate's output equals the manifest's on all "
            f"{len(compared)} samples (max |error| {run.acc.max_abs:.3g}, tolerance "
            f"{run.tolerance:.3g})",
        )
    else:
        n_bad = sum(1 for s in run.per_sample if s.error)
        diag = Diagnosis(
            verdict="unexplained",
            message=f"the compared samples match, but {n_bad} sample(s) could not be compared (see per_sample errors)",
        )
    if worst is not None:
        worst.extend((d.sample.id, ref, d.candidate) for _, d, ref in differing[:3])
    units = find_units(differing[0][2], differing[0][1].candidate, layout.endswith("CHW")) if differing else None
    if differing and diag.verdict == "unexplained":
        _, top, ref = differing[0]
        stds = divide_std_values(pipeline)
        if units is None:
            diag.hints = hints(ref, top.candidate, layout, run.tolerance, stds)
        else:  # the units named first; the other hints read the content, in the manifest's units
            restored = undo(top.candidate, units, layout.endswith("CHW")).astype(np.float64)
            diag.hints = [
                f"{units.description}: most of the max |error| {units.raw_max_abs_error:.3g} is that scale; after "
                f"undoing it, max |error| {units.content_max_abs_error:.3g} in the manifest's units (worst sample)",
                *hints(ref, restored, layout, run.tolerance, stds),
            ]
            rest = diag.message.removeprefix("unexplained: ")
            diag.message = f"the model input is in other units ({units.description}); {rest}"
    stages = _stage_results(candidate, pipeline, run)
    first_div = (
        next((s.stage for s in stages if s.within_tolerance is False), None)
        if candidate.kind != "function" and diag.verdict != "match"
        else None
    )
    timing = _timing(run)
    acc = run.acc
    failed = sum(1 for s in run.per_sample if s.error is not None)
    return PipelineDiffResult(
        manifest=str(loaded.path),
        manifest_name=m.name,
        task=m.task,
        candidate=candidate.spec,
        candidate_kind=candidate.kind,
        dataset=dataset,
        samples=len(compared),
        failed=failed,
        candidate_output=run.described,
        manifest_input=f"{expected} {spec.dtype} ({layout} without the batch axis)",
        output_message=f"candidate returns {run.described}; the manifest's input is {expected} {spec.dtype}",
        alignment=sorted(run.alignment),
        tolerance=run.tolerance,
        tolerance_rule=f"per sample: {k:g} * eps(dtype) * max(1, max|ref|) for float inputs, 0 (bit-exact) for "
        "integer inputs; a value differs when |error| > tolerance",
        max_abs_error=acc.max_abs if acc.samples else None,
        mean_abs_error=acc.sum_abs / acc.values if acc.values else None,
        fraction_differing=acc.differing / acc.values if acc.values else None,
        verdict=diag.verdict,
        diagnosis=diag,
        units=units.description if units is not None else "",
        units_content_max_abs_error=units.content_max_abs_error if units is not None else None,
        first_divergent_stage=first_div,
        stages=stages,
        timing=timing,
        per_sample=run.per_sample,
        worst_samples=[d.sample.id for _, d, _ in differing[:3]],
        notes=_notes(run, m.inputs[0].dtype),
    )


def divide_std_values(pipeline: Pipeline) -> list[float]:
    """The last ``divide_std``'s value(s) of the pipeline ([] without one): what a wrap-around hint divides 256 by."""
    stds = [op.params.model_dump()["value"] for op in pipeline.pre_ops if op.name == "divide_std"]
    if not stds:
        return []
    last = stds[-1]
    return [float(v) for v in last] if isinstance(last, list) else [float(last)]


def _notes(run: _Run, dtype: str) -> list[str]:
    notes = []
    if run.described and not run.described.split(" (")[0].endswith(dtype):
        notes.append(
            f"the candidate's dtype is not the model's {dtype}: values were compared in float64; the model "
            f"is fed {dtype}"
        )
    if run.alignment:
        notes.append(
            "aligned before comparing: " + "; ".join(sorted(run.alignment)) + " (the code feeding the model "
            "must do the same)"
        )
    return notes


def _path_of(smp: Sample, data: bytes, tmp: Path, index: int) -> str:
    if smp.location and os.path.isfile(smp.location):
        return smp.location
    suffix = Path(smp.id).suffix or ".img"
    path = tmp / f"{index}{suffix}"
    path.write_bytes(data)
    return str(path)


def _one_sample(
    index: int,
    smp: Sample,
    pipeline: Pipeline,
    candidate: PipelineCandidate,
    expected: tuple[int, ...],
    layout: str,
    k: float,
    run: _Run,
    tmp: Path,
    on_pair: Callable[[Sample, np.ndarray, np.ndarray | None, Any], None] | None,
) -> None:
    t0 = time.perf_counter()
    read = read_sample(smp)
    if read.data is None:
        run.per_sample.append(SampleResult(sample_id=smp.id, error=read.fingerprint))
        return
    item = decode_input(read.data)
    ref_steps: list[np.ndarray] = []
    ref_error = None
    for op in pipeline.pre_ops:
        out = apply_op(op, item)
        if isinstance(out, str):
            ref_error = f"the manifest pipeline failed at {op.name}: {out}"
            break
        item = out
        ref_steps.append(item.data)
    t_ref = time.perf_counter() - t0
    if ref_error is not None:
        run.per_sample.append(SampleResult(sample_id=smp.id, error=ref_error))
        return
    ref = item.data
    path = _path_of(smp, read.data, tmp, index)
    t0 = time.perf_counter()
    outputs: list[Any] = []
    value: Any = path
    cand_error = None
    for name, fn in candidate.stages:
        try:
            value = fn(value)
        except Exception as exc:  # user code: recorded for this sample, the others go on
            cand_error = (
                f"{'the candidate' if candidate.kind == 'function' else f'stage {name!r}'} raised "
                f"{stable_reason(f'{type(exc).__name__}: {exc}')}"
            )
            break
        outputs.append(value)
    t_cand = time.perf_counter() - t0
    if cand_error is None:
        run.ref_ms.append(t_ref * 1e3)
        run.cand_ms.append(t_cand * 1e3)
    aligned_data = None
    if cand_error is None:
        try:
            arr, what = to_array(outputs[-1])
        except RepliscopeError as exc:
            cand_error = str(exc)
        else:
            if not run.described:
                run.described = f"{describe_array(arr)} ({what})"
            aligned = align(arr, expected, layout)
            if aligned.data is None:
                cand_error = f"the candidate's output {aligned.error}"
                run.shape_errors += 1
            else:
                run.alignment.update(aligned.notes)
                aligned_data = aligned.data
    if on_pair is not None:
        on_pair(smp, ref, aligned_data, item.geometry)
    if aligned_data is None:
        run.per_sample.append(SampleResult(sample_id=smp.id, error=cand_error))
        return
    tol = tolerance_of(ref, k)
    run.tolerance = max(run.tolerance, tol)
    mx, mean, frac = run.acc.add(ref, aligned_data, tol)
    run.per_sample.append(
        SampleResult(sample_id=smp.id, max_abs_error=mx, mean_abs_error=mean, fraction_differing=frac, tolerance=tol)
    )
    if mx > tol:
        run.differing.append((mx, Differing(smp, aligned_data), ref))
        run.differing.sort(key=lambda t: -t[0])
        del run.differing[KEEP_DIFFERING:]
    if candidate.kind != "function":
        _compare_stages(candidate, pipeline, outputs, ref_steps, k, run)


def _role_ops(stage: str, pipeline: Pipeline) -> set[int]:
    words = stage.lower()
    return {j for j, op in enumerate(pipeline.pre_ops) if any(w in words for w in ROLES.get(op.name, (op.name,)))}


def _match_stages(
    candidate: PipelineCandidate, pipeline: Pipeline, outs: list[np.ndarray], ref_steps: list[np.ndarray], k: float
) -> list[_StageMatch]:
    """Each stage's manifest op (see the module docstring)."""
    from repliscope.diff.pipeline.diagnosis import _affine

    matches: list[_StageMatch] = []
    prev = -1
    last = len(ref_steps) - 1
    for s, ((name, _), out) in enumerate(zip(candidate.stages, outs, strict=True)):
        if s == len(outs) - 1:
            matches.append(_StageMatch(last))
            break
        roles = _role_ops(name, pipeline)
        scored = []
        for j in range(prev + 1, last + 1):
            ref = ref_steps[j]
            got = align(out, ref.shape, "CHW" if ref.ndim == 3 and ref.shape[0] in (1, 3) else "HWC")
            if got.data is None:
                continue
            err = float(np.max(np.abs(got.data.astype(np.float64) - ref.astype(np.float64)))) if ref.size else 0.0
            ok = err <= tolerance_of(ref, k)
            units = ""
            other: Units | None = None
            strict = ""
            if not ok and got.data.ndim == 3:
                is_chw = ref.shape[0] in (1, 3)
                chw = got.data if is_chw else got.data.transpose(2, 0, 1)
                rchw = ref if is_chw else ref.transpose(2, 0, 1)
                found = find_units(ref, got.data, is_chw)
                if pipeline.pre_ops[j].name in STRICT_OPS:
                    strict = found.description if found is not None else ""
                else:
                    fit = _affine(rchw.astype(np.float64), chw.astype(np.float64))
                    if fit is not None and fit[2] <= max(1e-5 * float(np.ptp(chw)), tolerance_of(chw, k)):
                        scale, offset = np.round(fit[0], 6).tolist(), np.round(fit[1], 6).tolist()
                        units = f"per-channel scale {scale}, offset {offset}"
                    elif found is not None:
                        units, other = found.description, found
            score = (j not in roles, not (ok or units), bool(units), 0.0 if units else err, j)
            scored.append((score, j, units, other, strict))
        if not scored:
            matches.append(_StageMatch(None))
            continue
        _, j, units, other, strict = min(scored, key=lambda t: t[0])
        matches.append(_StageMatch(j, units, other, strict))
        prev = j
    return matches


def _compare_stages(
    candidate: PipelineCandidate,
    pipeline: Pipeline,
    outputs: list[Any],
    ref_steps: list[np.ndarray],
    k: float,
    run: _Run,
) -> None:
    outs = []
    for value in outputs:
        try:
            outs.append(to_array(value)[0])
        except RepliscopeError:
            return
    if run.stage_map is None:
        run.stage_map = _match_stages(candidate, pipeline, outs, ref_steps, k)
        run.stage_accs = [_Acc() for _ in outs]
        run.stage_units = [m.units for m in run.stage_map]
        run.stage_shapes = [describe_array(o) for o in outs]
    for match, out, acc in zip(run.stage_map, outs, run.stage_accs, strict=True):
        if match.op_index is None or (match.units and match.other_units is None):
            continue
        ref = ref_steps[match.op_index]
        is_chw = ref.ndim == 3 and ref.shape[0] in (1, 3)
        got = align(out, ref.shape, "CHW" if is_chw else "HWC")
        if got.data is None:
            continue
        data = got.data if match.other_units is None else undo(got.data, match.other_units, is_chw)
        acc.add(ref, data, tolerance_of(ref, k))


def _stage_results(candidate: PipelineCandidate, pipeline: Pipeline, run: _Run) -> list[StageResult]:
    if candidate.kind == "function" or run.stage_map is None:
        return []
    out = []
    for (name, _), match, acc, units, shape in zip(
        candidate.stages, run.stage_map, run.stage_accs, run.stage_units, run.stage_shapes, strict=True
    ):
        op = None if match.op_index is None else f"preprocess[{match.op_index}] {pipeline.pre_ops[match.op_index].name}"
        if match.op_index is None:
            note = "no manifest op output of a comparable shape" + (
                " (the loader opens the file)" if name.startswith(LOADER_STAGE) else ""
            )
            out.append(StageResult(stage=name, compared_with=None, output=shape, note=note))
        elif units and match.other_units is None:
            out.append(
                StageResult(
                    stage=name,
                    compared_with=op,
                    output=shape,
                    within_tolerance=True,
                    units=units,
                    note=f"same content in other units ({units})",
                )
            )
        else:
            within = acc.differing == 0 if acc.samples else None
            note = ""
            if match.other_units is not None:
                note = (
                    f"{units}; compared after undoing that (errors in the manifest's units), "
                    f"{'the content matches' if within else 'the content differs too'}"
                )
            elif match.strict_units:
                note = f"{match.strict_units}: a normalisation constant in other units (compared as it is)"
            out.append(
                StageResult(
                    stage=name,
                    compared_with=op,
                    output=shape,
                    samples=acc.samples,
                    max_abs_error=acc.max_abs if acc.samples else None,
                    mean_abs_error=acc.sum_abs / acc.values if acc.values else None,
                    fraction_differing=acc.differing / acc.values if acc.values else None,
                    within_tolerance=within,
                    units=units or match.strict_units,
                    note=note,
                )
            )
    return out


def _timing(run: _Run) -> Timing:
    ref, cand = run.ref_ms, run.cand_ms
    if len(ref) > 1:  # the first sample is the warm-up (imports, first-call caches)
        ref, cand = ref[1:], cand[1:]
    if not ref:
        return Timing(reference_ms_per_image=None, candidate_ms_per_image=None, ratio=None, samples_timed=0)
    r, c = float(np.mean(ref)), float(np.mean(cand))
    return Timing(
        reference_ms_per_image=r, candidate_ms_per_image=c, ratio=c / r if r > 0 else None, samples_timed=len(ref)
    )
