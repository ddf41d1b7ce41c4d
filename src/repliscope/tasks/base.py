"""The task interface: what a manifest's ``task`` owns (one class per task, registered under that word).

A task decides which post-processing ops a manifest may use, how a post-processed batch becomes per-sample
records (:class:`SamplePrediction`), which metrics a run gets (and their intervals), which metric names a
claim may use, and the paired statistics of two runs on the same samples (pitfall sweeps, ``runs compare``).
The evaluation loop, store, report, pitfalls and diff ask the manifest's task instead of assuming top-k.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from repliscope.datasets.base import Dataset, Sample
from repliscope.metrics.intervals import MIN_BOOTSTRAP_SAMPLES
from repliscope.ops.base import Predictions
from repliscope.records.evaluation import MetricValue, SamplePrediction
from repliscope.registry import Registry

if TYPE_CHECKING:
    from repliscope.manifest.schema import Manifest
    from repliscope.ops.base import PostOp

PostCheck = tuple[str, tuple[str | int, ...], "list[str] | None"]
"""One problem of a manifest's postprocess: (message, manifest path, allowed values or None)."""


@dataclass(frozen=True)
class MetricSpec:
    """A metric a claim of the task may name: how its value is written in a claim (``percent``: 75.1; ``fraction``:
    0.751), which way is better, and the 95 % interval a run gives it (``wilson``: Wilson score over samples;
    ``bootstrap``: a bias-corrected bootstrap over images). ``hint`` follows "is a fraction" in the claim error of a
    value above 1 (e.g. how a tool prints it)."""

    name: str
    unit: Literal["percent", "fraction"]
    interval: Literal["wilson", "bootstrap"]
    direction: Literal["higher", "lower"] = "higher"
    hint: str = ""
    min_images: int = MIN_BOOTSTRAP_SAMPLES
    """The fewest images a ``bootstrap`` interval of this metric judges a claim with (the smallest size its coverage
    was measured near 95 %: docs/benchmarks.md, "Interval coverage"); fewer: "not comparable"."""

    @property
    def limit(self) -> float:
        """The largest value a claim may give: 100 (percent) or 1 (fraction)."""
        return 100.0 if self.unit == "percent" else 1.0

    def claim_error(self, value: float) -> str | None:
        """Why ``value`` cannot be a claim of this metric (above :attr:`limit`), or None."""
        if value <= self.limit:
            return None
        if self.unit == "percent":
            return f"{self.name} is in percent: {value} is above 100"
        return f"{self.name} is a fraction{self.hint}: {value} is above 1"


@dataclass(frozen=True)
class ReportSpec:
    """How a run of the task is shown (report, run page, CLI): section titles, the interval note, the metrics
    table's count column, and whether the failures list also holds top-1 misses."""

    interval_note: str
    """After "On DATASET, N samples; " in the report's metrics section."""
    metrics_title: str = "Measured metrics"
    failures_title: str = "Failed samples"
    per_class_title: str | None = None
    """A section of the record's per-class rows (None: no such section, e.g. when the task's own units section
    shows them)."""
    misclassified: bool = False
    """The failures list and the run page's samples also hold top-1 misses (records with a label and top-k)."""
    count_header: str = "n"
    sample_filters: tuple[str, str] = ("all", "failed")
    """The run page's sample filters: (default, other)."""


