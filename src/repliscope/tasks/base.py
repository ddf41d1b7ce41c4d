"""The task interface: what a manifest's ``task`` owns (one class per task, registered under that word).

A task decides which post-processing ops a manifest may use, how a post-processed batch becomes per-sample
records (:class:`SamplePrediction`), which metrics a run gets (and their intervals), which metric names a
claim may use, and the paired statistics of two runs on the same samples (pitfall sweeps, ``runs compare``).
The evaluation loop, store, report, pitfalls and diff ask the manifest's task instead of assuming top-k.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar

from repliscope.datasets.base import Dataset, Sample
from repliscope.evaluation.record import MetricValue, SamplePrediction
from repliscope.ops.base import Predictions
from repliscope.registry import Registry


class Task(ABC):
    """One task. Stateless: the registry holds the class; :func:`get_task` returns an instance."""

    name: ClassVar[str]
    post_ops: ClassVar[tuple[str, ...]]
    """Registered post-processing op names this task's manifests may use (any other is a manifest error)."""
    claim_metrics: ClassVar[tuple[str, ...]]
    """Metric names a claim of this task may name (performance claims are shared by every task)."""
    output_kinds: ClassVar[tuple[str, ...]]
    """Allowed ``outputs[].kind`` values."""
    truth: ClassVar[str]
    """What a sample must carry to be scored: ``labels`` (a class), ``boxes`` or ``masks`` (the service offers
    only datasets whose samples carry it; see ``repliscope.store.service_tables.ANNOTATIONS``)."""

    @abstractmethod
    def check_dataset(self, dataset: Dataset, num_classes: int, class_names: Sequence[str] | None = None) -> None:
        """Raise DatasetError when ``dataset`` cannot be evaluated by this task (e.g. classification labels
        outside the model's classes; detection samples without ground truth boxes, or categories the manifest's
        ``labels`` do not name). ``class_names``: the manifest's labels, when known."""

    @abstractmethod
    def to_samples(self, preds: Predictions, batch: Sequence[Sample], rows: Sequence[int]) -> list[SamplePrediction]:
        """Records of the successfully pre-processed samples: row ``j`` of ``preds`` is ``batch[rows[j]]``.
        Raises RepliscopeError when the postprocess did not produce what this task records (e.g. no ``topk``)."""

    @abstractmethod
    def metrics(self, samples: Sequence[SamplePrediction], dataset: Dataset) -> list[MetricValue]:
        """The run's metrics (each with its 95 % interval) over the successfully evaluated samples."""

    def evaluate(
        self, samples: Sequence[SamplePrediction], dataset: Dataset
    ) -> tuple[list[MetricValue], list[dict[str, Any]] | None]:
        """(:meth:`metrics`, per-class rows or None): what a record stores. Default: no per-class rows."""
        return self.metrics(samples, dataset), None

    def restrict(self, dataset: Dataset, class_names: Sequence[str] | None) -> tuple[Dataset, dict[str, Any]]:
        """(the dataset the run is scored on, entries for the record's ``dataset`` section). Default: ``dataset``
        itself, nothing to note. Detection scores only the categories the model detects and notes which."""
        return dataset, {}

    @abstractmethod
    def paired(
        self, reference: Sequence[SamplePrediction], variant: Sequence[SamplePrediction], dataset: Dataset | None
    ) -> dict[str, Any] | None:
        """Paired statistics of ``variant`` against ``reference`` (same samples, same order) on the samples
        both evaluated; None when there is none. Keys are task-specific and documented by the task."""


TASKS: Registry[type[Task]] = Registry("task")
TASKS.add("image_classification", "repliscope.tasks.classification:ImageClassification")
TASKS.add("object_detection", "repliscope.tasks.detection:ObjectDetection")
TASKS.add("semantic_segmentation", "repliscope.tasks.segmentation:SemanticSegmentation")


def get_task(name: str) -> Task:
    """The task registered as ``name`` (the manifest's ``task``), instantiated."""
    return TASKS.get(name)()
