"""Pitfall variants: each is ONE named change to a resolved pipeline (or to the run settings).

A variant that does not apply to a manifest raises :class:`NotApplicable` with the reason; the sweep reports
it as "not applicable", never skips it silently. Users register their own variants in :data:`PITFALLS`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from repliscope.errors import RepliscopeError
from repliscope.ops.base import BuildContext, Op, PostOp, PreOp
from repliscope.ops.pipeline import Pipeline, build_op
from repliscope.registry import Registry


class NotApplicable(RepliscopeError):
    """This pitfall cannot be expressed for this manifest (the message says why)."""


@dataclass(frozen=True)
class Derived:
    """A variant: its pipeline, the one change in words, and run-setting overrides.

    ``settings``: any of ``batch_size`` (int), ``threads`` (int), ``precision`` (one of
    :data:`repliscope.pitfalls.runners.PRECISIONS`: "float16", "bfloat16", "float16:normalization",
    "bfloat16:normalization"), ``input_shape``
    (the model input without the batch axis, e.g. [3, 608, 608]: the same model run at another input size).
    """

    pipeline: Pipeline
    change: str
    settings: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PitfallContext:
    """What a pitfall may look at besides the pipeline: the model input and the run settings."""

    input_shape: tuple[int, ...]
    input_layout: str
    runtime: str
    batch_size: int
    threads: int

    @property
    def input_hw(self) -> tuple[int, int]:
        """(height, width) of the model input."""
        shape = self.input_shape[1:]
        return (shape[1], shape[2]) if self.input_layout == "NCHW" else (shape[0], shape[1])


class Pitfall(ABC):
    """One classic mistake. ``derive`` returns the changed pipeline or raises NotApplicable."""

    name: ClassVar[str]
    description: ClassVar[str]
    tasks: ClassVar[tuple[str, ...] | None] = None
    """The manifest tasks this pitfall is about (e.g. ``("object_detection",)``); None: every task."""

    @abstractmethod
    def derive(self, base: Pipeline, ctx: PitfallContext) -> Derived: ...


def _pitfall_modules() -> list[str]:
    """The modules that register pitfalls: the ones of every task (:attr:`~repliscope.tasks.base.Task.pitfall_modules`)
    and :mod:`repliscope.pitfalls.variants` (pre-processing pitfalls of any task)."""
    from repliscope.tasks.base import TASKS

    modules = ["repliscope.pitfalls.variants"]
    for name in TASKS.names():
        modules += [m for m in TASKS.get(name).pitfall_modules if m not in modules]
    return modules


PITFALLS: Registry[type[Pitfall]] = Registry("pitfall", providers=_pitfall_modules)


def rebuild(op: Op, **changes: Any) -> PreOp:
    """A copy of pre-processing ``op`` with some parameters changed, validated like a manifest entry."""
    params = {**op.params.model_dump(), **changes}
    new = build_op({"op": op.name, **params}, "pre", BuildContext())
    assert isinstance(new, PreOp)
    return new


def make_op(name: str, **params: Any) -> PreOp:
    new = build_op({"op": name, **params}, "pre", BuildContext())
    assert isinstance(new, PreOp)
    return new


def find(base: Pipeline, *names: str, last: bool = False) -> int:
    """Index of the first (or last) pre op whose name is in ``names``; NotApplicable when there is none."""
    hits = [i for i, op in enumerate(base.pre_ops) if op.name in names]
    if not hits:
        raise NotApplicable(f"the pipeline has no {' or '.join(repr(n) for n in names)} op")
    return hits[-1] if last else hits[0]


def fmt_params(op: Op, *keys: str) -> str:
    p = op.params.model_dump()
    return ", ".join(f"{k}={p[k]}" for k in keys)


def simple_pitfall(
    name: str, description: str, tasks: tuple[str, ...] | None = None
) -> Callable[[Callable[[Pipeline, PitfallContext], Derived]], type[Pitfall]]:
    """Register a function ``(base, ctx) -> Derived`` as a Pitfall class named ``name`` (for ``tasks``)."""

    def deco(fn: Callable[[Pipeline, PitfallContext], Derived]) -> type[Pitfall]:
        cls = type(
            fn.__name__,
            (Pitfall,),
            {
                "name": name,
                "description": description,
                "__doc__": description,
                "tasks": tasks,
                "derive": lambda self, base, ctx: fn(base, ctx),
            },
        )
        PITFALLS.add(name, cls)
        return cls

    return deco


def rebuild_post(op: Op, **changes: Any) -> PostOp:
    """A copy of post-processing ``op`` with some parameters changed, validated like a manifest entry."""
    params = {**op.params.model_dump(), **changes}
    new = build_op({"op": op.name, **params}, "post", BuildContext())
    assert isinstance(new, PostOp)
    return new


def find_post(base: Pipeline, *names: str) -> int:
    """Index of the first post op whose name is in ``names``; NotApplicable when there is none."""
    for i, op in enumerate(base.post_ops):
        if op.name in names:
            return i
    raise NotApplicable(f"the pipeline has no {' or '.join(repr(n) for n in names)} post-processing op")
