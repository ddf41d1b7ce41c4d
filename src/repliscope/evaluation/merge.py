"""One evaluation record from the shards of a sharded evaluation.

A sharded evaluation cuts the dataset (after its sorted order and ``limit``) into N shards, shard I = samples
``I::N``, and evaluates each as a job of its own (``shard: I/N``), on whichever agent. :func:`merge_shards` makes
the ONE record of the whole run from the shards' records:

- every sample exactly once, in the dataset's order (shard I's k-th sample is sample ``I + k*N``): a missing or
  repeated shard, a sample id in two shards, a shard holding more or fewer samples than its slice, or ids that do
  not make up the dataset the shards were cut from (:attr:`ShardInfo.sample_ids_sha256`) refuse the merge;
- metrics, intervals, per-class rows and claim verdicts recomputed by the task from the merged per-sample records
  (never averaged over shards), so they, the ``result_hash`` and the dataset ``identity`` are the values one
  machine evaluating the whole dataset records;
- the shards' manifest, model, runtime and dataset must be the same; their stacks (:data:`STACK_FIELDS`: versions
  of python, repliscope, the distributions, the runtime, the pipeline's libraries, the stack's lock) too, unless
  ``allow_mixed_stacks`` (the record then lists the differing fields in ``options["mixed_stack_fields"]``);
- provenance: :attr:`EvaluationRecord.shards` lists each shard's agent, stack, sample count and result hash.

Pure data in, a record out: no Dask, no store (the caller stores the merged record in one transaction)."""

from __future__ import annotations

import base64
import hashlib
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, TypeAdapter

from repliscope.datasets.base import Dataset, identity_of_lines
from repliscope.errors import RepliscopeError
from repliscope.evaluation.record import EvaluationRecord, GroundTruth, Timings, result_hash
from repliscope.records.evaluation import SamplePrediction, SampleTruth, ShardProvenance

STACK_FIELDS: tuple[tuple[str, ...], ...] = (
    ("repliscope_version",),
    ("software", "python"),
    ("software", "python_implementation"),
    ("software", "numpy"),
    ("software", "pillow"),
    ("software", "pillow_libraries"),
    ("software", "distributions"),
    ("software", "stack", "lock_sha256"),
    ("runtime", "framework"),
    ("runtime", "framework_version"),
    ("runtime", "device"),
    ("pipeline",),
)
"""What makes two shards' stacks differ (a dotted prefix: every value under it is compared). The CPU, the
thread count, the platform string and install paths are not part of a stack: they are listed per shard only."""

SAME_FIELDS: tuple[tuple[str, ...], ...] = (
    ("kind",),
    ("task",),
    ("manifest", "sha256"),
    ("runtime", "runtime"),
    ("runtime", "model_sha256"),
    ("dataset", "name"),
    ("dataset", "origin"),
    ("dataset", "label_rule"),
    ("dataset", "license"),
    ("dataset", "evaluated_as"),
    ("ground_truth", "categories"),
)
"""What every shard must share, whatever is allowed: the same manifest and model on the same runtime, over the
same dataset declared the same way."""

SUMMED_DATASET_FIELDS = ("num_labelled", "objects_left_out")
"""Entries of the record's ``dataset`` that count samples or objects: the merged value is the shards' sum."""

MIXED_STACKS_FLAG = "--allow-mixed-stacks"


class MergeError(RepliscopeError):
    """The shards cannot make one record; the message names the shard(s) and the field."""


class ShardInfo(BaseModel):
    """What a shard job knows of the whole dataset it was cut from and returns beside its record
    (``JobOutcome.shard``): ``index`` / ``count`` (shard I of N), ``of_samples`` (samples of the whole dataset),
    ``sample_ids_sha256`` (:func:`sample_ids_sha256` of the whole dataset's ids, in order), ``description`` (the
    whole dataset's), ``identity_lines`` (base64 of :func:`repliscope.datasets.base.identity_line` of each of the
    shard's samples, in order, from the bytes the shard read); ``limit`` and ``sampling`` (the run's ``--limit``
    and declared sampling: how the whole run's samples were chosen)."""

    model_config = ConfigDict(extra="forbid")

    index: int
    count: int
    of_samples: int
    sample_ids_sha256: str
    description: str
    identity_lines: list[str]
    limit: int | None = None
    sampling: str | None = None

    @property
    def label(self) -> str:
        return f"{self.index}/{self.count}"


