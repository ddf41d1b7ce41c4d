"""Builders shared by run and sweep reports: claim, metrics, provenance; plus a run's failures and latency.

Every builder turns record data into :mod:`repliscope.report.view` objects with formatted text.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import PurePath
from typing import Any

from pydantic import BaseModel

from repliscope.evaluation.claims import DIRECTION_TEXT, direction_of, shown_verdict
from repliscope.evaluation.record import EvaluationRecord, ManifestInfo, MetricValue, SamplePrediction
from repliscope.metrics.intervals import MAX_HALF_WIDTH
from repliscope.number_text import unit_interval_text, unit_value_text
from repliscope.report import figures
from repliscope.report import formatting as fmt
from repliscope.report.view import (
    ClaimRow,
    ExtraFigure,
    FailureRow,
    FigureView,
    Image,
    ImageSink,
    MetricRow,
    PerClassRow,
    PipelineRow,
    Provenance,
)

MAX_FAILURES = 25
WIDE_INTERVAL_PT = 100.0 * MAX_HALF_WIDTH
"""A measured 95 % interval wider than +-2 percentage points (half-width) is too wide to confirm a claim (the
verdict rule's :data:`repliscope.metrics.intervals.MAX_HALF_WIDTH`): a claim is usually compared with other
models' numbers a point or two apart."""
_VERDICT_CSS = {"consistent": "ok", "inconsistent": "bad", "not comparable": "neutral"}
_OP_META_KEYS = frozenset({"op", "library", "library_version"})
_IMAGENET_LABELS = "builtin:imagenet-1k"

ClassNamer = Callable[[int | None], str]


def embed_sink(_name: str, png: bytes) -> str:
    """The default :data:`ImageSink`: embed the PNG as a data URI."""
    return figures.png_data_uri(png)


def manifest_yaml(manifest: ManifestInfo) -> dict[str, Any]:
    """The manifest text parsed as YAML (empty when it does not parse: the report still renders)."""
    import yaml

    try:
        data = yaml.safe_load(manifest.text)
    except yaml.YAMLError:
        return {}
    return data if isinstance(data, dict) else {}


def manifest_description(manifest: ManifestInfo) -> str | None:
    description = manifest_yaml(manifest).get("description")
    return str(description).strip() if description else None


def class_namer(manifest: ManifestInfo) -> ClassNamer:
    """``243 (bull mastiff)`` for manifests labelled with the built-in ImageNet classes, else the bare index."""
    labels = manifest_yaml(manifest).get("labels")
    names: list[str] = []
    if isinstance(labels, dict) and labels.get("source") == _IMAGENET_LABELS:
        from repliscope.datasets.classes import imagenet_classes

        names = [name for _, name in imagenet_classes()]

    def name(index: int | None) -> str:
        if index is None:
            return fmt.DASH
        return f"{index} ({names[index]})" if 0 <= index < len(names) else str(index)

    return name


def interval_warning(low: float | None, high: float | None, n: int | None) -> str | None:
    """``"n = 50 gives ±10 pt: too few samples to judge the claim"`` when the 95 % interval's half-width is
    over :data:`WIDE_INTERVAL_PT` percentage points, else None."""
    if low is None or high is None:
        return None
    half = 100.0 * (high - low) / 2.0
    if round(half, 9) <= WIDE_INTERVAL_PT:  # 0.74 - 0.70 is 0.04000000000000004 in floats
        return None
    who = f"n = {n} gives" if n is not None else "the 95 % interval is"
    return f"{who} ±{half:.0f} pt: too few samples to judge the claim"


def _claim_dicts(claims: Iterable[BaseModel | Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [claim.model_dump() if isinstance(claim, BaseModel) else dict(claim) for claim in claims]


def claim_direction(claim: Mapping[str, Any]) -> str | None:
    """The claim's direction (``beats``, ``falls short``, ``within``): as recorded, or from the numbers of a record
    judged before directions were recorded; None when no interval was judged."""
    direction = claim.get("direction")
    if direction in DIRECTION_TEXT:
        return str(direction)
    low, high, claimed = claim.get("ci_low"), claim.get("ci_high"), claim.get("claimed")
    if claim.get("verdict") not in ("consistent", "inconsistent") or low is None or high is None or claimed is None:
        return None
    return direction_of(float(claimed), float(low), float(high))


def _claim_unit(claim: Mapping[str, Any]) -> str:
    """How a claim's metric reads: ``fraction`` for a metric claimed as one (COCO AP, mIoU), else ``percent``."""
    from repliscope.manifest.schema import claim_metric_spec

    spec = claim_metric_spec(str(claim.get("metric")))
    return "fraction" if spec is not None and spec.unit == "fraction" else "percent"


def _claim_numbers(claim: Mapping[str, Any]) -> tuple[str, str, str]:
    """A claim's claimed value, measured value and interval in the house's format (:mod:`repliscope.number_text`,
    as the web pages): ``75.10 %``, or for a metric claimed as a fraction (COCO AP, mIoU) ``0.3310``, never
    ``33.10 %``."""
    unit = _claim_unit(claim)
    return (
        unit_value_text(unit, claim.get("claimed")),
        unit_value_text(unit, claim.get("measured")),
        unit_interval_text(unit, claim.get("ci_low"), claim.get("ci_high")),
    )


def claim_rows(claims: Iterable[BaseModel | Mapping[str, Any]], metrics: Sequence[MetricValue] = ()) -> list[ClaimRow]:
    """One row per claim verdict (ClaimVerdict objects or their JSON dicts, as sweeps store them); ``metrics``
    gives the n behind each measured value, for the wide-interval warning (left out of an ``inconsistent`` row:
    a wide interval that excludes the claim still refutes it)."""
    n_of = {m.name: m.n for m in metrics}
    rows = []
    for c in _claim_dicts(claims):
        verdict, reason = shown_verdict(c)
        source = str(c.get("source") or "")
        url = source.split()[0] if source.startswith(("https://", "http://")) else None
        warning = interval_warning(c.get("ci_low"), c.get("ci_high"), n_of.get(str(c.get("metric"))))
        claimed, measured, interval = _claim_numbers(c)
        rows.append(
            ClaimRow(
                metric=str(c.get("metric", "")),
                claimed=claimed,
                measured=measured,
                interval=interval,
                claim_dataset=str(c.get("claim_dataset", "")),
                evaluated_dataset=str(c.get("evaluated_dataset", "")),
                verdict=verdict,
                css=_VERDICT_CSS.get(verdict, "neutral"),
                reason=reason,
                source=source,
                source_url=url,
                warning=None if verdict == "inconsistent" else warning,
                direction=None if verdict == "not comparable" else claim_direction(c),
                sampling=c.get("sampling"),
            )
        )
    return rows


def claim_figure(
    claims: Iterable[BaseModel | Mapping[str, Any]], metrics: Sequence[MetricValue], sink: ImageSink
) -> FigureView | None:
    """The claimed values against the measured ones with their 95 % intervals (None without a measurement)."""
    n_of = {m.name: m.n for m in metrics}
    points = []
    for c in _claim_dicts(claims):
        measured, low, high = c.get("measured"), c.get("ci_low"), c.get("ci_high")
        if measured is None or low is None or high is None or c.get("claimed") is None:
            continue
        points.append(
            figures.ClaimPoint(
                label=f"{c.get('metric', '?')} on {c.get('claim_dataset', '?')}",
                claimed=float(c["claimed"]),
                measured=float(measured),
                low=float(low),
                high=float(high),
                wide=interval_warning(low, high, n_of.get(str(c.get("metric")))) is not None,
                unit=_claim_unit(c),
            )
        )
    if not points:
        return None
    bootstrap = any(m.successes is None for m in metrics)  # AP-like metrics: a bootstrap over images
    kind = "bootstrap interval over images" if bootstrap else "Wilson interval"
    caption = (
        f"Diamond: the claimed value; dot and bar: the measured value and its 95 % {kind}. An "
        f"interval wider than ±{WIDE_INTERVAL_PT:g} pt (drawn in red) cannot confirm or refute a claim."
    )
    title = "Claim against the measured interval"
    return FigureView(title, Image(sink("claim", figures.claim_chart(points)), title), caption)


def metric_rows(metrics: Sequence[MetricValue]) -> list[MetricRow]:
    """Proportions in percent with ``successes/n``; metrics that are not proportions (COCO AP, AR:
    ``successes`` None) as fractions with ``n images``, never ``None/n``."""
    return [
        MetricRow(
            name=m.name,
            value=fmt.pct(m.value),
            interval=fmt.interval(m.ci_low, m.ci_high),
            count=f"{m.successes}/{m.n}",
        )
        if m.successes is not None
        else MetricRow(
            name=m.name,
            value=unit_value_text("fraction", m.value),
            interval=unit_interval_text("fraction", m.ci_low, m.ci_high),
            count=f"{m.n} images",
        )
        for m in metrics
    ]


def per_class_rows(rows: Sequence[Mapping[str, Any]] | None) -> list[PerClassRow]:
    """Detection: one row per category of the record's ``per_class`` (AP / AR as fractions)."""

    def frac(x: Any) -> str:
        return fmt.DASH if x is None else f"{float(x):.4f}"

    return [
        PerClassRow(
            category=f"{r.get('class_id')} {r.get('name', '')}".strip(),
            ap=frac(r.get("ap")),
            ar=frac(r.get("ar")),
            objects=fmt.scalar(r.get("n_objects")),
            detections=fmt.scalar(r.get("n_detections")),
        )
        for r in rows or ()
    ]


def pipeline_rows(pipeline: Mapping[str, Sequence[Mapping[str, Any]]] | None) -> list[PipelineRow]:
    rows = []
    for stage, ops in (pipeline or {}).items():
        for i, op in enumerate(ops):
            params = ", ".join(
                f"{k}={'none' if v is None else fmt.scalar(v)}" for k, v in op.items() if k not in _OP_META_KEYS
            )
            rows.append(
                PipelineRow(
                    stage=stage,
                    index=i,
                    op=str(op.get("op", "?")),
                    parameters=params,
                    library=fmt.scalar(op.get("library")),
                    version=fmt.scalar(op.get("library_version")),
                )
            )
    return rows


def export_note(runtime: Mapping[str, Any]) -> str | None:
    """One sentence on an ONNX export (the model ran as a converted graph), None when there was none."""
    export = runtime.get("export")
    if not isinstance(export, Mapping):
        return None
    origin = export.get("exported_from", "the source framework")
    parts = [f"The model was exported from {origin} to ONNX with {export.get('exporter', 'an exporter')}"]
    details = [
        f"{label} {export[k]}"
        for k, label in (("opset", "opset"), ("torch_version", "torch"))
        if export.get(k) is not None
    ]
    if details:
        parts.append(f" ({', '.join(details)})")
    parts.append(f" and run by {runtime.get('runtime', 'the runtime')}")
    if export.get("onnx_sha256"):
        parts.append(f"; ONNX sha256 {fmt.short_hash(str(export['onnx_sha256']))}")
    cached = export.get("cached")
    if cached is not None:
        parts.append("; reused from the export cache" if cached else "; exported for this run")
    return (
        "".join(parts) + ". Numerical differences between the exported graph and the source framework are "
        "part of what this run measures."
    )


def _software_rows(software: Mapping[str, Any]) -> list[tuple[str, str]]:
    rows = fmt.flatten(software, skip=frozenset({"distributions", "threadpools", "env"}))
    for name, version in (software.get("distributions") or {}).items():
        rows.append((name, version if version else "not installed"))
    env = {k: v for k, v in (software.get("env") or {}).items() if v is not None}
    rows.extend((f"env {k}", str(v)) for k, v in env.items())
    if not env and "env" in software:
        rows.append(("thread environment variables", "none set"))
    return rows


def _threadpool_rows(software: Mapping[str, Any]) -> list[list[str]]:
    rows = []
    for pool in software.get("threadpools") or []:
        path = pool.get("filepath")
        rows.append(
            [
                fmt.scalar(pool.get(k))
                for k in ("user_api", "internal_api", "version", "num_threads", "threading_layer", "architecture")
            ]
            + [PurePath(str(path)).name if path else fmt.DASH]
        )
    return rows


def provenance(
    manifest: ManifestInfo,
    pipeline: Mapping[str, Sequence[Mapping[str, Any]]] | None,
    runtime: Mapping[str, Any],
    software: Mapping[str, Any],
    hardware: Mapping[str, Any],
    dataset: Mapping[str, Any],
    options: Mapping[str, Any],
    timings: Sequence[tuple[str, str]] = (),
) -> Provenance:
    return Provenance(
        manifest_name=manifest.name,
        manifest_version=manifest.version,
        manifest_path=manifest.path,
        manifest_sha256=manifest.sha256,
        manifest_text=manifest.text,
        pipeline=pipeline_rows(pipeline),
        runtime=fmt.flatten(runtime),
        export_note=export_note(runtime),
        software=_software_rows(software),
        threadpools=_threadpool_rows(software),
        hardware=fmt.flatten(hardware),
        dataset=fmt.flatten(dataset),
        options=fmt.flatten(options),
        timings=list(timings),
    )


def record_provenance(record: EvaluationRecord) -> Provenance:
    base = provenance(
        record.manifest,
        record.pipeline,
        record.runtime,
        record.software,
        record.hardware,
        record.dataset,
        record.options,
    )
    return dataclasses.replace(base, shards=shard_rows(record))


def shard_rows(record: EvaluationRecord) -> list[list[str]]:
    """One row per shard of a merged sharded evaluation (``record.shards``): shard ``I/N``, agent, host, samples,
    the stack's key, the shard's result hash (12 characters) and its seconds; empty for a single-machine run."""
    return [
        [
            s.shard,
            s.agent_id or fmt.DASH,
            s.hostname or fmt.DASH,
            str(s.samples),
            str(s.stack.get("key") or fmt.DASH),
            s.result_hash[:12],
            fmt.seconds(s.seconds),
        ]
        for s in record.shards or []
    ]


def _is_failure(s: SamplePrediction) -> bool:
    return s.error is not None or (s.label is not None and s.top1 != s.label)


def failures(
    samples: Sequence[SamplePrediction], namer: ClassNamer, detection: bool = False
) -> tuple[list[FailureRow], int, str]:
    """Failed samples first, then top-1 misses, at most :data:`MAX_FAILURES`; also how many more and a summary.
    ``detection``: failed samples only (a detection run has no top-1)."""
    errors = [s for s in samples if s.error is not None]
    if detection:
        rows = [
            FailureRow(sample_id=s.sample_id, label=fmt.DASH, predicted=fmt.DASH, probability=fmt.DASH, error=s.error)
            for s in errors[:MAX_FAILURES]
        ]
        return rows, max(0, len(errors) - MAX_FAILURES), f"{len(errors)} of {len(samples)} samples failed."
    misses = [s for s in samples if s.error is None and _is_failure(s)]
    labelled = sum(1 for s in samples if s.label is not None and s.error is None)
    rows = [
        FailureRow(
            sample_id=s.sample_id,
            label=namer(s.label),
            predicted=namer(s.top1),
            probability=fmt.pct(s.topk_probs[0]) if s.topk_probs else fmt.DASH,
            error=s.error,
        )
        for s in (errors + misses)[:MAX_FAILURES]
    ]
    summary = (
        f"{len(misses)} of {labelled} labelled samples have a wrong top-1 prediction; "
        f"{len(errors)} of {len(samples)} samples failed."
    )
    return rows, max(0, len(errors) + len(misses) - MAX_FAILURES), summary


def latency(record: EvaluationRecord, sink: ImageSink) -> tuple[FigureView | None, list[tuple[str, str]]]:
    t = record.timings
    batch_size = record.options.get("batch_size")
    lat = t.batch_latencies_seconds
    if t.loop_seconds is None:  # stored before load and warm-up were timed apart
        stats = [("total (model load included)", fmt.seconds(t.total_seconds))]
    else:
        stats = [
            ("total", fmt.seconds(t.total_seconds)),
            ("model load (build, conversion, session)", fmt.seconds(t.load_seconds)),
            ("warm-up (one batch, not measured)", fmt.seconds(t.warmup_seconds)),
            ("measured loop", fmt.seconds(t.loop_seconds)),
        ]
    stats += [
        (
            f"inference (in the measured loop{fmt.runtime_seconds_note(record.options)})",
            fmt.seconds(t.inference_seconds),
        ),
        (
            "throughput (measured loop)"
            if not t.read_ahead_samples
            else f"throughput (measured loop + {t.read_ahead_samples} samples read ahead while the model loaded)",
            f"{t.throughput_samples_per_second:.1f} samples/s",
        ),
        ("batches", str(len(lat))),
        ("batch size", fmt.scalar(batch_size)),
    ]
    if lat:
        stats.append(("median batch latency", f"{1000 * statistics.median(lat):.1f} ms"))
    png = figures.latency_chart(lat, batch_size if isinstance(batch_size, int) else None)
    if png is None:
        return None, stats
    caption = (
        "Runtime inference time of each batch, in run order (decoding and pre-processing run in parallel "
        "threads and are not included). "
        + (
            "The model was warmed up with one untimed batch before the first one."
            if t.loop_seconds is not None and t.warmup_seconds > 0
            else "The first batch may include warm-up (this run had no separate warm-up)."
        )
    )
    return FigureView("Batch latency", Image(sink("latency", png), "batch latency chart"), caption), stats


def extra_figure_views(extra: Sequence[ExtraFigure] | None, sink: ImageSink) -> list[FigureView]:
    """The ``layer-diff`` hook: figures from other components, embedded as given."""
    views = []
    for i, (title, png) in enumerate(extra or ()):
        views.append(FigureView(title, Image(sink(f"extra-{i + 1}", png), title)))
    return views
