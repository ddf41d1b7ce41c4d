"""Compare two evaluation records: metric deltas, top-1 flips (classification), failures, probability drift,
and the task's paired statistics (detection: matched detections, IoU, AP delta). No I/O.

Samples are matched by sample id. When the dataset identities differ, only the ids both runs share are
compared and the comparison carries a warning: the metric deltas are then over different data.

Each metric is given twice: each run's own value (over the samples that run evaluated) and the paired
values over the samples BOTH runs evaluated (``paired_*``): when a sample failed in one run only, only the
paired delta compares like with like. With no sample evaluated by both, ``comparable`` is False and a
warning says so. Runs of different tasks are refused (:class:`MixedTasksError`), never half compared.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, computed_field

from repliscope.datasets.base import Dataset
from repliscope.errors import RepliscopeError
from repliscope.evaluation.record import EvaluationRecord, SamplePrediction

ID_SHOWN = 12
"""The characters of a run id an error names (the pages and the CLI show 12)."""


class MixedTasksError(RepliscopeError):
    """Runs of different tasks asked to be compared (the service answers 422): their metrics, samples and paired
    statistics have nothing in common. ``runs``: (run id, task, metric names) of every run, in the order asked."""

    def __init__(self, runs: Sequence[tuple[str, str, Sequence[str]]]) -> None:
        self.runs = [(run_id, task, list(metrics)) for run_id, task, metrics in runs]
        described = "; ".join(
            f"run {run_id[:ID_SHOWN]} is {task} ({', '.join(metrics) or 'no metric'})"
            for run_id, task, metrics in self.runs
        )
        tasks = list(dict.fromkeys(task for _, task, _ in self.runs))
        super().__init__(
            f"runs of different tasks cannot be compared ({' and '.join(tasks)}): {described}. Compare the runs "
            "of one task with each other; across tasks only each run's own page (stack, pipeline, timings) "
            "reads side by side"
        )


def check_one_task(records: Sequence[EvaluationRecord]) -> None:
    """MixedTasksError when ``records`` are not all of one task (a record read without its samples will do)."""
    if len({r.task for r in records}) > 1:
        raise MixedTasksError([(r.run_id, r.task, [m.name for m in r.metrics]) for r in records])


class MetricDelta(BaseModel):
    """``delta = b - a`` for a metric both runs report (each over its own samples), with both 95 % intervals;
    ``paired_a`` / ``paired_b`` / ``paired_delta``: the same metric over the ``paired_n`` samples both runs
    evaluated (None when the metric does not apply to them, e.g. none is labelled)."""

    name: str
    a: float
    b: float
    delta: float
    ci_a: tuple[float, float]
    ci_b: tuple[float, float]
    paired_n: int = 0
    paired_a: float | None = None
    paired_b: float | None = None
    paired_delta: float | None = None


class Top1Flip(BaseModel):
    """A sample both runs predicted, with different top-1 classes; ``position_a``: its index in run A's samples
    (the run page's thumbnail URLs; None in comparisons cached before it was kept)."""

    sample_id: str
    position_a: int | None = None
    label: int | None
    top1_a: int
    top1_b: int


class RunComparison(BaseModel):
    """What differs between run ``a`` and run ``b`` (deltas are ``b - a``)."""

    run_a: str
    run_b: str
    same_dataset: bool
    common_samples: int
    """Sample ids both runs contain (evaluated or failed)."""
    common_evaluated: int
    """Samples both runs evaluated successfully: the n of every paired number."""
    only_in_a: int
    only_in_b: int
    same_result_hash: bool
    metric_deltas: list[MetricDelta]
    top1_flips: list[Top1Flip]
    failed_only_in_a: list[str]
    failed_only_in_b: list[str]
    failed_in_one: int
    """Samples that failed in exactly one of the two runs."""
    max_abs_top1_prob_diff: float | None
    """Largest |p_a - p_b| of the top-1 probability (each run's own top-1) over samples both predicted."""
    max_abs_top1_prob_diff_sample: str | None
    warnings: list[str]
    task: str = "image_classification"
    paired: dict[str, Any] | None = None
    """The task's paired statistics of B against A on the samples both evaluated (:meth:`Task.paired`):
    classification agreement / McNemar / top-1 deltas; detection matched fraction, IoU, AP delta with its
    paired bootstrap interval. None when no sample was evaluated by both (or runs of different tasks)."""

    @computed_field  # type: ignore[prop-decorator]
    @property
    def comparable(self) -> bool:
        """False when no sample was evaluated by both runs: there is nothing to compare."""
        return self.common_evaluated > 0


def _truth(a: EvaluationRecord) -> Dataset | None:
    """Run ``a``'s stored ground truth (detection) as a Dataset, or None (classification)."""
    from repliscope.evaluation.ground_truth import dataset_of

    return dataset_of(a) if a.ground_truth is not None else None


def _paired_is_whole(
    a: EvaluationRecord, b: EvaluationRecord, both: list[tuple[SamplePrediction, SamplePrediction]]
) -> bool:
    """True when the samples both runs evaluated are every sample each evaluated, of one task and one dataset
    identity: each run's stored metrics are then its paired metrics, exactly."""
    same_data = a.dataset.get("identity") is not None and a.dataset.get("identity") == b.dataset.get("identity")
    evaluated_a = sum(1 for s in a.samples if s.error is None)
    evaluated_b = sum(1 for s in b.samples if s.error is None)
    return bool(both) and a.task == b.task and same_data and len(both) == evaluated_a == evaluated_b


def _metric_deltas(
    a: EvaluationRecord, b: EvaluationRecord, both: list[tuple[SamplePrediction, SamplePrediction]]
) -> list[MetricDelta]:
    from repliscope.tasks.base import get_task

    task = get_task(a.task)
    truth = _truth(a)
    if task.truth == "boxes" and truth is None:  # scored against the stored ground truth boxes
        return []
    if _paired_is_whole(a, b, both):  # the stored metrics are the paired ones: no re-scoring (COCO: seconds)
        paired_a, paired_b = {m.name: m for m in a.metrics}, {m.name: m for m in b.metrics}
    else:
        paired_a = {m.name: m for m in task.metrics([sa for sa, _ in both], truth)} if both else {}  # type: ignore[arg-type]
        paired_b = {m.name: m for m in task.metrics([sb for _, sb in both], truth)} if both else {}  # type: ignore[arg-type]
    deltas = []
    for ma in a.metrics:
        mb = b.metric(ma.name)
        if mb is not None:
            pa, pb = paired_a.get(ma.name), paired_b.get(ma.name)
            deltas.append(
                MetricDelta(
                    name=ma.name,
                    a=ma.value,
                    b=mb.value,
                    delta=mb.value - ma.value,
                    ci_a=(ma.ci_low, ma.ci_high),
                    ci_b=(mb.ci_low, mb.ci_high),
                    paired_n=len(both),
                    paired_a=pa.value if pa else None,
                    paired_b=pb.value if pb else None,
                    paired_delta=pb.value - pa.value if pa and pb else None,
                )
            )
    return deltas


def compare_runs(a: EvaluationRecord, b: EvaluationRecord) -> RunComparison:
    """Compare run ``b`` against run ``a`` sample by sample (matched by sample id, in ``a``'s order), with the
    paired statistics of the runs' task (detection: against ``a``'s ground truth). MixedTasksError when the runs
    are of different tasks."""
    check_one_task([a, b])
    id_a, id_b = a.dataset.get("identity"), b.dataset.get("identity")
    same_dataset = id_a is not None and id_a == id_b
    by_id_b = {s.sample_id: s for s in b.samples}
    position_a = {s.sample_id: i for i, s in reversed(list(enumerate(a.samples)))}
    common: list[tuple[SamplePrediction, SamplePrediction]] = [
        (sa, by_id_b[sa.sample_id]) for sa in a.samples if sa.sample_id in by_id_b
    ]
    common_ids = {sa.sample_id for sa, _ in common}
    warnings = []
    if a.run_id == b.run_id:
        warnings.append(f"A and B are the same run ({a.run_id}): every difference is zero by construction")
    if not same_dataset:
        warnings.append(
            f"dataset identities differ (a: {id_a}, b: {id_b}); comparing the {len(common)} sample ids both "
            f"runs share - metric deltas are over different data"
        )

    flips: list[Top1Flip] = []
    failed_a: list[str] = []
    failed_b: list[str] = []
    max_diff: float | None = None
    max_sample: str | None = None
    for sa, sb in common:
        if (sa.error is None) != (sb.error is None):
            (failed_a if sa.error is not None else failed_b).append(sa.sample_id)
        if sa.top1 is None or sb.top1 is None:
            continue
        if sa.top1 != sb.top1:
            label = sa.label if sa.label is not None else sb.label
            flips.append(
                Top1Flip(
                    sample_id=sa.sample_id,
                    position_a=position_a[sa.sample_id],
                    label=label,
                    top1_a=sa.top1,
                    top1_b=sb.top1,
                )
            )
        if sa.topk_probs and sb.topk_probs:
            diff = abs(sa.topk_probs[0] - sb.topk_probs[0])
            if max_diff is None or diff > max_diff:
                max_diff, max_sample = diff, sa.sample_id
    if same_dataset and not len(common) == len(a.samples) == len(b.samples):
        warnings.append("same dataset identity but different sample ids; were the records truncated?")
    both = [(sa, sb) for sa, sb in common if sa.error is None and sb.error is None]
    if not both:
        warnings.append(
            f"no sample was evaluated by both runs ({len(common)} shared sample ids, "
            f"{len(failed_a)} failed only in A, {len(failed_b)} only in B): there is nothing to compare"
        )
    elif failed_a or failed_b:
        warnings.append(
            f"the runs evaluated different samples ({len(failed_a)} failed only in A, {len(failed_b)} "
            f"only in B): each metric value is over its run's own samples, the paired delta over the "
            f"{len(both)} samples both evaluated"
        )

    paired = None
    if both:
        from repliscope.tasks.base import get_task

        paired = get_task(a.task).paired([sa for sa, _ in both], [sb for _, sb in both], _truth(a))
    return RunComparison(
        run_a=a.run_id,
        run_b=b.run_id,
        same_dataset=same_dataset,
        common_samples=len(common),
        common_evaluated=len(both),
        only_in_a=len(a.samples) - len(common),
        only_in_b=sum(1 for s in b.samples if s.sample_id not in common_ids),
        same_result_hash=a.result_hash == b.result_hash,
        metric_deltas=_metric_deltas(a, b, both),
        top1_flips=flips,
        failed_only_in_a=failed_a,
        failed_only_in_b=failed_b,
        failed_in_one=len(failed_a) + len(failed_b),
        max_abs_top1_prob_diff=max_diff,
        max_abs_top1_prob_diff_sample=max_sample,
        warnings=warnings,
        task=a.task,
        paired=paired,
    )