def sample_ids_sha256(ids: Sequence[str]) -> str:
    """sha256 hex of the sample ids in order, one per line."""
    h = hashlib.sha256()
    for sample_id in ids:
        h.update(sample_id.encode())
        h.update(b"\n")
    return h.hexdigest()


@dataclass
class ShardData(Dataset):
    """Samples ``index::count`` of a dataset (:func:`cut_shard`), with what the merge needs of the whole one; it
    keeps the fingerprints of what the run read (the record builder hands them to :meth:`identity_from`)."""

    index: int = 0
    count: int = 1
    whole_size: int = 0
    whole_ids_sha256: str = ""
    whole_description: str = ""
    read_fingerprints: list[str] | None = None

    def identity_from(self, fingerprints: Sequence[str]) -> str:
        self.read_fingerprints = list(fingerprints)
        return super().identity_from(fingerprints)


def cut_shard(data: Dataset, index: int, count: int) -> ShardData:
    """Samples ``index::count`` of ``data`` (after its sorted order and limit); the description says which shard."""
    import dataclasses

    if not 0 <= index < count:
        raise RepliscopeError(f"option shard must be 'I/N' with integers 0 <= I < N (e.g. 0/2), got {index}/{count}")
    fields = {f.name: getattr(data, f.name) for f in dataclasses.fields(Dataset) if f.init}
    return ShardData(
        **{
            **fields,
            "samples": list(data.samples)[index::count],
            "_identity": None,
            "description": f"{data.description} (shard {index}/{count})".strip(),
        },
        index=index,
        count=count,
        whole_size=len(data.samples),
        whole_ids_sha256=sample_ids_sha256([s.id for s in data.samples]),
        whole_description=data.description,
    )


def shard_info(data: ShardData, limit: int | None = None, sampling: str | None = None) -> ShardInfo:
    """What the shard's job returns beside its record, once its evaluation read every sample; ``limit`` and
    ``sampling``: the run's ``--limit`` and declared sampling."""
    from repliscope.datasets.base import identity_line

    if data.read_fingerprints is None or len(data.read_fingerprints) != len(data.samples):
        raise RepliscopeError(
            f"shard {data.index}/{data.count}: its run recorded no fingerprint of the samples it read, so its samples "
            "cannot be merged"
        )
    return ShardInfo(
        index=data.index,
        count=data.count,
        of_samples=data.whole_size,
        sample_ids_sha256=data.whole_ids_sha256,
        description=data.whole_description,
        limit=limit,
        sampling=sampling,
        identity_lines=[
            base64.b64encode(identity_line(s, fp)).decode("ascii")
            for s, fp in zip(data.samples, data.read_fingerprints, strict=True)
        ],
    )


@dataclass(frozen=True)
class Shard:
    """One shard's result: its ``record``, its ``info`` and the ``agent`` that made it (the agent's capabilities
    dump, as ``JobOutcome.agent``; {} when it ran in this process)."""

    record: EvaluationRecord
    info: ShardInfo
    agent: Mapping[str, Any] = field(default_factory=dict)

    @property
    def where(self) -> str:
        agent = self.agent.get("agent_id") or self.record.hardware.get("agent_id")
        return f"shard {self.info.label}" + (f" on agent {agent}" if agent else "")


