"""The job kinds, a registry keyed by the kind's name (the word a job spec, ``POST /api/v1/jobs`` and the wizard
use): each :class:`JobKind` owns the model of the options it reads and its core call.

The kinds are registered by :mod:`repliscope.job_execution` (their core calls import the evaluation, the pitfall
sweep, the benchmark and the diff), imported on the registry's first read; the store and the service read the
names here (:func:`kind_names`) without importing the core at their own import.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from repliscope.errors import RepliscopeError
from repliscope.registry import Registry

OptionsT = TypeVar("OptionsT", bound=BaseModel)


@dataclass(frozen=True)
class JobKind(Generic[OptionsT]):
    """One job kind: ``name``, ``summary`` (one line, for help and docs), ``options`` (the model of the options it
    reads besides the run's own, each a field of :class:`~repliscope.job_execution.RunOptions`), ``core`` (the
    call that runs it: the CLI's core function) and ``position`` (its place in listings: errors, the wizard)."""

    name: str
    summary: str
    options: type[OptionsT]
    core: Callable[[Any, OptionsT], Any]
    """``core(ctx, options)``: a :class:`~repliscope.job_execution.JobContext` in, a
    :class:`~repliscope.job_execution.JobOutcome` out (typed there: this module imports nothing of the core)."""
    position: int
    check: Callable[[Any, Any, OptionsT], None] | None = None
    """``check(job, loaded, options)``: what the kind refuses before the job is queued (a
    :class:`~repliscope.job_execution.JobSpec`, its manifest loaded, this kind's options), with the very check its
    core call makes when it starts; raises :class:`JobOptionError`. None: nothing to check beyond the options'
    model."""

    def check_job(self, job: Any, loaded: Any) -> None:
        """:attr:`check` of ``job`` (its typed options read as :meth:`options_of` reads them) on its ``loaded``
        manifest; nothing without a check."""
        if self.check is not None:
            self.check(job, loaded, self.options_of(job.run_options))

    def options_of(self, given: BaseModel) -> OptionsT:
        """This kind's options, read field by field from a job's typed options."""
        return self.options.model_validate({name: getattr(given, name) for name in self.options.model_fields})

    def run(self, ctx: Any) -> Any:
        """Run the job of ``ctx`` with this kind's core call and its options."""
        return self.core(ctx, self.options_of(ctx.job.run_options))


class JobOptionError(RepliscopeError):
    """A job option its kind refuses before the job is queued (:attr:`JobKind.check`): ``option`` names it (e.g.
    ``variants``), the message the entry and the allowed values."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(message)
        self.option = option


JOB_KINDS: Registry[JobKind[Any]] = Registry("job kind", providers=("repliscope.job_execution",))
"""Job kinds by name; the one list the job layer, the store (``store.service_tables``) and the service read."""


def kind_names() -> tuple[str, ...]:
    """The job kinds' names in their listing order (``evaluate, pitfalls, bench, diff``)."""
    return tuple(sorted(JOB_KINDS.names(), key=lambda name: JOB_KINDS.get(name).position))
