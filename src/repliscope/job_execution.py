"""The job layer shared by the CLI, the service and the agents: what a job is (:class:`JobSpec`), what it produces
(:class:`JobOutcome`) and :func:`execute_job`, which runs one with the CLI's core functions and stores nothing.

A job runs ``evaluation.run.prepare/evaluate`` (kind ``evaluate``), ``pitfalls.sweep.run_sweep`` (``pitfalls``),
``bench.matrix.run_matrix`` (``bench``) or ``diff.task_level.diff_runtimes`` (``diff``). Its outcome is JSON-safe: it
travels back from an agent (possibly running another venv with another pydantic) as JSON text, and the caller
stores it with ``RunStore.save_outcome(outcome, idempotency_key)`` (exactly once per key)."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from repliscope.errors import RepliscopeError

KINDS = ("evaluate", "pitfalls", "bench", "diff")


class JobCancelled(Exception):
    """Raised inside a running job's progress callback once a cancel was requested."""


@dataclass
class JobSpec:
    """What a job runs: ``manifest_text`` (the stored manifest), ``dataset_spec`` (the registry's spec for the
    dataset name; a client never passes a path), validated ``options``. ``idempotency_key``: the key its results
    are stored under exactly once (None: ``job_id``)."""

    job_id: str
    kind: str
    manifest_ref: str
    manifest_text: str
    runtime: str
    dataset_name: str
    dataset_spec: str
    options: dict[str, Any] = field(default_factory=dict)
    idempotency_key: str | None = None

    @property
    def key(self) -> str:
        """The idempotency key its results are stored under (``job_id`` when none was given)."""
        return self.idempotency_key or self.job_id

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> JobSpec:
        return cls(**json.loads(text))


class JobOutcome(BaseModel):
    """What a job produced, as JSON dumps: ``records`` (``EvaluationRecord.model_dump(mode="json")`` each),
    ``sweeps`` (SweepResult dumps), ``benchmarks`` (BenchmarkRecord dumps), ``summary`` (a diff's result as JSON
    text), ``agent`` (the executing agent's capabilities dump; {} in-process), ``outputs`` (sample id -> base64
    ``.npy`` of its raw float32 output; only with ``options["keep_outputs"]``), ``seconds`` (wall seconds
    :func:`execute_job` took where it ran: the submitter's wall time minus this is the dispatch overhead)."""

    records: list[dict[str, Any]] = Field(default_factory=list)
    sweeps: list[dict[str, Any]] = Field(default_factory=list)
    benchmarks: list[dict[str, Any]] = Field(default_factory=list)
    summary: str | None = None
    agent: dict[str, Any] = Field(default_factory=dict)
    outputs: dict[str, str] = Field(default_factory=dict)
    seconds: float = 0.0


# -- the job kinds: the CLI's core calls ---------------------------------------------------------------------
def _loaded(job: JobSpec, folder: Path) -> Any:
    """The job's manifest: ``options["manifest_path"]`` (a path the executing process sees, e.g. the CLI's file on
    this machine, so its relative source/architecture paths resolve; its text must be ``manifest_text``), else
    ``manifest_text`` written into ``folder``."""
    from repliscope.manifest.loader import load_manifest

    where = job.options.get("manifest_path")
    if where is not None:
        try:
            text = Path(where).read_text(encoding="utf-8")
        except OSError as exc:
            raise RepliscopeError(
                f"option manifest_path {where!r} cannot be read where the job runs: {exc.strerror or exc}"
            ) from exc
        if text != job.manifest_text:
            raise RepliscopeError(
                f"option manifest_path {where!r} differs, where the job runs, from the manifest submitted with the job"
            )
        return load_manifest(where)
    name = job.manifest_ref.replace("@", "-").replace("/", "_").replace("\\", "_")
    path = folder / f"{name}.yaml"
    path.write_text(job.manifest_text, encoding="utf-8")
    return load_manifest(path)


def _settings(job: JobSpec, cache_dir: Path | None, runtime: str | None = None) -> Any:
    from repliscope.evaluation.run import RunSettings

    o = job.options
    return RunSettings(
        runtime=runtime or job.runtime,
        threads=o.get("threads"),
        batch_size=o.get("batch_size"),
        cache_dir=cache_dir,
        allow_download=bool(o.get("download", False)),
        prep_workers=o.get("prep_workers"),
        schedule=o.get("schedule"),
        fail_fast=bool(o.get("fail_fast", False)),
        allow_outside_paths=bool(o.get("allow_outside_paths", False)),
        evaluated_as=_evaluated_as(o.get("evaluated_as")),
    )


def _evaluated_as(text: str | None) -> Any:
    """Option ``evaluated_as`` ``NAME/SPLIT`` -> DatasetRef (None when not given)."""
    from repliscope.manifest.schema import DatasetRef

    if text is None:
        return None
    name, sep, split = str(text).partition("/")
    if not sep or not name or not split:
        raise RepliscopeError(f"option evaluated_as expects NAME/SPLIT, e.g. imagenet-1k/val, got {text!r}")
    return DatasetRef(name=name, split=split)


def _data(job: JobSpec) -> Any:
    """The job's dataset; option ``registered_name`` (the service's registry name) is the name it is recorded
    under (its folder stays its ``origin``)."""
    import dataclasses

    from repliscope.datasets import resolve_dataset

    data = resolve_dataset(job.dataset_spec, job.options.get("label_rule"), limit=job.options.get("limit"))
    registered = job.options.get("registered_name")
    if registered:
        data = dataclasses.replace(data, name=str(registered))
    shard = job.options.get("shard")
    return data if shard is None else _shard(data, shard)


