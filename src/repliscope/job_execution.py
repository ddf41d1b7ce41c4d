"""The job layer shared by the CLI, the service and the agents: what a job is (:class:`JobSpec`), what it produces
(:class:`JobOutcome`) and :func:`execute_job`, which runs one with the CLI's core functions and stores nothing.

A job runs its kind's core call (:data:`JOB_KINDS`: ``evaluation.run.prepare/evaluate`` for ``evaluate``,
``pitfalls.sweep.run_sweep`` for ``pitfalls``, ``bench.matrix.run_matrix`` for ``bench``,
``diff.task_level.diff_runtimes`` for ``diff``). Its outcome is JSON-safe: it
travels back from an agent (possibly running another venv with another pydantic) as JSON text, and the caller
stores it with ``RunStore.save_outcome(outcome, idempotency_key)`` (exactly once per key)."""

from __future__ import annotations

import dataclasses
import json
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from repliscope.errors import RepliscopeError
from repliscope.job_kinds import JOB_KINDS, JobKind, kind_names

if TYPE_CHECKING:
    from repliscope.datasets.base import Dataset
    from repliscope.evaluation.merge import Shard
    from repliscope.evaluation.run_config import RunSettings
    from repliscope.manifest.loader import LoadedManifest
    from repliscope.store.repository import StoredOutcome


class JobCancelled(Exception):
    """Raised inside a running job's progress callback once a cancel was requested."""


class RunOptions(BaseModel):
    """Every option of a job, typed, whoever submits it: the service's
    :class:`~repliscope.service.routers.jobs.JobOptions` (the subset an API client may set, with bounds) converts
    into it field by field; the CLI builds it from its options; a stack matrix from its own. What is not given is
    chosen as the CLI chooses it (and recorded). :meth:`run_settings` and :meth:`dataset` are the one conversion
    into what the core takes."""

    model_config = ConfigDict(extra="forbid")

    # the API's options (service.routers.jobs.JobOptions)
    limit: int | None = None
    """Only the first N samples of the dataset (sorted order)."""
    threads: int | None = None
    batch_size: int | None = None
    download: bool = False
    """Allow downloading the manifest's https:// sources (sha256-checked) into the cache."""
    variants: list[str] | None = None
    """pitfalls: only these pitfalls (default: every registered one), each NAME or NAME[PARAMETER=VALUE, ...]
    (:mod:`repliscope.pitfalls.degrees`)."""
    visual: int = 3
    """pitfalls: images in the visual-testing panel."""
    scenario: str = "single-stream"
    """bench: the LoadGen scenario."""
    min_duration_s: float = 1.0
    min_queries: int = 20
    runtime_b: str | None = None
    """diff: the second runtime (``runtime`` is the first)."""
    requires: list[str] | None = None
    """Placement: PEP 508 requirements of the executing agent."""
    hardware: list[str] | None = None
    """Placement: hardware selectors (``KEY=VALUE``, ...)."""
    stack: str | None = None
    """Placement: only an agent running in this provisioned stack."""
    idempotency_key: str | None = None
    """Store the job's results at most once under this key."""
    # options only a local caller sets (the CLI, a stack matrix): paths and choices of this machine
    label_rule: str | None = None
    evaluated_as: str | None = None
    """``NAME/SPLIT`` the data is declared to be (``--as``)."""
    schedule: str | None = None
    prep_workers: int | None = None
    fail_fast: bool = False
    allow_outside_paths: bool = False
    manifest_path: str | None = None
    """A path the executing process sees whose text is the job's manifest (its relative paths then resolve)."""
    keep_outputs: bool = False
    """Return every sample's raw output with the outcome (``JobOutcome.outputs``)."""
    shard: str | None = None
    """``I/N``: only samples I::N (after the sorted order and ``limit``)."""
    shards: int | None = None
    """evaluate on agents: run as N shard jobs at once and return ONE record merged from them
    (:func:`repliscope.agents.submit.submit_merged`)."""
    allow_mixed_stacks: bool = False
    """With ``shards``: merge shards whose stacks differ (the record lists each shard's stack)."""
    whole_sampling: str | None = None
    """A shard of a sharded run: the sampling declared for the whole run (``--as NAME/SPLIT@SAMPLING``), which the
    merged record's verdicts use (the shard alone is a selection)."""
    samples_per_query: int | None = None
    """bench: samples per query (multi-stream, offline)."""
    registered_name: str | None = None
    """The service's registry name of the dataset: the name it is recorded under (its folder stays its
    ``origin``)."""

    def __getitem__(self, name: str) -> Any:
        """``options["limit"]``: an option by name, as the dict of options this model replaced was read."""
        if name not in type(self).model_fields:
            raise KeyError(name)
        return getattr(self, name)

    def run_settings(
        self,
        runtime: str | None,
        cache_dir: Path | None = None,
        *,
        name: Callable[[str], str] | None = None,
        manifest: LoadedManifest | None = None,
        source: Literal["cli", "job"] = "job",
    ) -> RunSettings:
        """The frozen :class:`~repliscope.evaluation.run.RunSettings` of these options on ``runtime`` (None: the
        ``manifest``'s native runtime), each value's origin recorded
        (:func:`~repliscope.evaluation.run_config.resolve_run_config`; ``source``: ``job``, or ``cli`` for the
        command line's flags). ``name(field)``: how an error calls an option (default ``option FIELD``; the CLI
        passes its flags)."""
        from repliscope.evaluation.run_config import option_name, resolve_run_config

        return resolve_run_config(
            self, runtime=runtime, manifest=manifest, source=source, cache_dir=cache_dir, name=name or option_name
        )

    def dataset(self, spec: str, labels_csv: Path | None = None) -> Dataset:
        """The dataset ``spec`` (a registered name, ``NAME:PATH`` or a folder) with these options' label rule,
        ``limit``, ``registered_name`` and ``shard``."""
        from repliscope.datasets import resolve_dataset

        data = resolve_dataset(spec, self.label_rule, labels_csv=labels_csv, limit=self.limit)
        if self.registered_name:
            data = dataclasses.replace(data, name=self.registered_name)
        return data if self.shard is None else _shard(data, self.shard)