class Task(ABC):
    """One task. Stateless: the registry holds the class; :func:`get_task` returns an instance."""

    name: ClassVar[str]
    post_ops: ClassVar[tuple[str, ...]]
    """Registered post-processing op names this task's manifests may use (any other is a manifest error)."""
    metric_specs: ClassVar[tuple[MetricSpec, ...]]
    """The metrics a claim of this task may name (performance claims are shared by every task)."""
    output_kinds: ClassVar[tuple[str, ...]]
    """Allowed ``outputs[].kind`` values."""
    truth: ClassVar[str]
    """What a sample must carry to be scored and what its record keeps: ``labels`` (a class; top-k records),
    ``boxes`` (detections; the record keeps the ground truth boxes, so box unit evaluation applies) or ``masks``
    (confusion counts and label maps; mask unit evaluation applies). The service offers only datasets whose
    samples carry it; see ``repliscope.store.service_tables.ANNOTATIONS``."""
    class_scores: ClassVar[bool] = False
    """The model has exactly one output, a score per class, read as one array (``Runner.infer``); a pitfall
    sweep pairs variants on its post-processed probabilities (KL, |Δp|) instead of :meth:`paired`. False: every
    named output is read (``Runner.infer_outputs``)."""
    pitfall_modules: ClassVar[tuple[str, ...]] = ()
    """Modules registering this task's pitfalls (:data:`~repliscope.pitfalls.base.PITFALLS` imports them on its first
    read)."""
    report: ClassVar[ReportSpec]

    claim_metrics: ClassVar[tuple[str, ...]]
    """The names of :attr:`metric_specs` (set for each subclass)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "metric_specs" in cls.__dict__:
            cls.claim_metrics = tuple(m.name for m in cls.metric_specs)

    @classmethod
    def metric_spec(cls, name: str) -> MetricSpec | None:
        """The claim metric ``name`` of this task, or None."""
        return next((m for m in cls.metric_specs if m.name == name), None)

    @classmethod
    def interval(cls) -> str:
        """The interval method of the task's metrics (``wilson`` / ``bootstrap``)."""
        return cls.metric_specs[0].interval

    def reads_named_outputs(self, output_names: Sequence[str]) -> bool:
        """True when inference returns every named output (``Runner.infer_outputs``), False for one score array."""
        return not self.class_scores or len(output_names) > 1

    def check_postprocess(self, manifest: Manifest, post: Sequence[PostOp]) -> list[PostCheck]:
        """Static checks of the manifest's built postprocess (its ops are already the task's): one
        :data:`PostCheck` per problem. Default: none."""
        return []

    def check_record(self, record: Any) -> None:
        """Raise ValueError when a record's stored metrics contradict its samples. Default: nothing to check."""
        return None

    @abstractmethod
    def check_dataset(self, dataset: Dataset, num_classes: int, class_names: Sequence[str] | None = None) -> None:
        """Raise DatasetError when ``dataset`` cannot be evaluated by this task (e.g. classification labels
        outside the model's classes; detection samples without ground truth boxes, or categories the manifest's
        ``labels`` do not name). ``class_names``: the manifest's labels, when known."""

    @abstractmethod
    def to_samples(self, preds: Predictions, batch: Sequence[Sample], rows: Sequence[int]) -> list[SamplePrediction]:
        """Records of the successfully pre-processed samples: row ``j`` of ``preds`` is ``batch[rows[j]]``.
        Raises RepliscopeError when the postprocess did not produce what this task records (e.g. no ``topk``)."""

    def batch_counts(self, preds: Predictions, batch: Sequence[Sample], rows: Sequence[int]) -> dict[str, int]:
        """Counts of one batch's post-processed rows (row ``j`` of ``preds`` is ``batch[rows[j]]``) that the record
        keeps beside ``total`` / ``evaluated`` / ``failed``, summed over the run. Default: none (classification
        counts its ties)."""
        return {}

    def has_truth(self, sample: Sample) -> bool:
        """Whether ``sample`` carries what this task scores against (:attr:`truth`): a label, box annotations
        (``objects``, possibly empty) or a mask. The record's ``labelled`` count."""
        if self.truth == "boxes":
            return sample.objects is not None
        if self.truth == "masks":
            return sample.mask is not None
        return sample.label is not None

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


def truth_of(name: str) -> str | None:
    """:attr:`Task.truth` of the task registered as ``name`` (``labels`` / ``boxes`` / ``masks``); None when no
    task is (a stored record of a task this installation lacks): what record-reading code asks instead of
    comparing task names."""
    return TASKS.get(name).truth if name in TASKS else None


def all_tasks() -> list[type[Task]]:
    """Every registered task class, in name order (imports each task's module)."""
    return [TASKS.get(name) for name in TASKS.names()]


def task_for_post_ops(names: Sequence[str]) -> Task:
    """The task whose post ops ``names`` are (the tasks' op names are disjoint): for callers that run a
    pipeline without its manifest (calibration). A postprocess naming no task's op is a score task's
    (:attr:`Task.class_scores`); RepliscopeError when no task has those ops."""
    from repliscope.errors import RepliscopeError

    tasks = all_tasks()
    for cls in tasks:
        if not cls.class_scores and any(n in cls.post_ops for n in names):
            return cls()
    scores = [cls for cls in tasks if cls.class_scores]
    if not scores:
        raise RepliscopeError(f"no registered task has the post ops {', '.join(names)}")
    return scores[0]()
