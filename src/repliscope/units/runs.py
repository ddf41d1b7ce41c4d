"""Unit evaluation of stored detection runs: a run against its ground truth, or against a reference run.

The ground truth comes from the record (:attr:`EvaluationRecord.ground_truth`, rebuilt with
:func:`repliscope.evaluation.ground_truth.dataset_of`), or from a ``dataset`` given by the caller, which must
have the record's dataset identity. Only the samples both runs evaluated are compared.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from repliscope.datasets.base import Dataset
from repliscope.errors import RepliscopeError
from repliscope.evaluation.record import EvaluationRecord, SamplePrediction
from repliscope.metrics.coco import coco_dicts, coco_inputs, faster_coco_eval
from repliscope.units.matching import from_prediction, from_truth
from repliscope.units.paired import detection_paired
from repliscope.units.stats import DEFAULT_REPLICATES, UnitReport, unit_report


def _box_tasks() -> str:
    """The registered tasks whose records hold detections (``Task.truth == "boxes"``), for messages."""
    from repliscope.tasks.base import TASKS

    return " or ".join(n for n in TASKS.names() if TASKS.get(n).truth == "boxes")


def _boxes(record: EvaluationRecord) -> bool:
    from repliscope.tasks.base import truth_of

    return truth_of(record.task) == "boxes"


@dataclass
class RunUnits:
    """What ``repliscope units`` computes: the report against ground truth, and with a reference run the report
    against it plus :func:`detection_paired`."""

    run_id: str
    reference_id: str | None
    truth: UnitReport
    against_reference: UnitReport | None
    paired: dict[str, Any] | None
    dataset: Dataset

    @property
    def primary(self) -> UnitReport:
        return self.against_reference or self.truth

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "reference_id": self.reference_id,
            "against_ground_truth": self.truth.model_dump(mode="json"),
            "against_reference": (self.against_reference.model_dump(mode="json") if self.against_reference else None),
            "paired": self.paired,
        }


def ground_truth_for(record: EvaluationRecord, dataset: Dataset | None = None) -> Dataset:
    """The record's stored ground truth, else ``dataset`` checked against the record's dataset identity."""
    if not _boxes(record):
        raise RepliscopeError(
            f"run {record.run_id[:12]} has task {record.task}: unit evaluation needs an {_box_tasks()} run"
        )
    if record.ground_truth is not None:
        from repliscope.evaluation.ground_truth import dataset_of

        return dataset_of(record)
    if dataset is None:
        raise RepliscopeError(
            f"run {record.run_id[:12]} stores no ground truth: give --dataset (the data it "
            f"was evaluated on, '{record.dataset.get('name', '?')}')"
        )
    expected = record.dataset.get("identity")
    if expected and dataset.identity != expected:
        raise RepliscopeError(
            f"dataset '{dataset.name}' (identity {dataset.identity[:12]}) is not the data run "
            f"{record.run_id[:12]} was evaluated on (identity {str(expected)[:12]})"
        )
    if record.dataset.get("categories_left_out"):  # scored on the categories the model detects only
        from repliscope.tasks.detection import keep_categories

        return keep_categories(dataset, {int(c): str(n) for c, n in record.dataset["categories_evaluated"]})
    return dataset


def _ok(s: SamplePrediction) -> bool:
    return s.error is None and s.detections is not None


def class_ap(samples: Sequence[SamplePrediction], dataset: Dataset) -> tuple[float, float] | None:
    """(class-aware AP, class-agnostic AP) from faster-coco-eval; None when no sample was evaluated."""
    values = []
    for aware in (True, False):
        inputs = coco_inputs(samples, dataset, class_aware=aware)
        if not inputs.samples:
            return None
        values.append(float(faster_coco_eval(*coco_dicts(inputs))[0][0]))
    return values[0], values[1]


def run_units(
    record: EvaluationRecord,
    reference: EvaluationRecord | None = None,
    *,
    dataset: Dataset | None = None,
    replicates: int = DEFAULT_REPLICATES,
    seed: int = 0,
    input_size: tuple[int, int] | None = None,
) -> RunUnits:
    """Unit-evaluate ``record`` (against its ground truth, and against ``reference`` when given)."""
    truth = ground_truth_for(record, dataset)
    by_id = {s.id: s for s in truth.samples}
    samples = list(record.samples)
    if reference is not None:
        if not _boxes(reference):
            raise RepliscopeError(
                f"reference run {reference.run_id[:12]} has task {reference.task}, not {_box_tasks()}"
            )
        ids, ref_ids = [s.sample_id for s in samples], [s.sample_id for s in reference.samples]
        if ids != ref_ids:
            raise RepliscopeError(
                f"runs {record.run_id[:12]} and {reference.run_id[:12]} did not evaluate the same "
                f"samples ({len(ids)} vs {len(ref_ids)}, or another order)"
            )
    keep = [i for i, s in enumerate(samples) if _ok(s) and (reference is None or _ok(reference.samples[i]))]
    missing = [samples[i].sample_id for i in keep if samples[i].sample_id not in by_id]
    if missing:
        raise RepliscopeError(f"{len(missing)} evaluated samples have no ground truth (e.g. {missing[0]})")
    kept = [samples[i] for i in keep]
    sizes = [by_id[s.sample_id].size_hw for s in kept]
    preds = [from_prediction(s, hw) for s, hw in zip(kept, sizes, strict=True)]
    gt_report = unit_report(
        preds,
        [from_truth(by_id[s.sample_id]) for s in kept],
        against="ground_truth",
        replicates=replicates,
        seed=seed,
        ap=class_ap(kept, truth),
        input_size=input_size,
    )
    ref_report = paired = None
    if reference is not None:
        ref_kept = [reference.samples[i] for i in keep]
        refs = [from_prediction(s, hw) for s, hw in zip(ref_kept, sizes, strict=True)]
        ref_report = unit_report(
            preds, refs, against="reference", replicates=replicates, seed=seed, input_size=input_size
        )
        paired = detection_paired(ref_kept, kept, truth, seed=seed)
    return RunUnits(record.run_id, reference.run_id if reference else None, gt_report, ref_report, paired, truth)