@dataclass
class JobSpec:
    """What a job runs: ``manifest_text`` (the stored manifest), ``dataset_spec`` (the registry's spec for the
    dataset name; a client never passes a path), its ``options`` (:class:`RunOptions`, or their JSON form, a dict,
    validated where the job runs: :attr:`run_options`). ``idempotency_key``: the key its results are stored under
    exactly once (None: ``job_id``)."""

    job_id: str
    kind: str
    manifest_ref: str
    manifest_text: str
    runtime: str
    dataset_name: str
    dataset_spec: str
    options: RunOptions | dict[str, Any] = field(default_factory=RunOptions)
    idempotency_key: str | None = None

    @property
    def run_options(self) -> RunOptions:
        """The options, typed (a dict is validated now: a wrong one fails where the job runs)."""
        return self.options if isinstance(self.options, RunOptions) else RunOptions.model_validate(self.options)

    def with_options(self, **update: Any) -> RunOptions | dict[str, Any]:
        """The options with ``update`` applied, in the form they have (typed, or a dict)."""
        if isinstance(self.options, RunOptions):
            return self.options.model_copy(update=update)
        return {**self.options, **update}

    @property
    def key(self) -> str:
        """The idempotency key its results are stored under (``job_id`` when none was given)."""
        return self.idempotency_key or self.job_id

    def to_json(self) -> str:
        """JSON text (options as given: what is at its default is left out)."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        options = self.options
        if isinstance(options, RunOptions):
            options = options.model_dump(mode="json", exclude_defaults=True)
        return json.dumps({**fields, "options": options})

    @classmethod
    def from_json(cls, text: str) -> JobSpec:
        return cls(**json.loads(text))


class JobOutcome(BaseModel):
    """What a job produced, as JSON dumps: ``records`` (``EvaluationRecord.model_dump(mode="json")`` each),
    ``sweeps`` (SweepResult dumps), ``benchmarks`` (BenchmarkRecord dumps), ``summary`` (a diff's result as JSON
    text), ``agent`` (the executing agent's capabilities dump; {} in-process), ``outputs`` (sample id -> base64
    ``.npy`` of its raw float32 output; only with ``options.keep_outputs``), ``seconds`` (wall seconds
    :func:`execute_job` took where it ran: the submitter's wall time minus this is the dispatch overhead)."""

    records: list[dict[str, Any]] = Field(default_factory=list)
    sweeps: list[dict[str, Any]] = Field(default_factory=list)
    benchmarks: list[dict[str, Any]] = Field(default_factory=list)
    summary: str | None = None
    agent: dict[str, Any] = Field(default_factory=dict)
    outputs: dict[str, str] = Field(default_factory=dict)
    seconds: float = 0.0
    shard: dict[str, Any] | None = None
    """A shard job's (option ``shard``) :class:`~repliscope.evaluation.merge.ShardInfo` dump: what
    :func:`merge_outcomes` needs of the whole dataset and of the bytes the shard read; None for other jobs."""


class OutcomeStore(Protocol):
    """Where :func:`run_and_store` keeps a job's results (:class:`~repliscope.store.repository.RunStore`)."""

    def get_job_result(self, idempotency_key: str) -> StoredOutcome | None: ...

    def save_outcome(self, outcome: Any, idempotency_key: str, kind: str = "evaluate") -> StoredOutcome: ...


@dataclass(frozen=True)
class StoredJob:
    """What :func:`run_and_store` did: ``stored`` (the ids; ``stored.duplicate`` when the key was stored before)
    and the ``outcome`` it ran (None when the key was stored already: nothing ran)."""

    stored: StoredOutcome
    outcome: JobOutcome | None

    @property
    def ran(self) -> bool:
        return self.outcome is not None


def run_and_store(job: JobSpec, store: OutcomeStore, run: Callable[[JobSpec], JobOutcome]) -> StoredJob:
    """Check ``job``'s idempotency key, run it, save its outcome: the one path of the CLI, the service's executors
    and the agents' submitters. A key stored already runs nothing (the earlier ids are returned); otherwise
    ``run(job)`` (in this process, :func:`execute_job`, or on an agent, ``agents.submit.submit_job``) and
    ``store.save_outcome`` exactly once per key (a key another process stored meanwhile stores nothing new:
    ``stored.duplicate``). What ``run`` raises (a failure, a cancel) propagates and nothing is stored."""
    earlier = store.get_job_result(job.key)
    if earlier is not None:
        return StoredJob(earlier, None)
    outcome = run(job)
    return StoredJob(store.save_outcome(outcome, job.key, kind=job.kind), outcome)


# -- a job's manifest and dataset, where it runs -------------------------------------------------------------
def _loaded(job: JobSpec, folder: Path) -> LoadedManifest:
    """The job's manifest: ``options.manifest_path`` (a path the executing process sees, e.g. the CLI's file on
    this machine, so its relative source/architecture paths resolve; its text must be ``manifest_text``), else
    ``manifest_text`` written into ``folder``."""
    from repliscope.manifest.loader import load_manifest

    where = job.run_options.manifest_path
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


def _data(job: JobSpec) -> Dataset:
    """The job's dataset (:meth:`RunOptions.dataset`)."""
    return job.run_options.dataset(job.dataset_spec)


# -- the job kinds: a registry, each kind owning its options model and its core call ----------------------------
@dataclass(frozen=True)
class JobContext:
    """What a kind's core call gets: the job, its manifest (loaded where the job runs), its dataset, the cache
    folder, the progress callback (it may raise :class:`JobCancelled`) and the log."""

    job: JobSpec
    loaded: LoadedManifest
    data: Dataset
    cache_dir: Path | None
    on_progress: Callable[[int], None]
    log: Callable[[str], None]

    def settings(self) -> RunSettings:
        """The run's frozen :class:`~repliscope.evaluation.run.RunSettings`, resolved once from the job's options
        (:meth:`RunOptions.run_settings`: each value's origin ``job`` or ``default``)."""
        return self.job.run_options.run_settings(self.job.runtime, self.cache_dir, manifest=self.loaded)


class KindOptions(BaseModel):
    """The options one job kind reads besides the run's own (threads, batch size, dataset...): a subset of
    :class:`RunOptions`' fields, read from the job's options by :meth:`JobKind.options_of`."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class EvaluateOptions(KindOptions):
    keep_outputs: bool = False
    """Return every sample's raw output with the outcome (``JobOutcome.outputs``)."""


class PitfallsOptions(KindOptions):
    variants: list[str] | None = None
    """Only these pitfalls (default: every registered one), each NAME or NAME[PARAMETER=VALUE, ...] at a degree
    (:mod:`repliscope.pitfalls.degrees`; each value checked on the manifest's pipeline when the job is submitted,
    :func:`_check_pitfalls`, and again when the sweep starts)."""
    visual: int = 3
    """Images in the visual-testing panel."""


class BenchJobOptions(KindOptions):
    scenario: str = "single-stream"
    """The LoadGen scenario."""
    min_duration_s: float = 1.0
    min_queries: int = 20
    samples_per_query: int | None = None
    """Samples per query (multi-stream, offline); default 8 for multi-stream, else 1."""


class DiffOptions(KindOptions):
    runtime_b: str | None = None
    """The second runtime (the job's ``runtime`` is the first); required."""


def _register(kind: JobKind[Any]) -> None:
    JOB_KINDS.add(kind.name, kind)


def _evaluate(ctx: JobContext, options: EvaluateOptions) -> JobOutcome:
    """``evaluation.run.prepare/evaluate``: one evaluation record (and the raw outputs when asked)."""
    from repliscope.evaluation.merge import ShardData, shard_info
    from repliscope.evaluation.run import evaluate, prepare

    settings = ctx.settings()
    prepared = prepare(ctx.loaded, settings)
    raw: dict[str, Any] | None = {} if options.keep_outputs else None
    record = evaluate(prepared, ctx.data, on_progress=ctx.on_progress, outputs=raw)
    outcome = JobOutcome(records=[record.model_dump(mode="json")])
    if raw is not None:
        from repliscope.stacks.outputs import encode_outputs

        outcome.outputs = encode_outputs(raw)
    if isinstance(ctx.data, ShardData):  # a shard of a sharded evaluation: what the merge needs
        declared = ctx.job.run_options.whole_sampling or settings.sampling
        outcome.shard = shard_info(ctx.data, settings.limit, declared).model_dump(mode="json")
    return outcome


def _pitfalls(ctx: JobContext, options: PitfallsOptions) -> JobOutcome:
    """``pitfalls.sweep.run_sweep``: one record per variant and the sweep."""
    from repliscope.evaluation.run import prepare
    from repliscope.pitfalls.sweep import run_sweep

    out = run_sweep(
        prepare(ctx.loaded, ctx.settings()),
        ctx.data,
        options.variants or None,
        visual_samples=options.visual,
        on_progress=ctx.on_progress,
    )
    return JobOutcome(
        records=[r.model_dump(mode="json") for r in out.records], sweeps=[out.result.model_dump(mode="json")]
    )


def _check_pitfalls(job: JobSpec, loaded: LoadedManifest, options: PitfallsOptions) -> None:
    """Before the sweep job is queued: each of ``variants`` a registered variant at a degree it has on the
    manifest's pre-processing (:func:`~repliscope.pitfalls.sweep.check_variants`, what the sweep checks when it
    starts)."""
    if not options.variants:
        return
    from repliscope.job_kinds import JobOptionError
    from repliscope.pitfalls.degrees import VariantSpecError
    from repliscope.pitfalls.sweep import check_variants

    run = job.run_options
    try:
        check_variants(loaded, options.variants, job.runtime, run.batch_size, run.threads)
    except VariantSpecError as exc:
        raise JobOptionError("variants", str(exc)) from None


def _bench(ctx: JobContext, options: BenchJobOptions) -> JobOutcome:
    """``bench.matrix.run_matrix`` on the job's runtime and thread count: one benchmark record."""
    from repliscope.bench.matrix import run_matrix
    from repliscope.bench.run import BenchOptions
    from repliscope.bench.scenarios import ScenarioSettings

    run = ctx.job.run_options
    scenario = options.scenario
    spq = options.samples_per_query
    per_query = spq if spq is not None else 8 if scenario == "multi-stream" else 1
    settings = ScenarioSettings(
        scenario=scenario,
        min_duration_s=options.min_duration_s,
        min_queries=options.min_queries,
        samples_per_query=per_query if scenario in ("multi-stream", "offline") else 1,
        batch_size=(run.batch_size or 1) if scenario == "offline" else 1,
    )
    result = run_matrix(
        ctx.loaded,
        ctx.data,
        [ctx.job.runtime],
        [run.threads or 1],
        BenchOptions(scenario=settings),
        settings=ctx.settings(),
        on_config=lambda rt, n: ctx.log(f"bench: {rt} with {n} thread(s), {scenario}"),
    )
    ctx.on_progress(len(ctx.data))  # the whole library was pre-processed and queried: the job page shows n/n
    return JobOutcome(benchmarks=[b.model_dump(mode="json") for b in result.records])


def _diff(ctx: JobContext, options: DiffOptions) -> JobOutcome:
    """``diff.task_level.diff_runtimes`` of the job's runtime and ``runtime_b``: the diff as the summary."""
    from repliscope.diff.task_level import diff_runtimes

    if options.runtime_b is None:
        raise RepliscopeError("a diff job needs options.runtime_b (the second runtime)")
    diff = diff_runtimes(
        ctx.loaded.path,
        ctx.job.runtime,
        options.runtime_b,
        ctx.data,
        cache_dir=ctx.cache_dir,
        threads=ctx.job.run_options.threads or 2,
    )
    ctx.on_progress(len(ctx.data))
    return JobOutcome(summary=json.dumps(diff.model_dump(mode="json")))


_register(JobKind("evaluate", "evaluate the manifest: one evaluation record", EvaluateOptions, _evaluate, 0))
_register(
    JobKind(
        "pitfalls",
        "the pitfall sweep: a record per variant and the sweep",
        PitfallsOptions,
        _pitfalls,
        1,
        _check_pitfalls,
    )
)
_register(JobKind("bench", "a benchmark of one scenario: one benchmark record", BenchJobOptions, _bench, 2))
_register(JobKind("diff", "two runtimes compared sample by sample: the diff", DiffOptions, _diff, 3))

KINDS: tuple[str, ...] = kind_names()
"""The job kinds' names in their order (:data:`JOB_KINDS`)."""


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


def _shard(data: Dataset, text: str) -> Dataset:
    """Samples ``I::N`` of ``data`` (after its sorted order and limit; :func:`repliscope.evaluation.merge.cut_shard`);
    the description says which shard."""
    from repliscope.evaluation.merge import cut_shard

    return cut_shard(data, *parse_shard(text))


def outcome_shard(outcome: JobOutcome) -> Shard:
    """One shard job's outcome validated for the merge (its record, its
    :class:`~repliscope.evaluation.merge.ShardInfo`, its agent): a MergeError when it is not a shard of an
    evaluation. :func:`~repliscope.agents.submit.submit_merged` calls it as each shard's outcome arrives, while the
    other shards still run."""
    from repliscope.evaluation.merge import MergeError, Shard, ShardInfo
    from repliscope.evaluation.record import EvaluationRecord

    if outcome.shard is None or len(outcome.records) != 1:
        raise MergeError(
            f"a job outcome with {len(outcome.records)} record(s) and no shard information is not a shard of "
            "an evaluation (option shard, kind evaluate)"
        )
    record = EvaluationRecord.model_validate(outcome.records[0])
    return Shard(record, ShardInfo.model_validate(outcome.shard), outcome.agent)


def merge_validated(shards: Sequence[Shard], seconds: float, allow_mixed_stacks: bool = False) -> JobOutcome:
    """The outcome of a sharded evaluation from its shards validated already (:func:`outcome_shard`): ONE record
    (:func:`repliscope.evaluation.merge.merge_shards`); ``seconds``: the slowest shard's."""
    from repliscope.evaluation.merge import merge_shards

    merged = merge_shards(shards, allow_mixed_stacks=allow_mixed_stacks)
    return JobOutcome(records=[merged.model_dump(mode="json")], seconds=seconds)


def merge_outcomes(outcomes: list[JobOutcome], allow_mixed_stacks: bool = False) -> JobOutcome:
    """The outcome of a sharded evaluation: ONE record merged from every shard job's outcome
    (:func:`repliscope.evaluation.merge.merge_shards`; a MergeError when the shards are not exactly the dataset once,
    or ran different things or stacks). Its ``seconds`` are the slowest shard's, ``agent`` is {} (each shard's agent
    is in the record's ``shards``)."""
    return merge_validated(
        [outcome_shard(o) for o in outcomes],
        max((o.seconds for o in outcomes), default=0.0),
        allow_mixed_stacks,
    )


def execute_job(
    job: JobSpec,
    cache_dir: Path | None,
    on_progress: Callable[[int], None],
    log: Callable[[str], None],
    on_total: Callable[[int], None] | None = None,
) -> JobOutcome:
    """Run ``job`` with its kind's core call (:data:`JOB_KINDS`) and return what it produced; stores nothing.

    ``on_progress(n)``: n more samples done (it may raise :class:`JobCancelled`); ``log(line)``: a log line
    (manifest warnings); ``on_total(n)``: the number of samples, once the dataset is resolved. The outcome's
    ``seconds`` is this call's wall time; ``agent`` is left {} (an agent fills it)."""
    import time

    if job.kind not in JOB_KINDS:
        raise RepliscopeError(f"unknown job kind '{job.kind}' (allowed: {', '.join(KINDS)})")
    if job.run_options.shards is not None:
        raise RepliscopeError(
            f"option shards ({job.run_options.shards}) runs the job as shard jobs on agents: submit it to a cluster "
            "of agents (--scheduler), not in this process"
        )
    kind = JOB_KINDS.get(job.kind)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="repliscope-job-") as tmp:
        loaded = _loaded(job, Path(tmp))
        for warning in loaded.warnings:
            log(f"warning: {warning}")
        data = _data(job)
        if on_total is not None:
            on_total(len(data))
        outcome: JobOutcome = kind.run(JobContext(job, loaded, data, cache_dir, on_progress, log))
    outcome.seconds = round(time.perf_counter() - start, 6)
    return outcome
