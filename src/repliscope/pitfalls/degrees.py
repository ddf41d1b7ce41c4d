"""A variant named with its degree, in the notation the pipeline diff prints: ``center_crop_offset[offset=[1, 0]]``.

:func:`parse_variant` reads the words a user gives ``repliscope pitfalls --variant`` (or a sweep job's
``variants``): the variant's name, optionally followed by ``[parameter=value, ...]``, each value a JSON value
(``1``, ``0.447059``, ``[1, 0]``) or a bare word (``opencv``). It checks what can be checked without a manifest (the
name is a registered pitfall, each parameter is one of its parameters, given once); :func:`resolve_variant` checks
each value against the degrees the variant has on the manifest's pipeline (:meth:`Pitfall.degrees`, what the
diagnosis tries), compared as the diff prints them (``fill=0.447059`` is 114/255). Every refusal is one error that
names the allowed names or values.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from repliscope.errors import RepliscopeError, UnknownNameError
from repliscope.ops.pipeline import Pipeline
from repliscope.pitfalls.base import PITFALLS, Pitfall, PitfallContext, _show, label

_NOTATION = re.compile(r"^\s*(?P<name>[^\[\]\s]+)\s*(?:\[(?P<params>.*)\])?\s*$", re.DOTALL)
_WORD = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
NOTATION_HELP = "NAME or NAME[PARAMETER=VALUE, ...], e.g. center_crop_offset[offset=[1, 0]]"


class VariantSpecError(RepliscopeError):
    """A ``--variant`` / ``variants`` entry that is not a registered variant at an allowed degree."""


@dataclass(frozen=True)
class VariantSpec:
    """One requested variant: the registered ``pitfall`` and its ``params`` (only the parameters given)."""

    pitfall: str
    params: dict[str, Any]

    @property
    def label(self) -> str:
        """The variant's name in the diff's notation (the bare name without a degree)."""
        return label(self.pitfall, self.params)

    def instance(self) -> Pitfall:
        return PITFALLS.get(self.pitfall)(**self.params)


def parse_variant(text: str) -> VariantSpec:
    """``NAME`` or ``NAME[PARAMETER=VALUE, ...]`` -> the spec; :class:`VariantSpecError` naming what is wrong and
    what is allowed (the registered names, the variant's parameters)."""
    match = _NOTATION.match(text)
    if match is None:
        raise VariantSpecError(f"variant {text!r}: not {NOTATION_HELP}")
    name = match.group("name")
    try:
        cls = PITFALLS.get(name)
    except UnknownNameError as exc:
        raise VariantSpecError(f"variant {text!r}: {exc}") from None
    raw = match.group("params")
    if raw is None:
        return VariantSpec(name, {})
    known = [p.name for p in cls.parameters]
    allowed = f"{name}'s parameters: {', '.join(known) if known else 'none'}"
    params: dict[str, Any] = {}
    for item in _split(raw, text):
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or not key:
            raise VariantSpecError(f"variant {text!r}: {item.strip()!r} is not PARAMETER=VALUE ({allowed})")
        if key not in known:
            raise VariantSpecError(f"variant {text!r}: no parameter {key!r} ({allowed})")
        if key in params:
            raise VariantSpecError(f"variant {text!r}: parameter {key!r} given twice")
        params[key] = _value(value.strip(), text, key)
    if not params:
        raise VariantSpecError(f"variant {text!r}: empty brackets ({allowed}; or the bare name for the default)")
    return VariantSpec(name, params)


def parse_variants(texts: Sequence[str]) -> list[VariantSpec]:
    """:func:`parse_variant` of each, duplicates (the same label) once, in the order given."""
    out: dict[str, VariantSpec] = {}
    for text in texts:
        spec = parse_variant(text)
        out.setdefault(spec.label, spec)
    return list(out.values())


def resolve_variant(spec: VariantSpec, base: Pipeline, ctx: PitfallContext) -> VariantSpec:
    """``spec`` with each value replaced by the degree it names on ``base`` (compared as :func:`label` prints
    them); :class:`VariantSpecError` naming the allowed degrees when a value is none of them. A parameter with no
    degree at all on ``base`` keeps its value: the variant is not applicable there and its ``derive`` says why."""
    cls = PITFALLS.get(spec.pitfall)
    resolved: dict[str, Any] = {}
    for param in cls.parameters:
        if param.name not in spec.params:
            continue
        value = spec.params[param.name]
        options = list(param.search(base, ctx))
        if not options:
            resolved[param.name] = value
            continue
        hit = next((v for v in options if _show(v) == _show(value)), None)
        if hit is None:
            raise VariantSpecError(
                f"variant {spec.label!r}: {param.name}={_show(value)} is not a degree of {spec.pitfall} on this "
                f"manifest's pipeline (allowed {param.name}: {', '.join(_show(v) for v in options)})"
            )
        resolved[param.name] = hit
    return VariantSpec(spec.pitfall, resolved)


def _split(raw: str, text: str) -> list[str]:
    """``raw`` split at the commas outside brackets."""
    items, depth, start = [], 0, 0
    for i, ch in enumerate(raw):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise VariantSpecError(f"variant {text!r}: unbalanced ']' ({NOTATION_HELP})")
        elif ch == "," and depth == 0:
            items.append(raw[start:i])
            start = i + 1
    if depth:
        raise VariantSpecError(f"variant {text!r}: unbalanced '[' ({NOTATION_HELP})")
    items.append(raw[start:])
    return [item for item in items if item.strip()]


def _value(raw: str, text: str, key: str) -> Any:
    """A JSON number, string or list of them, or a bare word."""
    if _WORD.match(raw) and raw not in ("true", "false", "null"):
        return raw
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        raise VariantSpecError(
            f"variant {text!r}: {key}={raw!r} is neither a number, a list such as [1, 0] nor a word"
        ) from None
    if not _scalar_or_list(value):
        raise VariantSpecError(f"variant {text!r}: {key}={raw!r}: a number, a word or a list of them, not {raw}")
    return value


def _scalar_or_list(value: Any) -> bool:
    if isinstance(value, bool) or value is None:
        return False
    if isinstance(value, (int, float, str)):
        return True
    return isinstance(value, list) and bool(value) and all(_scalar_or_list(v) for v in value)


def degrees_summary(cls: type[Pitfall]) -> str:
    """A variant's parameters in one line, each with its allowed degrees and default (the ``--list`` column):
    ``offset: [rows, columns], each from -2 to 2, not [0, 0] (default [1, 1])``; empty without parameters."""
    return "; ".join(
        f"{p.name}: {p.values or p.description} (default {p.default or 'the variant default'})" for p in cls.parameters
    )


def pitfall_listing(manifest: Path | None = None) -> list[dict[str, Any]]:
    """Every registered variant (``pitfalls --list``, ``--json``): its name, tasks (empty: every task),
    description, parameters (name, description, allowed degrees, default) and their one-line ``degrees``.

    With a ``manifest``: only the variants about its task, and each one with parameters gets ``on_manifest``
    (:func:`degrees_on` its pre-processing: the exact degrees ``--variant`` accepts for it, and the default's)."""
    from repliscope.pitfalls.base import task_pitfalls

    names, on = PITFALLS.names(), {}
    if manifest is not None:
        from repliscope.manifest.loader import load_manifest

        m = load_manifest(manifest).manifest
        spec = m.inputs[0]
        # as the pipeline diff's diagnosis: the run settings only matter to variants without parameters
        ctx = PitfallContext(tuple(spec.shape), spec.layout, m.framework.name, batch_size=8, threads=2)
        names = task_pitfalls(m.task)
        on = degrees_on(Pipeline.from_specs(m.preprocess, []), ctx, m.task)
    out = []
    for name in names:
        cls = PITFALLS.get(name)
        extra = {"on_manifest": on[name]} if name in on else {}
        out.append(
            {
                "name": name,
                "tasks": list(cls.tasks or ()),
                "description": cls.description,
                "parameters": [
                    {"name": p.name, "description": p.description, "values": p.values, "default": p.default}
                    for p in cls.parameters
                ],
                "degrees": degrees_summary(cls),
                **extra,
            }
        )
    return out


def degrees_on(base: Pipeline, ctx: PitfallContext, task: str) -> dict[str, dict[str, Any]]:
    """For each variant about ``task`` with parameters: the degrees it derives on ``base`` (labels, exactly what
    ``--variant`` accepts there and the diagnosis tries) and the label of the degree its bare name runs; a variant
    that does not apply has no degrees and its reason. ``pitfalls MANIFEST --list``."""
    from repliscope.pitfalls.base import NotApplicable, op_keys, task_pitfalls

    out: dict[str, dict[str, Any]] = {}
    for name in task_pitfalls(task):
        cls = PITFALLS.get(name)
        if not cls.parameters:
            continue
        try:
            default_keys = op_keys(cls().derive(base, ctx).pipeline)
        except NotApplicable as exc:
            out[name] = {"degrees": [], "default": None, "not_applicable": str(exc)}
            continue
        degrees, default = [], None
        for params in cls().degrees(base, ctx):
            try:
                keys = op_keys(cls(**params).derive(base, ctx).pipeline)
            except NotApplicable:
                continue
            degrees.append(label(name, params))
            if keys == default_keys and default is None:
                default = label(name, params)
        out[name] = {"degrees": degrees, "default": default, "not_applicable": None}
    return out