def merge_shards(shards: Sequence[Shard], *, allow_mixed_stacks: bool = False) -> EvaluationRecord:
    """The one evaluation record of a sharded run (see the module); a :class:`MergeError` naming the shard and
    the field when the shards do not make exactly the whole dataset once, differ in what ran, or (unless
    ``allow_mixed_stacks``) in their stacks."""
    if not shards:
        raise MergeError("no shard to merge")
    ordered = _in_shard_order(shards)
    first = ordered[0]
    for path in SAME_FIELDS:
        differing = _differences(ordered, path)
        if differing:
            raise MergeError(f"the shards ran different things, they cannot make one record: {'; '.join(differing)}")
    for name in ("of_samples", "sample_ids_sha256", "description", "limit", "sampling"):
        values = {getattr(s.info, name) for s in ordered}
        if len(values) > 1:
            listed = ", ".join(f"{s.info.label}: {getattr(s.info, name)!r}" for s in ordered)
            raise MergeError(f"the shards were cut from different datasets ({name} {listed})")
    mixed = [d for path in STACK_FIELDS for d in _differences(ordered, path)]
    if mixed and not allow_mixed_stacks:
        raise MergeError(
            f"the shards ran in different stacks: {'; '.join(mixed)}. Run every shard in one stack (`evaluate "
            f"--stack`, or agents of one stack), or merge them anyway with {MIXED_STACKS_FLAG} (option "
            "allow_mixed_stacks: the record then lists each shard's stack)"
        )
    samples, truths, lines = _interleave(ordered)
    truth = (
        GroundTruth(categories=first.record.ground_truth.categories, samples=truths)
        if first.record.ground_truth is not None
        else None
    )
    failed = sum(1 for p in samples if p.error is not None)
    evaluated = len(samples) - failed
    timings = _timings(ordered, evaluated)
    options = dict(first.record.options)
    if mixed:
        options["mixed_stack_fields"] = [d.split(":", 1)[0] for d in mixed]
    hardware = {k: v for k, v in first.record.hardware.items() if k != "agent_id"}
    hardware["agents"] = [_agent_id(s) for s in ordered]
    merged = EvaluationRecord(
        run_id=uuid.uuid4().hex,
        created_at=datetime.now(UTC),
        repliscope_version=first.record.repliscope_version,
        kind=first.record.kind,
        manifest=first.record.manifest,
        pipeline=first.record.pipeline,
        runtime=first.record.runtime,
        software=first.record.software,
        hardware=hardware,
        dataset=_dataset(ordered, identity_of_lines(lines)),
        options=options,
        metrics=[],
        claims=[],
        counts=_counts(ordered, samples, failed),
        timings=timings,
        samples=samples,
        result_hash=result_hash(samples),
        task=first.record.task,
        ground_truth=truth,
        shards=[_provenance(s) for s in ordered],
    )
    _score(merged, first, failed)
    return merged


# -- the checks ------------------------------------------------------------------------------------------------
def _in_shard_order(shards: Sequence[Shard]) -> list[Shard]:
    """The shards by index; a MergeError for shard counts that differ, a shard given twice or one missing."""
    counts = sorted({s.info.count for s in shards})
    if len(counts) > 1:
        raise MergeError(
            f"the shards were cut N ways with different N ({', '.join(s.info.label for s in shards)}): one sharded "
            "run has one N"
        )
    n = counts[0]
    by_index: dict[int, Shard] = {}
    for s in shards:
        if not 0 <= s.info.index < n:
            raise MergeError(f"shard {s.info.label}: the index must be 0 to {n - 1}")
        if s.info.index in by_index:
            raise MergeError(
                f"shard {s.info.label} is given twice (runs {by_index[s.info.index].record.run_id} and "
                f"{s.record.run_id}): each shard is merged once"
            )
        by_index[s.info.index] = s
    missing = [f"{i}/{n}" for i in range(n) if i not in by_index]
    if missing:
        raise MergeError(
            f"shard(s) {', '.join(missing)} missing (got {', '.join(f'{i}/{n}' for i in sorted(by_index))}): a merged "
            "record holds every sample, so every shard must be in"
        )
    return [by_index[i] for i in range(n)]


def _interleave(shards: list[Shard]) -> tuple[list[SamplePrediction], list[SampleTruth], list[bytes]]:
    """The samples (with their ground truth and identity lines) in the dataset's order; a MergeError when a sample
    id is in two shards, a shard holds more or fewer samples than its slice, or the ids are not the dataset's."""
    n, total = len(shards), shards[0].info.of_samples
    seen: dict[str, str] = {}
    repeated: list[str] = []
    for s in shards:
        for p in s.record.samples:
            if p.sample_id in seen:
                repeated.append(f"{p.sample_id} (shards {seen[p.sample_id]} and {s.info.label})")
            else:
                seen[p.sample_id] = s.info.label
    if repeated:
        shown = ", ".join(repeated[:5]) + (f" and {len(repeated) - 5} more" if len(repeated) > 5 else "")
        raise MergeError(f"{len(repeated)} sample(s) are in more than one shard: {shown}; each sample is merged once")
    for s in shards:
        expected = len(range(s.info.index, total, n))
        got = len(s.record.samples)
        if got != expected:
            lost = "missing" if got < expected else "extra"
            raise MergeError(
                f"{s.where} holds {got} samples, its slice {s.info.index}::{n} of the {total}-sample dataset holds "
                f"{expected} ({abs(expected - got)} {lost}): the merged record would not hold every sample exactly once"
            )
        if len(s.info.identity_lines) != got:
            raise MergeError(f"{s.where}: {len(s.info.identity_lines)} identity lines for {got} samples")
        gt = s.record.ground_truth
        if gt is not None and [t.sample_id for t in gt.samples] != [p.sample_id for p in s.record.samples]:
            raise MergeError(f"{s.where}: its ground truth does not list its samples in their order")
    samples: list[SamplePrediction] = []
    truths: list[SampleTruth] = []
    lines: list[bytes] = []
    decoded = [[base64.b64decode(line, validate=True) for line in s.info.identity_lines] for s in shards]
    for s, own in zip(shards, decoded, strict=True):
        if identity_of_lines(own) != s.record.dataset.get("identity"):
            raise MergeError(f"{s.where}: its identity lines do not give its record's dataset identity")
    for k in range(total):
        s, j = shards[k % n], k // n
        samples.append(s.record.samples[j])
        lines.append(decoded[k % n][j])
        if s.record.ground_truth is not None:
            truths.append(s.record.ground_truth.samples[j])
    if sample_ids_sha256([p.sample_id for p in samples]) != shards[0].info.sample_ids_sha256:
        raise MergeError(
            f"the shards' {total} sample ids, interleaved, are not the ids of the dataset they were cut from "
            "(sample_ids_sha256 differs): a shard evaluated other samples than its slice"
        )
    return samples, truths, lines


