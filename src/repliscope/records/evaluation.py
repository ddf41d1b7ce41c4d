"""The evaluation record's types: everything needed to trust, repeat and compare one run.

Pure data (pydantic), serialisable to JSON; the store persists it and the report renders it. The bottom layer
(it imports nothing of repliscope): metrics, tasks and the manifest read these types from here;
:mod:`repliscope.evaluation.record` hands the same classes on and adds :class:`ImportedRecord`.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Detection(_Model):
    """One detected object: ``box`` [x1, y1, x2, y2] in pixels of the decoded source image (0-based pixel edges:
    the image spans [0, W] x [0, H]), ``score`` in the model's own scale, ``class_id`` in the dataset's
    category id space (COCO: 1..90, after the manifest's ``class_map``)."""

    box: list[float] = Field(min_length=4, max_length=4)
    score: float
    class_id: int


class SegmentationSample(_Model):
    """One segmentation sample's outcome, in the model's class indices (the manifest's labels): ``size_hw`` of the
    decoded image; ``num_classes`` K; ``confusion``: the non-zero cells ``[truth, predicted, pixels]`` of the
    per-image confusion matrix, K x (K + 1) (column K: a predicted label outside the classes; void pixels left
    out, counted in ``void_pixels``); ``predicted`` / ``truth``: the label maps as COCO run-length encodings per
    class index (``{"3": "<counts>"}``, pycocotools' compressed string, column-major),
    kept when their text is at most :data:`repliscope.tasks.segmentation.MAX_RLE_CHARS` (None: too large, only
    the counts are kept); ``truth`` marks void pixels under the key ``"void"``."""

    size_hw: tuple[int, int]
    num_classes: int
    confusion: list[list[int]]
    void_pixels: int = 0
    predicted: dict[str, str] | None = None
    truth: dict[str, str] | None = None
    instances: list[list[int]] | None = None
    """Datasets with object instances (COCO): per non-crowd instance of a scored category ``[class index,
    pixels, pixels predicted as its class]`` (per-object-size recall in unit evaluation); None otherwise."""


class SamplePrediction(_Model):
    """One sample's outcome. ``error`` is set (and the prediction lists are empty) when the sample failed.

    Classification fills ``topk_indices``/``topk_probs``; object detection fills ``detections`` (best score
    first; an empty list = nothing detected) and leaves ``detections`` None only for a failed sample."""

    sample_id: str
    label: int | None
    topk_indices: list[int] = Field(default_factory=list)
    topk_probs: list[float] = Field(default_factory=list)
    error: str | None = None
    detections: list[Detection] | None = None
    segmentation: SegmentationSample | None = None
    """Semantic segmentation: the per-image counts and masks (None for other tasks and failed samples)."""

    @property
    def top1(self) -> int | None:
        return self.topk_indices[0] if self.topk_indices else None


class MetricValue(_Model):
    """A proportion metric with its 95 % Wilson score interval: ``successes`` of ``n``."""

    name: str
    value: float
    ci_low: float
    ci_high: float
    n: int
    successes: int | None = None
    """Proportions (top-1, recall): the count of successes; None for metrics that are not a proportion (COCO
    AP: ``n`` is then the number of images and the interval a bootstrap over images)."""
    confidence: float = 0.95


class ClaimVerdict(_Model):
    metric: str
    claimed: float
    measured: float | None
    ci_low: float | None
    ci_high: float | None
    claim_dataset: str
    evaluated_dataset: str
    verdict: Literal["consistent", "inconsistent", "not comparable"]
    reason: str
    source: str
    direction: Literal["beats", "falls short", "within"] | None = None
    """Where the claim lies against the measured interval: below it (the model ``beats`` its claim), above it
    (``falls short``; for a latency the other way round), inside (``within``). None when no interval was judged
    (another dataset, nothing measured) and in records stored before it existed."""
    sampling: Literal["whole split", "random sample", "selection"] | None = None
    """How the judged samples were chosen (the record's ``dataset.sampling`` has the details): the interval
    assumes a random sample of the claimed split. None when no interval was judged and in older records."""


class Timings(_Model):
    """Wall-clock seconds of one run.

    ``total_seconds`` = ``load_seconds`` (building the model, an ONNX export, creating the session) +
    ``warmup_seconds`` (one inference on zeros of the first batch's shape) + ``loop_seconds`` (the measured
    loop: reading, pre-processing and inferring every sample). ``inference_seconds`` and
    ``batch_latencies_seconds`` are the runtime's share of the measured loop; ``throughput_samples_per_second``
    is evaluated samples / ``throughput_seconds`` (0 when undefined): ``loop_seconds`` plus, when
    ``read_ahead_samples`` were read and pre-processed while the model loaded (outside the loop), the CPU seconds
    that took (``read_ahead_cpu_seconds``) at the loop's own pace (x ``loop_seconds`` / the process's CPU seconds
    in the loop), so the rate is one of the whole work. Records stored before that have ``throughput_seconds``
    None (their rate is over ``loop_seconds`` alone). A pitfall sweep's variants share one loop: each
    variant's ``loop_seconds`` is its own model time (= ``inference_seconds``; a batch whose outputs it reused from
    a twin counts the twin's measured latency), its ``total_seconds`` its load + warm-up + that.

    Records stored before load and warm-up were separated have no ``loop_seconds`` (None): their
    ``total_seconds`` and throughput include the model load, and ``load_seconds`` / ``warmup_seconds`` read as 0.
    """

    total_seconds: float
    inference_seconds: float
    batch_latencies_seconds: list[float]
    throughput_samples_per_second: float
    load_seconds: float = 0.0
    warmup_seconds: float = 0.0
    loop_seconds: float | None = None
    read_ahead_samples: int = Field(default=0, ge=0)
    read_ahead_cpu_seconds: float = Field(default=0.0, ge=0)
    throughput_seconds: float | None = Field(default=None, ge=0)


class SampleTruth(_Model):
    """One detection sample's ground truth, columnar (row ``i`` of every list is object ``i``): ``boxes``
    [x1, y1, x2, y2] pixels of the decoded image (0-based edges), ``classes`` dataset category ids, ``areas``
    as annotated (None: the box area), ``iscrowd`` / ``ignore`` flags (see :class:`BoxAnnotation`), ``xywh``
    each box as the annotation file gives it (COCO ``[x, y, w, h]``, the numbers COCO's IoU uses; a row None:
    derived from ``boxes``; the whole list None: records stored before it was kept, or a dataset of corners)."""

    sample_id: str
    image_id: int | None = None
    size_hw: tuple[int, int] | None = None
    boxes: list[list[float]] = Field(default_factory=list)
    classes: list[int] = Field(default_factory=list)
    areas: list[float | None] = Field(default_factory=list)
    iscrowd: list[bool] = Field(default_factory=list)
    ignore: list[bool] = Field(default_factory=list)
    xywh: list[list[float] | None] | None = None


class GroundTruth(_Model):
    """Detection runs: the ground truth the run was scored against (every sample of the dataset, in the
    record's sample order), so metrics and unit evaluation (``repliscope units RUN``) work without the dataset.
    ``categories``: dataset category id -> name. Rebuild a :class:`Dataset` with
    :func:`repliscope.evaluation.ground_truth.dataset_of`."""

    categories: dict[int, str]
    samples: list[SampleTruth]


class ManifestInfo(_Model):
    name: str
    version: str
    path: str
    sha256: str
    text: str


class ShardProvenance(_Model):
    """One shard of a merged (sharded) evaluation: samples ``I::N`` of the dataset evaluated as a job of its own on
    one agent (``repliscope.evaluation.merge``). ``run_id``: the shard's own record, which is not stored (its
    samples are in the merged record); ``stack``: the shard's ``software.stack`` (key, spec, python, prefix, lock);
    ``stack_fields``: the values the merge compares between shards (dotted field -> value)."""

    shard: str
    run_id: str
    agent_id: str | None
    hostname: str | None
    stack: dict[str, Any]
    stack_fields: dict[str, Any]
    samples: int
    result_hash: str
    seconds: float


class EvaluationRecord(_Model):
    run_id: str
    created_at: datetime
    repliscope_version: str
    kind: str = "evaluation"
    manifest: ManifestInfo
    pipeline: dict[str, list[dict[str, Any]]]
    runtime: dict[str, Any]
    software: dict[str, Any]
    hardware: dict[str, Any]
    dataset: dict[str, Any]
    options: dict[str, Any]
    metrics: list[MetricValue]
    claims: list[ClaimVerdict]
    counts: dict[str, int]
    timings: Timings
    samples: list[SamplePrediction]
    result_hash: str
    sweep_id: str | None = None
    variant: str | None = None
    task: str = "image_classification"
    """The manifest's task (records stored before tasks existed are classification)."""
    ground_truth: GroundTruth | None = None
    """Object detection: the evaluated samples' ground truth (None for classification)."""
    per_class: list[dict[str, Any]] | None = None
    """Object detection: per category ``{"class_id", "name", "ap", "ar", "n_objects", "n_detections"}`` (``ap`` /
    ``ar`` None when COCOeval cannot define them); None for classification."""

    shards: list[ShardProvenance] | None = None
    """A sharded evaluation merged into this one record: each shard's agent, stack and own result (None: one run
    made every sample)."""

    def metric(self, name: str) -> MetricValue | None:
        return next((m for m in self.metrics if m.name == name), None)


def result_hash(samples: list[SamplePrediction], prob_decimals: int = 6) -> str:
    """sha256 over every sample's id, top-k indices, top-k probabilities (rounded), error and detections.

    Rounding to ``prob_decimals`` makes the hash robust to float printing, not to real numeric change.
    """
    h = hashlib.sha256()
    for s in samples:
        payload: list[Any] = [s.sample_id, s.topk_indices, [round(p, prob_decimals) for p in s.topk_probs], s.error]
        if s.detections is not None:  # detection: boxes to 1e-3 px, scores as the probabilities (unchanged
            # for classification records, so their stored hashes stay valid)
            payload.append(
                [[[round(v, 3) for v in d.box], round(d.score, prob_decimals), d.class_id] for d in s.detections]
            )
        if s.segmentation is not None:  # segmentation: the confusion counts and the predicted masks
            payload.append([s.segmentation.confusion, s.segmentation.void_pixels, s.segmentation.predicted])
        h.update(json.dumps(payload, separators=(",", ":")).encode())
        h.update(b"\n")
    return h.hexdigest()


RUN_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"
"""The run ids a record file may carry: letters, digits, ``_`` and ``-``, 1 to 64 characters, starting with a
letter or digit (``evaluate`` makes 32 hex digits). No ``/``, ``.`` or ``..``: the id names files
(``unsaved-runs/<run_id>.json``) and URLs."""