def _evaluate(
    job: JobSpec, loaded: Any, data: Any, cache_dir: Path | None, on_progress: Callable[[int], None]
) -> JobOutcome:
    from repliscope.evaluation.run import evaluate, prepare

    prepared = prepare(loaded, _settings(job, cache_dir))
    if not job.options.get("keep_outputs"):
        record = evaluate(prepared, data, on_progress=on_progress)
        return JobOutcome(records=[record.model_dump(mode="json")])
    from repliscope.stacks.outputs import encode_outputs

    raw: dict[str, Any] = {}
    record = evaluate(prepared, data, on_progress=on_progress, outputs=raw)
    return JobOutcome(records=[record.model_dump(mode="json")], outputs=encode_outputs(raw))


def parse_shard(text: str) -> tuple[int, int]:
    """``"I/N"`` (0 <= I < N) -> (I, N); anything else is a RepliscopeError naming the option and the form."""
    index, sep, count = str(text).partition("/")
    try:
        i, n = int(index), int(count)
    except ValueError:
        i, n = -1, 0
    if not sep or n < 1 or not 0 <= i < n:
        raise RepliscopeError(f"option shard must be 'I/N' with integers 0 <= I < N (e.g. 0/2), got {text!r}")
    return i, n


def _shard(data: Any, text: str) -> Any:
    """Samples ``I::N`` of ``data`` (after its sorted order and limit); the description says which shard."""
    import dataclasses

    i, n = parse_shard(text)
    return dataclasses.replace(
        data,
        samples=list(data.samples)[i::n],
        _identity=None,
        description=f"{data.description} (shard {i}/{n})".strip(),
    )


def execute_job(
    job: JobSpec,
    cache_dir: Path | None,
    on_progress: Callable[[int], None],
    log: Callable[[str], None],
    on_total: Callable[[int], None] | None = None,
) -> JobOutcome:
    """Run ``job`` with the CLI's core functions and return what it produced; stores nothing.

    ``on_progress(n)``: n more samples done (it may raise :class:`JobCancelled`); ``log(line)``: a log line
    (manifest warnings); ``on_total(n)``: the number of samples, once the dataset is resolved. The outcome's
    ``seconds`` is this call's wall time; ``agent`` is left {} (an agent fills it)."""
    import time

    if job.kind not in KINDS:
        raise RepliscopeError(f"unknown job kind '{job.kind}' (allowed: {', '.join(KINDS)})")
    start = time.perf_counter()
    outcome = _execute(job, cache_dir, on_progress, log, on_total)
    outcome.seconds = round(time.perf_counter() - start, 6)
    return outcome


def _execute(
    job: JobSpec,
    cache_dir: Path | None,
    on_progress: Callable[[int], None],
    log: Callable[[str], None],
    on_total: Callable[[int], None] | None,
) -> JobOutcome:
    with tempfile.TemporaryDirectory(prefix="repliscope-job-") as tmp:
        loaded = _loaded(job, Path(tmp))
        for warning in loaded.warnings:
            log(f"warning: {warning}")
        data = _data(job)
        if on_total is not None:
            on_total(len(data))
        if job.kind == "evaluate":
            return _evaluate(job, loaded, data, cache_dir, on_progress)
        if job.kind == "pitfalls":
            from repliscope.evaluation.run import prepare
            from repliscope.pitfalls.sweep import run_sweep

            out = run_sweep(
                prepare(loaded, _settings(job, cache_dir)),
                data,
                job.options.get("variants") or None,
                visual_samples=int(job.options.get("visual", 3)),
                on_progress=on_progress,
            )
            return JobOutcome(
                records=[r.model_dump(mode="json") for r in out.records], sweeps=[out.result.model_dump(mode="json")]
            )
        if job.kind == "bench":
            from repliscope.bench.matrix import run_matrix
            from repliscope.bench.run import BenchOptions
            from repliscope.bench.scenarios import ScenarioSettings

            o = job.options
            scenario = o.get("scenario", "single-stream")
            spq = int(o.get("samples_per_query", 8 if scenario == "multi-stream" else 1))
            settings = ScenarioSettings(
                scenario=scenario,
                min_duration_s=float(o.get("min_duration_s", 1.0)),
                min_queries=int(o.get("min_queries", 20)),
                samples_per_query=spq if scenario in ("multi-stream", "offline") else 1,
                batch_size=int(o.get("batch_size") or 1) if scenario == "offline" else 1,
            )
            result = run_matrix(
                loaded,
                data,
                [job.runtime],
                [int(o.get("threads") or 1)],
                BenchOptions(scenario=settings),
                settings=_settings(job, cache_dir),
                on_config=lambda rt, n: log(f"bench: {rt} with {n} thread(s), {scenario}"),
            )
            on_progress(len(data))  # the whole library was pre-processed and queried: the job page shows n/n
            return JobOutcome(benchmarks=[b.model_dump(mode="json") for b in result.records])
        # diff
        from repliscope.diff.task_level import diff_runtimes

        other = job.options["runtime_b"]
        diff = diff_runtimes(
            loaded.path, job.runtime, other, data, cache_dir=cache_dir, threads=int(job.options.get("threads") or 2)
        )
        on_progress(len(data))
        return JobOutcome(summary=json.dumps(diff.model_dump(mode="json")))
