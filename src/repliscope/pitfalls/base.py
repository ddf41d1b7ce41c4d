"""Pitfall variants: each is ONE named change to a resolved pipeline (or to the run settings).

A variant that does not apply to a manifest raises :class:`NotApplicable` with the reason; the sweep reports
it as "not applicable", never skips it silently. Users register their own variants in :data:`PITFALLS`.

A mistake that has a DEGREE (how many pixels a crop is off, which grey fills a border, how many normalisation
steps run before the cast) is one variant with :class:`Parameter` s: ``PITFALLS.get(name)(**params)`` derives that
degree, ``PITFALLS.get(name)()`` the variant's default (what the sweep runs), and :meth:`Pitfall.degrees` lists the
values the pipeline diff's diagnosis tries (:func:`label` names one, e.g. ``center_crop_offset[offset=[1, 0]]``).
"""

from __future__ import annotations

import itertools
import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
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


@dataclass(frozen=True)
class Parameter:
    """One degree of freedom of a mistake (e.g. the crop ``offset`` [rows, columns])."""

    name: str
    description: str
    search: Callable[[Pipeline, PitfallContext], Sequence[Any]]
    """The values the pipeline diff's diagnosis tries on this pipeline (the sweep runs the default: not given)."""
    values: str = ""
    """The allowed degrees in words, for ``pitfalls --list`` and the registries page (on one pipeline they are
    exactly ``search``'s: what ``--variant NAME[PARAMETER=VALUE]`` accepts)."""
    default: str = ""
    """The degree the bare name derives (what the sweep runs when none is given), in words."""


class Pitfall(ABC):
    """One classic mistake. ``derive`` returns the changed pipeline or raises NotApplicable.

    ``Pitfall(**params)``: the degree to derive, one value per :attr:`parameters` name (a parameter not given is
    None: the variant's default, what the sweep runs)."""

    name: ClassVar[str]
    description: ClassVar[str]
    tasks: ClassVar[tuple[str, ...] | None] = None
    """The manifest tasks this pitfall is about (e.g. ``("object_detection",)``); None: every task."""
    parameters: ClassVar[tuple[Parameter, ...]] = ()
    """The mistake's degrees (none for an all-or-nothing mistake)."""

    def __init__(self, **params: Any) -> None:
        known = [p.name for p in self.parameters]
        unknown = sorted(set(params) - set(known))
        if unknown:
            raise RepliscopeError(
                f"pitfall '{self.name}' has no parameter {', '.join(unknown)} "
                f"(its parameters: {', '.join(known) if known else 'none'})"
            )
        self.params: dict[str, Any] = {k: params.get(k) for k in known}

    @abstractmethod
    def derive(self, base: Pipeline, ctx: PitfallContext) -> Derived: ...

    def degrees(self, base: Pipeline, ctx: PitfallContext) -> list[dict[str, Any]]:
        """Every combination of the parameters' search values for ``base`` ([{}] without parameters)."""
        grids = [[(p.name, v) for v in p.search(base, ctx)] for p in self.parameters]
        return [dict(combo) for combo in itertools.product(*grids)]


def label(name: str, params: Mapping[str, Any]) -> str:
    """``name`` with the degree given, e.g. ``letterbox_fill[fill=0]``; the bare name without one."""
    given = {k: v for k, v in params.items() if v is not None}
    if not given:
        return name
    return f"{name}[{', '.join(f'{k}={_show(v)}' for k, v in given.items())}]"


def _show(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    return str(value)


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


def rebuild_or_explain(op: Op, what: str, **changes: Any) -> PreOp:
    """:func:`rebuild`, or NotApplicable naming the op's own refusal (a library without that method, ...)."""
    from repliscope.errors import OpSpecError

    try:
        return rebuild(op, **changes)
    except OpSpecError as exc:
        raise NotApplicable(f"{what}: {op.name} refuses it ({exc})") from None


def fmt_params(op: Op, *keys: str) -> str:
    p = op.params.model_dump()
    return ", ".join(f"{k}={p[k]}" for k in keys)


def simple_pitfall(
    name: str, description: str, tasks: tuple[str, ...] | None = None, parameters: tuple[Parameter, ...] = ()
) -> Callable[[Callable[..., Derived]], type[Pitfall]]:
    """Register a function ``(base, ctx, **params) -> Derived`` as a Pitfall class named ``name`` (for ``tasks``);
    ``params``: one keyword per :class:`Parameter` in ``parameters``, None for the variant's default."""

    def deco(fn: Callable[..., Derived]) -> type[Pitfall]:
        cls = type(
            fn.__name__,
            (Pitfall,),
            {
                "name": name,
                "description": description,
                "__doc__": description,
                "tasks": tasks,
                "parameters": parameters,
                "derive": lambda self, base, ctx: fn(base, ctx, **self.params),
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


def task_pitfalls(task: str) -> list[str]:
    """The registered pitfalls about ``task`` (or about every task), sorted (:data:`PITFALLS` imports every task's
    pitfall modules on first read)."""
    return [
        name
        for name in PITFALLS.names()
        if PITFALLS.get(name).tasks in (None, ()) or task in (PITFALLS.get(name).tasks or ())
    ]


def op_keys(pipeline: Pipeline) -> list[str]:
    """One key per pre op (its resolved configuration as JSON): equal key prefixes = the same computation."""
    return [json.dumps(op.describe(), sort_keys=True, default=str) for op in pipeline.pre_ops]
