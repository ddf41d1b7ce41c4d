"""The evaluation record: everything needed to trust, repeat and compare one run.

The record's types live in the bottom layer, :mod:`repliscope.records.evaluation` (so metrics, tasks and the
manifest read them without importing the evaluation package); they are handed on here unchanged, with
:class:`ImportedRecord`, the check of a record read from a file (it asks the task registry, which sits above the
bottom layer).
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import Field, NonNegativeInt, model_validator

from repliscope.records.evaluation import (
    RUN_ID_PATTERN,
    ClaimVerdict,
    Detection,
    EvaluationRecord,
    GroundTruth,
    ManifestInfo,
    MetricValue,
    SamplePrediction,
    SampleTruth,
    SegmentationSample,
    ShardProvenance,
    Timings,
    result_hash,
)

__all__ = [
    "RUN_ID_PATTERN",
    "ClaimVerdict",
    "Detection",
    "EvaluationRecord",
    "GroundTruth",
    "ImportedRecord",
    "ManifestInfo",
    "MetricValue",
    "SamplePrediction",
    "SampleTruth",
    "SegmentationSample",
    "ShardProvenance",
    "Timings",
    "result_hash",
]


def _non_finite(value: Any, at: str) -> str | None:
    """The path of the first NaN or infinity in plain data (dicts, lists, scalars), else None."""
    stack: list[tuple[Any, str]] = [(value, at)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return where
        if isinstance(item, dict):
            stack.extend((v, f"{where}.{k}") for k, v in item.items())
        elif isinstance(item, list | tuple):
            stack.extend((v, f"{where}[{i}]") for i, v in enumerate(item))
    return None


class ImportedRecord(EvaluationRecord):
    """An :class:`EvaluationRecord` read from a file (``runs import``): someone else may have written it, so it is
    checked like a manifest before it is stored: a run id of the id alphabet (:data:`RUN_ID_PATTERN`), every
    number finite (a NaN made the run's API pages answer 500), counts, metric sizes and timings non-negative, each
    proportion metric equal to ``successes / n`` inside its interval, a classification record's metrics equal to
    the ones its samples give, and ``result_hash`` equal to the hash of its samples (a record whose samples were
    edited keeps a stale hash). The hash is a checksum, not a signature: a record rebuilt consistently by hand
    passes; it is stored as what it is, an imported run."""

    run_id: str = Field(pattern=RUN_ID_PATTERN)
    counts: dict[str, NonNegativeInt]

    @model_validator(mode="after")
    def _consistent(self) -> ImportedRecord:
        where = _non_finite(self.model_dump(mode="python", exclude={"created_at"}), "record")
        if where is not None:
            raise ValueError(f"{where} is not a finite number (NaN and infinity are refused)")
        t = self.timings
        negative = [
            name
            for name, v in (
                ("total_seconds", t.total_seconds),
                ("inference_seconds", t.inference_seconds),
                ("throughput_samples_per_second", t.throughput_samples_per_second),
                ("load_seconds", t.load_seconds),
                ("warmup_seconds", t.warmup_seconds),
                ("loop_seconds", t.loop_seconds or 0.0),
                ("batch_latencies_seconds", min(t.batch_latencies_seconds, default=0.0)),
            )
            if v < 0
        ]
        if negative:
            raise ValueError(f"timings.{negative[0]} is negative")
        for i, m in enumerate(self.metrics):
            at = f"metrics[{i}] ({m.name})"
            if m.n < 0 or (m.successes is not None and not 0 <= m.successes <= m.n):
                raise ValueError(f"{at}: n {m.n} and successes {m.successes} must satisfy 0 <= successes <= n")
            # a Wilson bound of 0 successes comes out as 1e-17: rounding, not a forged interval
            if not m.ci_low - 1e-9 <= m.value <= m.ci_high + 1e-9 or not 0 < m.confidence < 1:
                raise ValueError(
                    f"{at}: value {m.value} must lie in its interval [{m.ci_low}, {m.ci_high}] at a confidence "
                    f"in (0, 1) (got {m.confidence})"
                )
            if m.successes is not None and m.n and not math.isclose(m.value, m.successes / m.n, abs_tol=1e-12):
                raise ValueError(f"{at}: value {m.value} is not successes / n = {m.successes} / {m.n}")
        actual = result_hash(self.samples)
        if actual != self.result_hash:
            raise ValueError(
                f"result_hash {self.result_hash[:16]}... is not the hash of the record's samples ({actual[:16]}...): "
                "the samples were changed after the run"
            )
        from repliscope.tasks.base import TASKS

        if self.task in TASKS:
            TASKS.get(self.task)().check_record(self)
        return self