def _value(record: EvaluationRecord, path: tuple[str, ...]) -> Any:
    """The value at ``path`` (attributes of models, keys of dicts), as JSON data; None where absent."""
    value: Any = record
    for key in path:
        if isinstance(value, BaseModel):
            value = getattr(value, key, None)
        elif isinstance(value, dict):
            value = value.get(key)
        else:
            return None
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    return TypeAdapter(Any).dump_python(value, mode="json")


def _leaves(value: Any, prefix: str) -> dict[str, Any]:
    """``value`` flattened: dotted path -> scalar (list items by position)."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key in sorted(value):
            out.update(_leaves(value[key], f"{prefix}.{key}"))
        return out or {prefix: {}}
    if isinstance(value, list):
        out = {}
        for i, item in enumerate(value):
            out.update(_leaves(item, f"{prefix}[{i}]"))
        return out or {prefix: []}
    return {prefix: value}


def _differences(shards: list[Shard], path: tuple[str, ...]) -> list[str]:
    """``FIELD: VALUE (shard I/N on agent A), ...`` for each leaf under ``path`` whose value is not the same in
    every shard."""
    per_shard = [_leaves(_value(s.record, path), ".".join(path)) for s in shards]
    keys = sorted({k for leaves in per_shard for k in leaves})
    out = []
    for key in keys:
        values = [leaves.get(key, "<absent>") for leaves in per_shard]
        if any(v != values[0] for v in values[1:]):
            listed = ", ".join(f"{v!r} ({s.where})" for v, s in zip(values, shards, strict=True))
            out.append(f"{key}: {listed}")
    return out


# -- the merged record's parts ------------------------------------------------------------------------------
def _agent_id(shard: Shard) -> str | None:
    found = shard.agent.get("agent_id") or shard.record.hardware.get("agent_id")
    return None if found is None else str(found)


def _provenance(shard: Shard) -> ShardProvenance:
    r = shard.record
    stack_fields: dict[str, Any] = {}
    for path in STACK_FIELDS:
        if path != ("pipeline",):  # the pipeline's library versions are the distributions' again
            stack_fields.update(_leaves(_value(r, path), ".".join(path)))
    return ShardProvenance(
        shard=shard.info.label,
        run_id=r.run_id,
        agent_id=_agent_id(shard),
        hostname=shard.agent.get("hostname") or r.hardware.get("hostname"),
        stack=dict(r.software.get("stack") or shard.agent.get("stack") or {}),
        stack_fields=stack_fields,
        samples=len(r.samples),
        result_hash=r.result_hash,
        seconds=r.timings.total_seconds,
    )


def _dataset(shards: list[Shard], identity: str) -> dict[str, Any]:
    """The whole dataset's entry: shard 0's, with the whole dataset's identity, size and description and the
    counted entries summed; any other entry that differs between shards refuses the merge."""
    first = shards[0]
    out = dict(first.record.dataset)
    for key in out:
        if key in ("identity", "num_samples", "description", "sampling", *SUMMED_DATASET_FIELDS):
            continue
        differing = _differences(shards, ("dataset", key))
        if differing:
            raise MergeError(f"the shards describe their dataset differently: {'; '.join(differing)}")
    for key in SUMMED_DATASET_FIELDS:
        if key in out:
            out[key] = sum(int(s.record.dataset.get(key) or 0) for s in shards)
    out["identity"] = identity
    out["num_samples"] = first.info.of_samples
    out["description"] = first.info.description
    return out


def _counts(shards: list[Shard], samples: list[SamplePrediction], failed: int) -> dict[str, int]:
    """``total``, ``evaluated``, ``failed`` from the merged samples; every other count (``labelled``: samples with
    a truth to score against, label ties...) counts the shards' samples: their sum."""
    out = {"total": len(samples), "evaluated": len(samples) - failed, "failed": failed}
    for key in dict.fromkeys(k for s in shards for k in s.record.counts):
        if key not in out:
            out[key] = sum(s.record.counts.get(key, 0) for s in shards)
    return out


