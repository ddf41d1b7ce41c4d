"""Task-level comparison of two implementations on the SAME real samples.

Two entry points, one result (:class:`TaskDiffResult`):

* :func:`diff_records` - two stored evaluation records, matched by sample id. Records keep only each run's
  top-k probabilities, so the output errors are over the probabilities of the classes BOTH runs have in
  their top-k (the result says so in ``outputs[].quantity``).
* :func:`diff_runtimes` - one manifest on two runtimes: each sample is pre-processed ONCE by the manifest's
  pipeline and the same array is fed to both runners, so the full output vectors (logits, and the
  post-processed scores, e.g. softmax probabilities) are compared.

Agreement is top-1 agreement over the samples both sides predicted. Object detection records / manifests are
compared by the task's paired statistics instead (:meth:`ObjectDetection.paired`: B's detections matched to A's,
same class at IoU >= 0.5, mean IoU, images whose detections differ, AP delta with its paired interval when
the ground truth is known); agreement is then the fraction of images whose detections match one to one.
Object detection is also compared detection by detection (:func:`compare_detections`, ``detections`` in the result):
per image, A's detections are matched to B's by IoU >= :data:`MATCH_IOU` (greedy by A's score: same class first,
then any class, which is a class change), and the image's counts, matched pairs, detections only in A or only in
B, class changes, the largest box-coordinate error (px) and score error of the matched pairs are reported. An
image's detections differ beyond tolerance when a detection is unmatched, a class changed, a box coordinate moved
by more than :data:`BOX_TOLERANCE_PX` or a score by more than :data:`SCORE_TOLERANCE`;
``TaskDiffResult.differs_beyond_tolerance`` is then true (``repliscope diff`` exits 1).
McNemar's exact test (classification) runs on the labelled samples: ``b`` = A right and B wrong, ``c`` = A
wrong and B right, p = two-sided ``scipy.stats.binomtest(b, b + c, 0.5)`` (1.0 when b + c = 0). Relative
errors divide by ``max(|a|, 1e-3 * max|a|)`` per sample vector (A is the reference side).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from repliscope.datasets.base import Dataset, Sample
from repliscope.evaluation.record import EvaluationRecord, SamplePrediction
from repliscope.ops.pipeline import Pipeline
from repliscope.tracing.tracer import Tracer, current_tracer

if TYPE_CHECKING:
    from repliscope.evaluation.run import PreparedRun

REL_FLOOR = 1e-3
MATCH_IOU = 0.5
"""Two detections of A and B are the same object when their IoU is at least this (COCO's loosest threshold)."""
BOX_TOLERANCE_PX = 0.01
"""Largest |box coordinate of B - of A| (source pixels) of two matched detections still counted as the same box:
1/100 px, far below what moves an IoU threshold, far above float32 rounding of a runtime change (the yolov3-tiny
conversion on onnxruntime is within 4.9e-4 px of libdarknet)."""
SCORE_TOLERANCE = 1e-4
"""Largest |score of B - of A| of two matched detections still counted as the same score (runtimes of one model
differ by about 1e-5)."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FlippedSample(_Model):
    sample_id: str
    label: int | None
    top1_a: int
    top1_b: int


class SampleDelta(_Model):
    """One sample compared: top-1 of each side, correctness (None when unlabelled) and output errors."""

    sample_id: str
    label: int | None
    top1_a: int
    top1_b: int
    correct_a: bool | None
    correct_b: bool | None
    max_abs: float
    mean_abs: float
    max_rel: float


class OutputError(_Model):
    """Errors of B against A over all compared samples for one output ``quantity``."""

    quantity: str
    max_abs: float
    mean_abs: float
    max_rel: float
    max_abs_sample: str | None
    values: int
    """Number of compared values (samples x classes)."""
    shape_differences: list[str] = Field(default_factory=list)
    """Samples whose two arrays differ in shape (``id: (7, 4) vs (8, 4)``, e.g. a detector that found another
    number of boxes): not compared value by value (detections are paired by the task instead)."""


class McNemar(_Model):
    """Paired exact McNemar test on correctness over ``n`` labelled samples both sides predicted."""

    n: int
    both_correct: int
    both_wrong: int
    only_a_correct: int
    only_b_correct: int
    p_value: float
    test: str = "exact binomial on discordant pairs, two-sided (scipy.stats.binomtest)"


class DetectionImageDelta(_Model):
    """One image's detections, B against A (see :func:`compare_detections`)."""

    sample_id: str
    count_a: int
    count_b: int
    matched: int
    """Pairs at IoU >= ``MATCH_IOU`` (same class, or another class: ``class_changes`` of them)."""
    class_changes: int
    only_in_a: int
    only_in_b: int
    max_box_error: float | None
    """max |coordinate of B - of A| over the matched pairs' [x1, y1, x2, y2], source pixels; None: no pair."""
    max_score_error: float | None
    within_tolerance: bool


class DetectionComparison(_Model):
    """Detections of two runs compared image by image (:func:`compare_detections`)."""

    compared: str
    iou_threshold: float
    box_tolerance_px: float
    score_tolerance: float
    images: int
    images_within_tolerance: int
    differing_ids: list[str]
    """Images whose detections differ beyond tolerance, worst first."""
    per_image: list[DetectionImageDelta]
    passed: bool


class TaskDiffResult(_Model):
    kind: str = "task_diff"
    source: Literal["records", "runtimes", "pipelines"]
    a: str
    b: str
    dataset: str
    compared: int
    failed_a: list[str] = Field(default_factory=list)
    failed_b: list[str] = Field(default_factory=list)
    only_in_a: int = 0
    only_in_b: int = 0
    agreement: float | None
    agreements: int
    flips: list[FlippedSample]
    mcnemar: McNemar | None
    outputs: list[OutputError]
    per_sample: list[SampleDelta]
    notes: list[str] = Field(default_factory=list)
    task: str = "image_classification"
    agreement_of: str = "top-1: samples whose argmax of the post-processed scores is the same"
    """What ``agreement`` counts (the task's own notion)."""
    paired: dict[str, Any] | None = None
    """Object detection: the task's paired statistics of B against A (see the module docstring)."""
    detections: DetectionComparison | None = None
    """Object detection: the detections compared image by image, with the tolerance (module docstring)."""

    @property
    def differs_beyond_tolerance(self) -> bool:
        """True when the detections of some image differ beyond tolerance (object detection only; the other tasks
        report agreement and errors without a verdict)."""
        return self.detections is not None and not self.detections.passed


@dataclass
class _Acc:
    """Running error statistics of one output quantity."""

    quantity: str
    max_abs: float = 0.0
    sum_abs: float = 0.0
    max_rel: float = 0.0
    count: int = 0
    max_sample: str | None = None

    def add(self, sample_id: str, a: np.ndarray, b: np.ndarray) -> tuple[float, float, float]:
        a64, b64 = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
        diff = np.abs(b64 - a64)
        if diff.size == 0:
            return 0.0, 0.0, 0.0
        floor = REL_FLOOR * float(np.max(np.abs(a64))) or np.finfo(np.float64).tiny
        mx, mean = float(diff.max()), float(diff.mean())
        rel = float((diff / np.maximum(np.abs(a64), floor)).max())
        if self.max_sample is None or mx > self.max_abs:
            self.max_abs, self.max_sample = mx, sample_id
        self.sum_abs += float(diff.sum())
        self.max_rel = max(self.max_rel, rel)
        self.count += diff.size
        return mx, mean, rel

    shape_differences: list[str] = field(default_factory=list)

    def add_if_same_shape(self, sample_id: str, a: np.ndarray, b: np.ndarray) -> None:
        """:meth:`add` when ``a`` and ``b`` have the same shape; otherwise the sample's two shapes are recorded
        (per-image outputs such as a cascade's K boxes can only be compared value-wise when K agrees)."""
        if np.shape(a) != np.shape(b):
            self.shape_differences.append(f"{sample_id}: {tuple(np.shape(a))} vs {tuple(np.shape(b))}")
            return
        self.add(sample_id, a, b)

    def result(self) -> OutputError:
        return OutputError(
            quantity=self.quantity,
            max_abs=self.max_abs,
            mean_abs=self.sum_abs / self.count if self.count else 0.0,
            max_rel=self.max_rel,
            max_abs_sample=self.max_sample,
            values=self.count,
            shape_differences=list(self.shape_differences),
        )


@dataclass
class _Tally:
    deltas: list[SampleDelta] = field(default_factory=list)

    def add(
        self, sample_id: str, label: int | None, top1_a: int, top1_b: int, errs: tuple[float, float, float]
    ) -> None:
        ca = None if label is None else top1_a == label
        cb = None if label is None else top1_b == label
        self.deltas.append(
            SampleDelta(
                sample_id=sample_id,
                label=label,
                top1_a=top1_a,
                top1_b=top1_b,
                correct_a=ca,
                correct_b=cb,
                max_abs=errs[0],
                mean_abs=errs[1],
                max_rel=errs[2],
            )
        )

    def agreement(self) -> tuple[float | None, int, list[FlippedSample]]:
        flips = [
            FlippedSample(sample_id=d.sample_id, label=d.label, top1_a=d.top1_a, top1_b=d.top1_b)
            for d in self.deltas
            if d.top1_a != d.top1_b
        ]
        n = len(self.deltas)
        return ((n - len(flips)) / n if n else None), n - len(flips), flips

    def mcnemar(self) -> McNemar | None:
        return mcnemar_exact(
            [(d.correct_a, d.correct_b) for d in self.deltas if d.correct_a is not None and d.correct_b is not None]
        )


def mcnemar_exact(pairs: Sequence[tuple[bool, bool]]) -> McNemar | None:
    """Exact McNemar on paired correctness ``(a_correct, b_correct)``; None when there are no pairs."""
    if not pairs:
        return None
    from repliscope.metrics.intervals import mcnemar_exact_p

    b = sum(1 for a, c in pairs if a and not c)
    c = sum(1 for a, cc in pairs if not a and cc)
    p = mcnemar_exact_p(b, c)
    return McNemar(
        n=len(pairs),
        both_correct=sum(1 for a, cc in pairs if a and cc),
        both_wrong=sum(1 for a, cc in pairs if not a and not cc),
        only_a_correct=b,
        only_b_correct=c,
        p_value=p,
    )


def _detection_result(
    source: Literal["records", "runtimes", "pipelines"],
    a: str,
    b: str,
    dataset: str,
    pairs: list[tuple[SamplePrediction, SamplePrediction]],
    truth: Dataset | None,
    outputs: list[OutputError],
    failed_a: list[str],
    failed_b: list[str],
    notes: list[str],
    only_in_a: int = 0,
    only_in_b: int = 0,
    task: str = "object_detection",
    tolerances: tuple[float, float] = (BOX_TOLERANCE_PX, SCORE_TOLERANCE),
) -> TaskDiffResult:
    """A detection (or segmentation) diff of the evaluated ``pairs`` (A, B) with the task's paired statistics;
    detections compared image by image within ``tolerances`` (box px, score)."""
    from repliscope.tasks.base import get_task

    paired = get_task(task).paired([x for x, _ in pairs], [y for _, y in pairs], truth) if pairs else None
    detections = None
    if task == "object_detection":
        detections, matched_outputs = compare_detections(
            pairs, box_tolerance=tolerances[0], score_tolerance=tolerances[1]
        )
        outputs = [*outputs, *matched_outputs]
    n = int(paired["n_samples"]) if paired else 0
    same = n - int(paired.get("flipped_images", 0)) if paired else 0
    return TaskDiffResult(
        source=source,
        a=a,
        b=b,
        dataset=dataset,
        compared=n,
        failed_a=failed_a,
        failed_b=failed_b,
        only_in_a=only_in_a,
        only_in_b=only_in_b,
        agreement=same / n if n else None,
        agreements=same,
        flips=[],
        mcnemar=None,
        outputs=outputs,
        per_sample=[],
        notes=notes,
        task=task,
        paired=paired,
        detections=detections,
        agreement_of="images whose masks are identical"
        if task == "semantic_segmentation"
        else "images whose detections match one to one (same class, IoU >= 0.5)",
    )


def compare_detections(
    pairs: Sequence[tuple[SamplePrediction, SamplePrediction]],
    *,
    box_tolerance: float = BOX_TOLERANCE_PX,
    score_tolerance: float = SCORE_TOLERANCE,
) -> tuple[DetectionComparison, list[OutputError]]:
    """B's detections against A's on each evaluated image pair (A, B) -> (the comparison, the output-error rows of
    the matched pairs' box coordinates and scores).

    Per image, A's detections in score order (stable) each take the unmatched B detection of the same class with
    the highest IoU >= :data:`MATCH_IOU`; the A detections left then take, the same way, an unmatched B detection
    of ANY class (a class change). What stays unmatched is only in A or only in B. The image is within tolerance
    when nothing is unmatched, no class changed, and every matched pair's box coordinates are within
    ``box_tolerance`` px and its scores within ``score_tolerance``."""
    from repliscope.units.matching import ImageBoxes, from_prediction, match_detections

    boxes_acc = _Acc("box coordinates of matched detections (source px: x1, y1, x2, y2)")
    scores_acc = _Acc("scores of matched detections")
    rows: list[DetectionImageDelta] = []
    for sa, sb in pairs:
        a, b = from_prediction(sa), from_prediction(sb)
        same = match_detections(a, b, iou_threshold=MATCH_IOU, class_aware=True)
        left_a = np.setdiff1d(np.arange(len(a)), [i for i, _, _ in same])
        left_b = np.setdiff1d(np.arange(len(b)), [j for _, j, _ in same])

        def part(x: ImageBoxes, keep: np.ndarray) -> ImageBoxes:
            return ImageBoxes(x.sample_id, x.boxes[keep], x.classes[keep], x.scores[keep])

        other = match_detections(part(a, left_a), part(b, left_b), iou_threshold=MATCH_IOU, class_aware=False)
        found = same + [(int(left_a[i]), int(left_b[j]), iou) for i, j, iou in other]
        ia = np.array([i for i, _, _ in found], np.intp)
        ib = np.array([j for _, j, _ in found], np.intp)
        box_err = score_err = None
        if found:
            box_err = boxes_acc.add(sa.sample_id, a.boxes[ia], b.boxes[ib])[0]
            score_err = scores_acc.add(sa.sample_id, a.scores[ia], b.scores[ib])[0]
        only_a, only_b = len(a) - len(found), len(b) - len(found)
        within = (
            only_a == 0
            and only_b == 0
            and not other
            and (box_err is None or box_err <= box_tolerance)
            and (score_err is None or score_err <= score_tolerance)
        )
        rows.append(
            DetectionImageDelta(
                sample_id=sa.sample_id,
                count_a=len(a),
                count_b=len(b),
                matched=len(found),
                class_changes=len(other),
                only_in_a=only_a,
                only_in_b=only_b,
                max_box_error=box_err,
                max_score_error=score_err,
                within_tolerance=within,
            )
        )
    differing = sorted(
        (r for r in rows if not r.within_tolerance),
        key=lambda r: (-(r.only_in_a + r.only_in_b + r.class_changes), -(r.max_box_error or 0.0)),
    )
    comparison = DetectionComparison(
        compared=f"per image: A's detections matched to B's by IoU >= {MATCH_IOU:g} (greedy by A's score, same "
        "class first, then any class: a class change); count of each side, matched pairs, detections only in A "
        "or only in B, class changes, and over the matched pairs the largest box-coordinate error (px) and score "
        "error",
        iou_threshold=MATCH_IOU,
        box_tolerance_px=box_tolerance,
        score_tolerance=score_tolerance,
        images=len(rows),
        images_within_tolerance=len(rows) - len(differing),
        differing_ids=[r.sample_id for r in differing],
        per_image=rows,
        passed=not differing,
    )
    return comparison, [boxes_acc.result(), scores_acc.result()]


def _pair_samples(
    a: EvaluationRecord, b: EvaluationRecord, usable: Callable[[SamplePrediction], bool]
) -> tuple[list[tuple[SamplePrediction, SamplePrediction]], list[str], list[str]]:
    """The samples of ``a`` (in its order) that ``b`` has too, as (a's, b's) pairs when both evaluated them
    (and ``usable`` accepts both), plus the ids that failed in A and those that failed only in B."""
    by_id = {s.sample_id: s for s in b.samples}
    pairs: list[tuple[SamplePrediction, SamplePrediction]] = []
    failed_a: list[str] = []
    failed_b: list[str] = []
    for sa in a.samples:
        sb = by_id.get(sa.sample_id)
        if sb is None:
            continue
        if sa.error is not None or sb.error is not None or not usable(sa) or not usable(sb):
            (failed_a if sa.error is not None else failed_b).append(sa.sample_id)
            continue
        pairs.append((sa, sb))
    return pairs, failed_a, failed_b


def diff_records(
    a: EvaluationRecord,
    b: EvaluationRecord,
    *,
    box_tolerance: float = BOX_TOLERANCE_PX,
    score_tolerance: float = SCORE_TOLERANCE,
) -> TaskDiffResult:
    """Compare run ``b`` against run ``a`` sample by sample (matched by id, in ``a``'s order); detections within
    ``box_tolerance`` px and ``score_tolerance`` (:func:`compare_detections`)."""
    if {a.task, b.task} & {"object_detection", "semantic_segmentation"}:
        return _diff_detection_records(a, b, (box_tolerance, score_tolerance))
    acc = _Acc("top-k probabilities of the classes in both runs' top-k (records store only the top-k)")
    tally = _Tally()
    pairs, failed_a, failed_b = _pair_samples(a, b, lambda s: s.top1 is not None)
    for sa, sb in pairs:
        assert sa.top1 is not None and sb.top1 is not None
        pb = dict(zip(sb.topk_indices, sb.topk_probs, strict=True))
        common = [(p, pb[i]) for i, p in zip(sa.topk_indices, sa.topk_probs, strict=True) if i in pb]
        va = np.array([x for x, _ in common], dtype=np.float64)
        vb = np.array([y for _, y in common], dtype=np.float64)
        tally.add(sa.sample_id, sa.label, sa.top1, sb.top1, acc.add(sa.sample_id, va, vb))
    ids_a, ids_b = {s.sample_id for s in a.samples}, {s.sample_id for s in b.samples}
    notes = _identity_notes(a, b)
    agreement, agreements, flips = tally.agreement()
    return TaskDiffResult(
        source="records",
        a=f"run {a.run_id} ({a.runtime.get('runtime', '?')})",
        b=f"run {b.run_id} ({b.runtime.get('runtime', '?')})",
        dataset=str(a.dataset.get("name", "")),
        compared=len(tally.deltas),
        failed_a=failed_a,
        failed_b=failed_b,
        only_in_a=len(ids_a - ids_b),
        only_in_b=len(ids_b - ids_a),
        agreement=agreement,
        agreements=agreements,
        flips=flips,
        mcnemar=tally.mcnemar(),
        outputs=[acc.result()],
        per_sample=tally.deltas,
        notes=notes,
    )


def _identity_notes(a: EvaluationRecord, b: EvaluationRecord) -> list[str]:
    """The note that two records' dataset identities differ (so only their shared sample ids are compared)."""
    id_a, id_b = a.dataset.get("identity"), b.dataset.get("identity")
    if id_a == id_b:
        return []
    return [f"dataset identities differ (a: {id_a}, b: {id_b}); only the sample ids both runs share are compared"]


def _diff_detection_records(
    a: EvaluationRecord, b: EvaluationRecord, tolerances: tuple[float, float]
) -> TaskDiffResult:
    """Detection records: the samples both evaluated, paired against A's stored ground truth."""
    from repliscope.evaluation.ground_truth import dataset_of

    if a.task != b.task:
        raise ValueError(f"run {a.run_id[:12]} is {a.task}, run {b.run_id[:12]} is {b.task}: nothing to compare")
    pairs, failed_a, failed_b = _pair_samples(a, b, lambda s: True)
    ids_a, ids_b = {s.sample_id for s in a.samples}, {s.sample_id for s in b.samples}
    notes = _identity_notes(a, b)
    return _detection_result(
        "records",
        f"run {a.run_id} ({a.runtime.get('runtime', '?')})",
        f"run {b.run_id} ({b.runtime.get('runtime', '?')})",
        str(a.dataset.get("name", "")),
        pairs,
        dataset_of(a) if a.ground_truth is not None else None,
        [],
        failed_a,
        failed_b,
        notes,
        len(ids_a - ids_b),
        len(ids_b - ids_a),
        task=a.task,
        tolerances=tolerances,
    )


def diff_runtimes(
    manifest: str | Path,
    runtime_a: str,
    runtime_b: str,
    dataset: Dataset,
    *,
    batch_size: int = 8,
    threads: int = 2,
    cache_dir: Path | None = None,
    box_tolerance: float = BOX_TOLERANCE_PX,
    score_tolerance: float = SCORE_TOLERANCE,
) -> TaskDiffResult:
    """Run ``manifest`` on two runtimes over ``dataset``, feeding both the same pre-processed arrays; detections
    within ``box_tolerance`` px and ``score_tolerance`` (:func:`compare_detections`)."""
    from repliscope.evaluation.run import RunSettings, prepare
    from repliscope.manifest.loader import load_manifest

    loaded = load_manifest(manifest)
    if loaded.manifest.task in ("object_detection", "semantic_segmentation"):  # paired by the task
        return _diff_detection_runtimes(
            loaded, runtime_a, runtime_b, dataset, batch_size, threads, cache_dir, (box_tolerance, score_tolerance)
        )
    prep_a = prepare(
        loaded, RunSettings(runtime=runtime_a, threads=threads, batch_size=batch_size, cache_dir=cache_dir)
    )
    prep_b = prepare(
        loaded, RunSettings(runtime=runtime_b, threads=threads, batch_size=batch_size, cache_dir=cache_dir)
    )
    logits = _Acc("model outputs (full vectors)")
    scores = _Acc("post-processed scores (full vectors, the manifest's postprocess)")
    tally = _Tally()
    failed: list[str] = []
    shape = tuple(prep_a.artifact.input_shape[1:])
    tracer = current_tracer()
    with ExitStack() as instrumented:
        for prep in (prep_a, prep_b):
            instrumented.enter_context(tracer.instrument(prep.runner))
        for index, (batch, x) in enumerate(iter_batches(prep_a.pipeline, dataset.samples, batch_size, shape, failed)):
            with tracer.span("batch", "model", index=index, size=len(batch)):
                _compare_batch(prep_a, prep_b, batch, x, logits, scores, tally, tracer)
    agreement, agreements, flips = tally.agreement()
    return TaskDiffResult(
        source="runtimes",
        a=runtime_a,
        b=runtime_b,
        dataset=dataset.name,
        compared=len(tally.deltas),
        failed_a=failed,
        failed_b=list(failed),
        agreement=agreement,
        agreements=agreements,
        flips=flips,
        mcnemar=tally.mcnemar(),
        outputs=[logits.result(), scores.result()],
        per_sample=tally.deltas,
        notes=[
            f"the same pre-processed input (manifest pipeline) was fed to {runtime_a} and {runtime_b}; "
            "top-1 = argmax of the post-processed scores"
        ],
    )


def _compare_batch(
    prep_a: PreparedRun,
    prep_b: PreparedRun,
    batch: list[Sample],
    x: np.ndarray,
    logits: _Acc,
    scores: _Acc,
    tally: _Tally,
    tracer: Tracer,
) -> None:
    """Both runtimes on one pre-processed batch ``x`` (N, ...); errors and top-1 pairs accumulated. Each
    inference is an ``inference`` span (trace level ``model``) naming its runtime."""
    with tracer.span("inference", "model", runtime=prep_a.runner.name, batch_size=len(x)):
        out_a = prep_a.runner.infer(x)
    with tracer.span("inference", "model", runtime=prep_b.runner.name, batch_size=len(x)):
        out_b = prep_b.runner.infer(x)
    post_a, post_b = prep_a.pipeline.postprocess(out_a, tracer), prep_a.pipeline.postprocess(out_b, tracer)
    if post_a.is_probability:
        scores.quantity = "probabilities (full vectors, after the manifest's postprocess)"
    for i, s in enumerate(batch):
        logits.add(s.id, out_a[i], out_b[i])
        errs = scores.add(s.id, post_a.scores[i], post_b.scores[i])
        tally.add(s.id, s.label, int(np.argmax(post_a.scores[i])), int(np.argmax(post_b.scores[i])), errs)


def _diff_detection_runtimes(
    loaded: Any,
    runtime_a: str,
    runtime_b: str,
    dataset: Dataset,
    batch_size: int,
    threads: int,
    cache_dir: Path | None,
    tolerances: tuple[float, float],
) -> TaskDiffResult:
    """Detection: both runtimes on the same pre-processed inputs; every named model output compared value by
    value, then both post-processed (with each sample's geometry) and paired by the task."""
    from repliscope.datasets.base import read_sample
    from repliscope.evaluation.engine import prepare_item
    from repliscope.evaluation.run import RunSettings, batch_limit, prepare

    prep_a = prepare(loaded, RunSettings(runtime=runtime_a, threads=threads, cache_dir=cache_dir))
    prep_b = prepare(loaded, RunSettings(runtime=runtime_b, threads=threads, cache_dir=cache_dir))
    size = batch_limit(prep_a) or batch_size
    shape = tuple(prep_a.artifact.input_shape[1:])
    task, tracer = prep_a.task, current_tracer()
    accs: dict[str, _Acc] = {}
    pairs: list[tuple[SamplePrediction, SamplePrediction]] = []
    failed: list[str] = []
    samples = list(dataset.samples)
    for start in range(0, len(samples), size):
        batch, items = [], []
        for smp in samples[start : start + size]:
            item = prepare_item(prep_a.pipeline, read_sample(smp), shape)
            if item.data is None:
                failed.append(smp.id)
                continue
            batch.append(smp)
            items.append(item)
        if not batch:
            continue
        x = np.stack([it.data for it in items])  # type: ignore[misc]
        geometry = [it.geometry for it in items]
        outputs = []
        for prep in (prep_a, prep_b):
            with tracer.span("inference", "model", runtime=prep.runner.name, batch_size=len(x)):
                outputs.append(prep.runner.infer_outputs(x))
        for name in outputs[0]:
            acc = accs.setdefault(name, _Acc(f"model output '{name}'"))
            for i, smp in enumerate(batch):
                acc.add_if_same_shape(smp.id, outputs[0][name][i], outputs[1][name][i])
        rows = list(range(len(batch)))
        recs = [
            task.to_samples(prep_a.pipeline.postprocess(out, tracer, geometry=geometry), batch, rows) for out in outputs
        ]
        pairs.extend(zip(recs[0], recs[1], strict=True))
    truth = dataset if all(s.objects is not None for s in samples) and dataset.categories else None
    notes = [
        f"the same pre-processed input (manifest pipeline) was fed to {runtime_a} and {runtime_b}; both "
        f"post-processed by the manifest, paired by the {task.name} task"
    ]
    if truth is not None:  # AP on the categories the model detects, as evaluate scores a run
        truth, scored = task.restrict(truth, prep_a.class_names)
        if scored.get("categories_left_out"):
            n = len(scored["categories_evaluated"])
            notes.append(
                f"AP on the {n} {'category' if n == 1 else 'categories'} the model detects; "
                f"{len(scored['categories_left_out'])} dataset categories left out "
                f"({scored.get('objects_left_out', 0)} ground-truth objects)"
            )
    notes += [
        f"model output '{name}': {len(acc.shape_differences)} image(s) with outputs of another shape "
        f"(compared value by value on the other {len(pairs) - len(acc.shape_differences)}; the detections "
        f"are paired below): {'; '.join(acc.shape_differences[:5])}"
        for name, acc in accs.items()
        if acc.shape_differences
    ]
    return _detection_result(
        "runtimes",
        runtime_a,
        runtime_b,
        dataset.name,
        pairs,
        truth,
        [acc.result() for acc in accs.values()],
        failed,
        list(failed),
        notes,
        task=task.name,
        tolerances=tolerances,
    )


def iter_batches(
    pipeline: Pipeline, samples: Sequence[Sample], batch_size: int, shape: tuple[int, ...] | None, failed: list[str]
) -> Iterator[tuple[list[Sample], np.ndarray]]:
    """Pre-process ``samples`` with ``pipeline`` and yield (samples, stacked batch (N, ...)) of up to
    ``batch_size``; samples that fail are appended to ``failed`` and skipped."""
    from repliscope.evaluation.engine import prepare_sample

    for start in range(0, len(samples), batch_size):
        ok: list[Sample] = []
        arrays: list[np.ndarray] = []
        for s in samples[start : start + batch_size]:
            x, err = prepare_sample(pipeline, s, shape)
            if x is None or err is not None:
                failed.append(s.id)
                continue
            ok.append(s)
            arrays.append(x)
        if ok:
            yield ok, np.stack(arrays)


def first_batch(
    pipeline: Pipeline, dataset: Dataset, n: int, shape: tuple[int, ...] | None
) -> tuple[list[str], np.ndarray]:
    """The first ``n`` samples of ``dataset`` that pre-process successfully: (ids, batch (n, ...))."""
    ids: list[str] = []
    arrays: list[np.ndarray] = []
    failed: list[str] = []
    for batch, x in iter_batches(pipeline, dataset.samples, n, shape, failed):
        for s, row in zip(batch, x, strict=True):
            if len(ids) < n:
                ids.append(s.id)
                arrays.append(row)
        if len(ids) >= n:
            break
    if not ids:
        from repliscope.errors import DatasetError

        raise DatasetError(f"no sample of '{dataset.name}' could be pre-processed ({len(failed)} failed)")
    return ids, np.stack(arrays)
