"""A run's options, resolved once: :func:`resolve_run_config` (the shape of timm's ``resolve_data_config``: the
caller's options over the manifest over the defaults) returns the frozen :class:`RunSettings` that records where
each value came from (:data:`ORIGINS`). The CLI's ``evaluate`` and ``pitfalls``, the service's jobs and the agents
(which run jobs) all resolve their options here; what the measured calibration chooses later (threads, batch size,
schedule left open) is the plan's (:mod:`repliscope.evaluation.calibration`), recorded with the run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, get_args

from repliscope.errors import RepliscopeError
from repliscope.evaluation.engine import SCHEDULES
from repliscope.manifest.schema import DatasetRef

if TYPE_CHECKING:
    from repliscope.manifest.loader import LoadedManifest

Origin = Literal["cli", "job", "manifest", "default", "caller"]
"""Where a value came from: a command-line flag, a job spec's options (the service, an agent), the manifest (the
runtime native to its framework; a model that takes one image at a time fixes the batch at 1), the default (not
given: the documented default or the calibration's choice), or a caller in code (a value set directly)."""
ORIGINS: tuple[Origin, ...] = get_args(Origin)


@dataclass(frozen=True)
class RunSettings:
    """Options of one evaluation, all recorded, each with its origin (``origins``: field -> :data:`Origin`).

    ``threads`` (each runner's intra-op threads), ``batch_size`` and ``schedule`` left None are chosen by the
    measured calibration (:mod:`repliscope.evaluation.calibration`). With both ``threads`` and ``batch_size``
    given and no ``schedule``, the run is ``pipelined`` as given, with no calibration. ``prep_workers`` None
    means: ``threads`` (pipelined as given) or the plan's choice.

    Built directly (or changed with :func:`dataclasses.replace`), a value without a recorded origin, or whose
    recorded ``default`` origin no longer holds, has the origin ``caller`` (``default`` when it is the default)."""

    runtime: str
    threads: int | None = None
    batch_size: int | None = None
    prep_workers: int | None = None
    schedule: str | None = None
    fail_fast: bool = False
    evaluated_as: DatasetRef | None = None
    sampling: str | None = None
    """How the samples were chosen from ``evaluated_as``, as declared (``--as NAME/SPLIT@whole|random|selection``;
    None: not declared): :func:`repliscope.evaluation.claims.sample_selection`."""
    limit: int | None = None
    shard: str | None = None
    cache_dir: Path | None = None
    allow_download: bool = False
    allow_outside_paths: bool = False
    origins: Mapping[str, Origin] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        origins: dict[str, Origin] = {}
        for f in dataclasses.fields(self):
            if f.name == "origins":
                continue
            given = self.origins.get(f.name)
            if given is not None and given not in ORIGINS:
                raise RepliscopeError(f"origin {given!r} of {f.name} is not an origin (allowed: {', '.join(ORIGINS)})")
            is_default = f.default is not dataclasses.MISSING and getattr(self, f.name) == f.default
            if given is None or (given == "default" and not is_default):
                given = "default" if is_default else "caller"
            origins[f.name] = given
        object.__setattr__(self, "origins", MappingProxyType(origins))

    def origin(self, name: str) -> Origin:
        """Where the value of the option ``name`` came from."""
        if name not in self.origins:
            raise KeyError(f"{name!r} is not a run setting (settings: {', '.join(self.origins)})")
        return self.origins[name]


def option_name(name: str) -> str:
    """How an error names a job's option: ``option FIELD``."""
    return f"option {name}"


def dataset_ref(text: str | None, option: str = "option evaluated_as") -> DatasetRef | None:
    """``NAME/SPLIT`` -> DatasetRef (None when not given); ``option`` names it in the error."""
    if text is None:
        return None
    name, sep, split = str(text).partition("/")
    if not sep or not name or not split:
        raise RepliscopeError(f"{option} expects NAME/SPLIT, e.g. imagenet-1k/val, got {text!r}")
    return DatasetRef(name=name, split=split)


_FROM_OPTIONS = {
    "threads": "threads",
    "batch_size": "batch_size",
    "prep_workers": "prep_workers",
    "schedule": "schedule",
    "fail_fast": "fail_fast",
    "evaluated_as": "evaluated_as",
    "limit": "limit",
    "shard": "shard",
    "allow_download": "download",
    "allow_outside_paths": "allow_outside_paths",
}
"""RunSettings field -> the run option (:class:`~repliscope.job_execution.RunOptions` field) it is resolved from."""


def resolve_run_config(
    options: Any,
    *,
    runtime: str | None,
    manifest: LoadedManifest | None = None,
    source: Literal["cli", "job"],
    cache_dir: Path | None = None,
    name: Callable[[str], str] = option_name,
) -> RunSettings:
    """The run's frozen settings from ``options`` (a :class:`~repliscope.job_execution.RunOptions`: the CLI's
    flags or a job's options), each value's origin recorded: what ``options`` sets (and differs from the
    default) has the origin ``source``; ``runtime`` when given has ``source``, else it is the runtime native to
    the ``manifest``'s framework (origin ``manifest``); the rest are defaults (``cache_dir``, this process's, is
    the caller's). ``name(field)``: how an error calls an option (default ``option FIELD``; the CLI passes its
    flags). A schedule that is not one of :data:`~repliscope.evaluation.engine.SCHEDULES` and an
    ``evaluated_as`` that is not ``NAME/SPLIT`` are refused here, before any dataset is scanned or runtime
    loaded."""
    origins: dict[str, Origin] = {}
    if runtime is not None:
        origins["runtime"] = source
    elif manifest is not None:
        from repliscope.runtimes import native_runtime

        runtime = native_runtime(manifest.manifest.framework.name)
        origins["runtime"] = "manifest"
    else:
        raise RepliscopeError(f"{name('runtime')} is needed: no manifest to take its framework's runtime from")
    model_fields = type(options).model_fields
    given = options.model_fields_set
    values: dict[str, Any] = {}
    for setting, option in _FROM_OPTIONS.items():
        value = getattr(options, option)
        values[setting] = value
        if option in given and value != model_fields[option].default:
            origins[setting] = source
    if values["schedule"] is not None and values["schedule"] not in SCHEDULES:
        raise RepliscopeError(
            f"{name('schedule')} '{values['schedule']}' is not allowed (allowed: {', '.join(SCHEDULES)})"
        )
    declared = values["evaluated_as"]
    if declared is not None and "@" in str(declared):  # NAME/SPLIT@whole|random|selection
        declared, values["sampling"] = str(declared).rsplit("@", 1)
        origins["sampling"] = origins.get("evaluated_as", source)
    from repliscope.evaluation.claims import check_sampling_option

    check_sampling_option(
        values.get("sampling"),
        limit=values["limit"],
        shard=values["shard"],
        option=f"the sampling after '@' in {name('evaluated_as')}",
    )
    values["evaluated_as"] = dataset_ref(declared, name("evaluated_as"))
    return RunSettings(runtime=runtime, cache_dir=cache_dir, origins=origins, **values)