def _timings(shards: list[Shard], evaluated: int) -> Timings:
    """The shards ran side by side: load, warm-up, loop and total are the slowest shard's (the run's wall time
    after dispatch), ``inference_seconds`` and the batch latencies every shard's (runtime work); throughput is
    the evaluated samples over the slowest shard's ``throughput_seconds`` (its loop plus the charge of samples it
    read ahead while its model loaded; the loop for a shard recorded before that charge)."""
    t = [s.record.timings for s in shards]
    loop = max((x.loop_seconds or 0.0) for x in t)
    rate_seconds = max((x.throughput_seconds if x.throughput_seconds is not None else x.loop_seconds or 0.0) for x in t)
    ahead = sum(x.read_ahead_samples for x in t)
    return Timings(
        total_seconds=max(x.total_seconds for x in t),
        inference_seconds=sum(x.inference_seconds for x in t),
        batch_latencies_seconds=[b for x in t for b in x.batch_latencies_seconds],
        load_seconds=max(x.load_seconds for x in t),
        warmup_seconds=max(x.warmup_seconds for x in t),
        loop_seconds=loop if all(x.loop_seconds is not None for x in t) else None,
        throughput_samples_per_second=evaluated / rate_seconds if rate_seconds else 0.0,
        read_ahead_samples=ahead,
        read_ahead_cpu_seconds=sum(x.read_ahead_cpu_seconds for x in t),
        throughput_seconds=rate_seconds if all(x.throughput_seconds is not None for x in t) else None,
    )


_CLAIMS: TypeAdapter[list[Any]] | None = None


def _claims_of(manifest_text: str, file: str) -> list[Any]:
    """The manifest's claims (:class:`~repliscope.manifest.schema.ClaimSpec`), read from the record's copy."""
    from repliscope.manifest.limits import load_yaml_limited
    from repliscope.manifest.schema import ClaimSpec

    global _CLAIMS
    if _CLAIMS is None:
        _CLAIMS = TypeAdapter(list[ClaimSpec])
    data, _lines = load_yaml_limited(manifest_text, file)
    return _CLAIMS.validate_python((data or {}).get("claims") or [])


def _score(merged: EvaluationRecord, shard: Shard, failed: int) -> None:
    """Metrics, per-class rows, how the samples were chosen and claim verdicts of ``merged``, by its task, from its
    samples (and ground truth), as one run over the whole dataset (``shard``: the first)."""
    from repliscope.evaluation.claims import sample_selection
    from repliscope.evaluation.ground_truth import dataset_of
    from repliscope.evaluation.record_builder import judge_claims
    from repliscope.manifest.schema import DatasetRef
    from repliscope.tasks.base import get_task

    task = get_task(merged.task)
    if merged.ground_truth is not None:
        scored = dataset_of(merged)
    else:  # classification reads the samples' labels; segmentation only the class names
        names = {int(row["class_id"]): str(row["name"]) for row in shard.record.per_class or () if "name" in row}
        scored = Dataset(
            name=str(merged.dataset.get("name", "")),
            samples=(),
            license=str(merged.dataset.get("license", "")),
            label_rule=str(merged.dataset.get("label_rule", "")),
            categories=names or None,
        )
    metrics, per_class = task.evaluate(merged.samples, scored)
    merged.metrics = metrics
    merged.per_class = per_class
    declared = merged.dataset.get("evaluated_as")
    evaluated_as = DatasetRef.model_validate(declared) if declared else None
    sampling = sample_selection(
        len(merged.samples), evaluated_as, limit=shard.info.limit, shard=None, declared=shard.info.sampling
    )
    merged.dataset["sampling"] = sampling.as_record()
    claims = _claims_of(merged.manifest.text, merged.manifest.path)
    name = str(merged.dataset.get("name", ""))
    merged.claims = judge_claims(claims, metrics, per_class, task, evaluated_as, name, failed, sampling)
