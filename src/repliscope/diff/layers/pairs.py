"""Pairing a candidate's units with a reference that names its own layers (libdarknet: ``convolutional_0``), one
pair at a time, with a small declared transform per pair.

The mapping file (``--mapping FILE``) is YAML, one entry per reference layer, in any order::

    convolutional_0: backbone/conv_0/bn          # the candidate unit, a nested layer path
    convolutional_2:
      unit: [backbone/conv_1/conv, backbone/conv_1/bn]   # several units run in turn (golden); the last one's output
      activation: leaky                          # applied to the candidate's output before comparing
      layout: NHWC                               # the layout the candidate unit computes in
      scale: 1.0                                 # the candidate's output multiplied by it (before the activation)

A reference layer the file does not name is paired with the candidate unit of the same name when there is one,
else it is SKIPPED: listed as not compared with the reason, never a failure (a candidate may have no layer for
Darknet's route or upsample). Every problem in the file is an error naming the file, the line and the allowed
values: an unknown key, an unknown activation or layout, a scale that is no positive number, a reference layer
the reference does not have, a candidate unit the candidate does not have, a unit paired twice.

:class:`PairedCandidate` presents any :class:`~repliscope.diff.layers.mapping.NamedCandidate` under the reference
paths through these pairs: golden feeds the unit the reference inputs in its layout, carried streams the unit's
outputs; both hand the driver the transformed output in the reference layout.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from repliscope.diff.base import Candidate, LayerInfo, Unmatched
from repliscope.diff.layers.mapping import MappingError, NamedCandidate

LAYOUTS = ("NCHW", "NHWC")


def _leaky(a: np.ndarray) -> np.ndarray:
    return np.where(a > 0, a, a * np.float32(0.1)).astype(a.dtype, copy=False)


ACTIVATIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "linear": lambda a: a,
    "leaky": _leaky,
    "relu": lambda a: np.maximum(a, 0).astype(a.dtype, copy=False),
    "logistic": lambda a: (1 / (1 + np.exp(-a))).astype(a.dtype, copy=False),
    "tanh": lambda a: np.tanh(a).astype(a.dtype, copy=False),
}
"""The activations a pair may declare, named as Darknet's cfg names them (``leaky``: slope 0.1; ``logistic``: the
sigmoid)."""

KEYS = ("unit", "activation", "layout", "scale")
"""The keys of a pair written as a mapping."""


@dataclass(frozen=True)
class Pair:
    """One reference layer's counterpart: the candidate ``unit`` (a name or a nested path ``backbone/conv_0/bn``;
    ``chain``: the units golden mode runs in turn, ending with ``unit``, when the file gives a list) and the
    transform applied to its output before comparing: ``layout`` (the layout the unit computes in; None: the
    candidate's own), ``scale`` (multiplied first), ``activation`` (applied last; ``linear``: none). ``line``: where
    the mapping file declares it (0: paired by name)."""

    unit: str
    activation: str = "linear"
    layout: str | None = None
    scale: float = 1.0
    line: int = 0
    chain: tuple[str, ...] = ()

    @property
    def units(self) -> tuple[str, ...]:
        """The units golden mode runs in turn (``chain``, else ``unit`` alone)."""
        return self.chain or (self.unit,)

    @property
    def transform(self) -> str:
        """The declared transform in words, "" when there is none."""
        parts = []
        if self.layout is not None:
            parts.append(f"layout {self.layout}")
        if self.scale != 1.0:
            parts.append(f"scale {self.scale:g}")
        if self.activation != "linear":
            parts.append(f"activation {self.activation}")
        return ", ".join(parts)


def _hint(name: str, known: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, list(known), n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


def load_pairs(path: Path, reference: Sequence[str], passthrough: Mapping[str, str] | None = None) -> dict[str, Pair]:
    """Read the mapping file ``path`` (see the module docstring) for a reference with layers ``reference``:
    reference layer -> :class:`Pair`, in the file's order. :class:`MappingError` naming the file and line.
    ``passthrough``: reference layer -> the layer whose output it passes on unchanged (a Darknet route with one
    input); a unit may be paired with a layer and the pass-throughs of it (:func:`pair_layers`)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise MappingError(f"cannot read the layer mapping '{path}': {exc}") from None
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        raise MappingError(f"'{path}' is not valid YAML: {exc}") from None
    if not isinstance(root, yaml.MappingNode) or not root.value:
        raise MappingError(
            f"{path}: a layer mapping is a non-empty YAML mapping 'reference_layer: candidate_unit' (or "
            f"'reference_layer: {{{', '.join(KEYS)}}}')"
        )
    known = list(reference)
    pairs: dict[str, Pair] = {}
    for key, value in root.value:
        line = key.start_mark.line + 1
        where = f"{path}:{line}"
        if not isinstance(key, yaml.ScalarNode) or not key.value:
            raise MappingError(f"{where}: a reference layer name is a string")
        name = key.value
        if name not in known:
            span = f"{known[0]} … {known[-1]}" if known else "none"
            raise MappingError(
                f"{where}: --mapping names the reference layer '{name}', which the reference does not have"
                f"{_hint(name, known)} (layers: {span})"
            )
        if name in pairs:
            raise MappingError(f"{where}: '{name}' is paired twice (first at line {pairs[name].line})")
        pairs[name] = _pair(value, name, where, line)
    units: dict[str, str] = {}
    for name, pair in pairs.items():
        first = units.setdefault(pair.unit, name)
        if first != name and _root(first, passthrough) != _root(name, passthrough):
            raise MappingError(f"{path}:{pair.line}: {_twice(pair.unit, first, name, passthrough)}")
    return pairs


def _root(name: str, passthrough: Mapping[str, str] | None) -> str:
    """The layer whose output ``name`` outputs: ``name`` itself, or the end of its chain of pass-throughs."""
    seen = {name}
    while passthrough and name in passthrough and passthrough[name] not in seen:
        name = passthrough[name]
        seen.add(name)
    return name


def _twice(unit: str, first: str, name: str, passthrough: Mapping[str, str] | None) -> str:
    passes = [f"{k} passes {v} through" for k, v in (passthrough or {}).items()]
    which = f" ({'; '.join(passes[:4])})" if passes else ""
    return (
        f"the candidate unit '{unit}' is paired with '{first}' and '{name}'; a unit is paired with one reference "
        f"layer, or with a layer and the one-input routes that pass its output on unchanged{which}, and "
        f"'{name}' is no pass-through of '{first}'"
    )


def declared_pairs(path: Path) -> dict[str, Pair]:
    """The pairs ``path`` declares that are well formed, its layer names unchecked (to choose how to load a
    candidate before the reference is known; :func:`load_pairs` reads it again and reports every mistake)."""
    try:
        root = yaml.compose(Path(path).read_text(encoding="utf-8"), Loader=yaml.SafeLoader)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return {}
    found: dict[str, Pair] = {}
    if isinstance(root, yaml.MappingNode):
        for key, value in root.value:
            try:
                found[str(key.value)] = _pair(value, str(key.value), str(path), key.start_mark.line + 1)
            except MappingError:
                continue
    return found


def _pair(node: yaml.Node, name: str, where: str, line: int) -> Pair:
    if isinstance(node, yaml.ScalarNode):
        if not node.value:
            raise MappingError(f"{where}: '{name}' names no candidate unit")
        return Pair(node.value, line=line)
    if not isinstance(node, yaml.MappingNode):
        raise MappingError(f"{where}: '{name}' is paired with a unit name or a mapping of {', '.join(KEYS)}")
    fields: dict[str, str] = {}
    chain: tuple[str, ...] = ()
    for key, value in node.value:
        at = f"{where.rsplit(':', 1)[0]}:{key.start_mark.line + 1}"
        word = key.value if isinstance(key, yaml.ScalarNode) else str(key)
        if word not in KEYS:
            raise MappingError(
                f"{at}: unknown key '{word}' in the pair of '{name}'{_hint(word, KEYS)} (allowed: {', '.join(KEYS)})"
            )
        if word == "unit" and isinstance(value, yaml.SequenceNode):
            items = [v.value for v in value.value if isinstance(v, yaml.ScalarNode) and v.value]
            if not items or len(items) != len(value.value):
                raise MappingError(f"{at}: '{name}.unit' is a unit name or a non-empty list of unit names")
            chain = tuple(items)
            fields[word] = items[-1]
            continue
        if not isinstance(value, yaml.ScalarNode):
            raise MappingError(f"{at}: '{name}.{word}' is a single value")
        fields[word] = value.value
    if not fields.get("unit"):
        raise MappingError(f"{where}: the pair of '{name}' names no candidate unit (key 'unit')")
    activation = fields.get("activation", "linear")
    if activation not in ACTIVATIONS:
        raise MappingError(
            f"{where}: '{name}.activation' is '{activation}'{_hint(activation, list(ACTIVATIONS))} (allowed: "
            f"{', '.join(ACTIVATIONS)})"
        )
    layout = fields.get("layout")
    if layout is not None and layout not in LAYOUTS:
        raise MappingError(f"{where}: '{name}.layout' is '{layout}' (allowed: {', '.join(LAYOUTS)})")
    scale = 1.0
    if "scale" in fields:
        try:
            scale = float(fields["scale"])
        except ValueError:
            scale = float("nan")
        if not np.isfinite(scale) or scale <= 0:
            raise MappingError(f"{where}: '{name}.scale' is '{fields['scale']}' (allowed: a positive number)")
    return Pair(fields["unit"], activation, layout, scale, line, chain if len(chain) > 1 else ())


@dataclass(frozen=True)
class Pairing:
    """What :func:`pair_layers` paired: ``pairs`` (reference layer -> pair, reference order), ``skipped`` (the
    reference layers with no unit) and ``shared`` (a pass-through layer -> the layer whose unit it shares: its
    output is that layer's, so the unit is compared once, as that layer)."""

    pairs: dict[str, Pair]
    skipped: list[str]
    shared: dict[str, str]


def pair_units(
    reference: Sequence[str], units: Sequence[str], declared: Mapping[str, Pair] | None, source: str
) -> tuple[dict[str, Pair], list[str]]:
    """(reference layer -> pair, in reference order; the reference layers left unpaired): :func:`pair_layers`
    without pass-throughs."""
    found = pair_layers(reference, units, declared, source)
    return found.pairs, found.skipped


def pair_layers(
    reference: Sequence[str],
    units: Sequence[str],
    declared: Mapping[str, Pair] | None,
    source: str,
    passthrough: Mapping[str, str] | None = None,
) -> Pairing:
    """The ``declared`` pairs (a mapping file's), and every other reference layer with the candidate unit of its
    name when there is one. Every declared unit must be a unit of the candidate (:class:`MappingError` naming it and
    the line); at least one layer must be paired.

    A unit paired with several layers (declared twice, or declared for a layer and named after another) is
    accepted when they all output the same tensor: ``passthrough`` (layer -> the layer it passes on unchanged, a
    Darknet route with one input) leads them to one layer; the earliest is paired, the others SHARE its unit
    (``Pairing.shared``). Otherwise a :class:`MappingError` says why before anything runs."""
    have = set(units)
    declared = dict(declared or {})
    bad = [
        f"line {p.line}: '{name}: {u}'{_hint(u, units)}"
        for name, p in declared.items()
        for u in p.units
        if u not in have
    ]
    if bad:
        raise MappingError(f"{source}: the candidate has no unit for {len(bad)} pair(s): {'; '.join(bad[:6])}")
    position = {name: i for i, name in enumerate(reference)}
    groups: dict[str, list[str]] = {}
    for name, pair in declared.items():
        groups.setdefault(pair.unit, []).append(name)
    for name in reference:  # a layer named after a declared unit that outputs the same tensor shares it
        if name not in declared and name in groups and _root(name, passthrough) == _root(groups[name][0], passthrough):
            groups[name].append(name)
    shared: dict[str, str] = {}
    lead: dict[str, Pair] = {}
    for unit, names in groups.items():
        names.sort(key=position.__getitem__)
        for name in names[1:]:
            if _root(name, passthrough) != _root(names[0], passthrough):
                where = f"{source}:{declared[name].line}" if name in declared and declared[name].line else source
                raise MappingError(f"{where}: {_twice(unit, names[0], name, passthrough)}")
            shared[name] = names[0]
        lead[names[0]] = declared.get(names[0]) or next(declared[n] for n in names if n in declared)
    taken = set(groups)
    pairs: dict[str, Pair] = {}
    for name in reference:
        if name in lead:
            pairs[name] = lead[name]
        elif name in have and name not in taken and name not in shared:
            pairs[name] = Pair(name)
    if not pairs:
        raise MappingError(
            f"{source}: no candidate unit is named after a reference layer ({reference[0]} … {reference[-1]}) and "
            "no --mapping FILE pairs them: write one ('reference_layer: candidate_unit', nested paths as "
            "'backbone/conv_0/bn')"
        )
    return Pairing(pairs, [name for name in reference if name not in pairs and name not in shared], shared)


class PairedCandidate(Candidate):
    """``inner`` (any :class:`~repliscope.diff.layers.mapping.NamedCandidate`) under the reference layer names of
    ``pairs``; outputs transformed per pair (see :class:`Pair`) and always handed over in the reference layout.
    ``reference``: every reference layer, in order (a candidate whose golden unit spans the unmapped units before
    it covers the unpaired reference layers before its own); ``info`` what :meth:`describe` records;
    ``skipped``: the unpaired reference layers (listed as not compared, with the reason); ``producers``: each reference
    layer's inputs (a branching graph: a unit covers only its own chain, :func:`~.auto_mapping.covers_for`)."""

    def __init__(
        self,
        inner: NamedCandidate,
        pairs: Mapping[str, Pair],
        reference: Sequence[str],
        info: Mapping[str, Any],
        notes: Sequence[str] = (),
        skipped: Sequence[str] = (),
        producers: Mapping[str, Sequence[str]] | None = None,
        shared: Mapping[str, str] | None = None,
    ) -> None:
        from repliscope.diff.layers.auto_mapping import covers_for

        self.inner, self.pairs = inner, dict(pairs)
        self.shared = dict(shared or {})
        self.name = inner.name  # type: ignore[misc]
        self.mode_limits = dict(inner.mode_limits)
        self.info = dict(info)
        self.skipped = list(skipped)
        inner.set_mapped(p.unit for p in self.pairs.values())
        self._back = {p.unit: name for name, p in self.pairs.items()}
        self._covers = covers_for(list(reference), list(self.pairs), producers) if inner.spans_gaps else {}
        own = list(notes)
        if self.skipped:
            own.append(
                f"{len(self.skipped)} reference layer(s) have no counterpart in the candidate and are skipped "
                f"(not compared): {', '.join(self.skipped[:12])}{' …' if len(self.skipped) > 12 else ''}"
            )
        own += [f"'{name}' <- '{p.unit}': {p.transform}" for name, p in self.pairs.items() if p.transform]
        own += [
            f"'{name}' shares the candidate unit '{self.pairs[lead].unit}' with '{lead}': it passes '{lead}''s output "
            f"on unchanged (a one-input route), so the unit is compared once, as '{lead}'"
            for name, lead in self.shared.items()
        ]
        self._own_notes = own

    @property
    def notes(self) -> Sequence[str]:  # the inner candidate's as they are now (it adds some while running)
        return [*self._own_notes, *self.inner.notes]

    @notes.setter
    def notes(self, value: Sequence[str]) -> None:
        self._own_notes = list(value)

    def describe(self) -> dict[str, Any]:
        return dict(self.info)

    def mapped_layers(self, reference_layers: Sequence[LayerInfo]) -> list[str]:
        return [layer.path for layer in reference_layers if layer.path in self.pairs]

    def covers(self, path: str) -> list[str]:
        return self._covers.get(path, [path])

    def unmatched(self) -> list[Unmatched]:
        found = [
            Unmatched(p, "skipped: the candidate has no unit paired with it (partial mapping)") for p in self.skipped
        ]
        found += [
            Unmatched(p, f"a pass-through of '{lead}': shares its candidate unit, compared as '{lead}'")
            for p, lead in self.shared.items()
        ]
        return [u for u in found if not any(u.path in group for group in self._covers.values())]

    def input_sources(self, path: str) -> list[str] | None:
        """The reference layers paired with the units the candidate's unit of ``path`` reads, in the candidate's
        order ("" for the model input); None when the inner candidate cannot tell or reads an unpaired unit."""
        units = self.inner.input_units(self.pairs[path].units[0])
        if units is None:
            return None
        found: list[str] = []
        for unit in units:
            name = "" if unit is None else self._back.get(unit)
            if name is None:
                return None
            found.append(name)
        return found

    def sublayer_outputs(self, path: str, inputs: Sequence[np.ndarray]) -> list[tuple[str, np.ndarray]] | None:
        """The unit of ``path`` sub-layer by sub-layer (a single unit, not a chain), in the reference layout; the
        pair's declared scale / activation applied to the last one as a step of its own."""
        pair = self.pairs[path]
        if len(pair.units) > 1:
            return None
        subs = self.inner.sublayer_outputs(pair.unit, [self._to_inner(np.asarray(a), pair) for a in inputs])
        if not subs:
            return None
        found = [(label, self._from_inner(out, pair, transform=False)) for label, out in subs]
        if pair.scale != 1.0 or pair.activation != "linear":
            found.append((f"the pair's declared {pair.transform}", self._from_inner(subs[-1][1], pair)))
        return found

    def run_layer(self, path: str, inputs: Sequence[np.ndarray]) -> np.ndarray:
        pair = self.pairs[path]
        fed = [self._to_inner(np.asarray(a), pair) for a in inputs]
        out = self.inner.run_layer(pair.units[0], fed)
        for unit in pair.units[1:]:  # the next unit takes the previous one's output as the inner candidate gave it
            a = np.asarray(out)
            if a.ndim == 4 and self.inner.output_layout == "NHWC":
                a = a.transpose(0, 3, 1, 2)  # back to what run_layer takes (it converts to its layout itself)
            out = self.inner.run_layer(unit, [a])
        return self._from_inner(out, pair)

    def forward_layers(self, x: np.ndarray, paths: Iterable[str]) -> Iterator[tuple[str, np.ndarray]]:
        units = [self.pairs[p].unit for p in paths]
        for unit, out in self.inner.forward_layers(x, units):
            name = self._back[unit]
            yield name, self._from_inner(out, self.pairs[name])

    def _declared(self, pair: Pair) -> str:
        return pair.layout or self.inner.layout

    def _to_inner(self, a: np.ndarray, pair: Pair) -> np.ndarray:
        """A reference-layout (NCHW) input, arranged so the inner candidate's own conversion feeds its unit the
        tensor in the pair's layout."""
        if a.ndim != 4 or self._declared(pair) == self.inner.layout:
            return a
        # the inner candidate transposes NCHW -> NHWC itself (an NHWC model) or passes the array as is (NCHW)
        return a.transpose(0, 3, 1, 2) if self.inner.layout == "NHWC" else a.transpose(0, 2, 3, 1)

    def _from_inner(self, out: Any, pair: Pair, transform: bool = True) -> np.ndarray:
        a = np.asarray(out)
        if a.ndim == 4:
            if self.inner.output_layout == "NHWC":
                a = a.transpose(0, 3, 1, 2)
            if self._declared(pair) != self.inner.layout:
                a = a.transpose(0, 2, 3, 1) if self.inner.layout == "NHWC" else a.transpose(0, 3, 1, 2)
            a = np.ascontiguousarray(a)
        if not transform:
            return a
        if pair.scale != 1.0:
            a = (a * np.asarray(pair.scale, dtype=a.dtype)).astype(a.dtype, copy=False)
        return ACTIVATIONS[pair.activation](a)
