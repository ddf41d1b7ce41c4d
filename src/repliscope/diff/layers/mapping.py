"""Any pair of implementations, given a mapping of layer names (YAML ``{reference_path: candidate_name}``).

:class:`NamedCandidate` is a candidate that speaks its OWN unit names (a TFLite tensor, a TensorFlow op, a
torch port's module path, a Keras layer): it lists its units (:class:`UnitInfo`, execution order), runs one
(``run_layer(name, ...)``, golden) or the whole model (``forward_layers(x, names)``, carried), and says which
modes it supports and why not the others. :class:`MappedCandidate` presents it under the reference paths
through a mapping (from ``--mapping FILE`` or proposed by :mod:`repliscope.diff.layers.auto_mapping`), so the layer
diff can compare it.
"""

from __future__ import annotations

import difflib
from abc import abstractmethod
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import yaml

from repliscope.diff.base import Candidate, LayerInfo, Unmatched
from repliscope.errors import RepliscopeError


class UnitInputsMismatch(RepliscopeError):
    """Golden mode: the candidate unit of a reference layer reads ``candidate_inputs`` activation tensors, not the
    ``fed`` ones it was given (the inputs of the first reference layer it covers). The layer diff compares that
    number with the tensors the covered reference layers read from outside the group: when they differ the
    unit is DIVERGENT (a dropped residual ``add`` reads one tensor, the reference two), otherwise golden mode
    cannot feed it (a fused unit whose inputs enter at several layers) and compares it in carried mode only."""

    def __init__(self, message: str, candidate_inputs: int, fed: int) -> None:
        super().__init__(message)
        self.candidate_inputs, self.fed = candidate_inputs, fed


def check_unit_inputs(unit: str, reads: int, fed: int) -> None:
    """Golden mode: raise :class:`UnitInputsMismatch` when the candidate ``unit`` (e.g. ``ONNX unit '/add'
    (Add)``) reads ``reads`` activation tensors but the reference layer was fed ``fed``."""
    if reads != fed:
        raise UnitInputsMismatch(
            f"{unit} reads {reads} activation(s), the reference layer {fed}: map it to another "
            "unit or compare in carried mode only (--mode carried)",
            reads,
            fed,
        )


class MappingError(RepliscopeError):
    """A layer-name mapping is malformed or names layers that do not exist; the message lists every one."""


def load_mapping(path: str | Path) -> dict[str, str]:
    """Read a YAML mapping ``{reference_path: candidate_layer_name}`` (both strings), in file order."""
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise MappingError(f"cannot read the layer mapping '{path}': {exc}") from exc
    except yaml.YAMLError as exc:
        raise MappingError(f"'{path}' is not valid YAML: {exc}") from exc
    if not isinstance(data, dict) or not data:
        raise MappingError(
            f"'{path}' must be a non-empty YAML mapping 'reference_path: candidate_layer_name', "
            f"got {type(data).__name__}"
        )
    bad = [f"{k!r}: {v!r}" for k, v in data.items() if not isinstance(k, str) or not isinstance(v, str)]
    if bad:
        raise MappingError(f"'{path}': {len(bad)} entr(y/ies) are not 'string: string': {', '.join(bad)}")
    return dict(data)


def validate_mapping(
    mapping: Mapping[str, str], reference_paths: Iterable[str], candidate_names: Iterable[str] | None = None
) -> None:
    """Raise :class:`MappingError` listing every unknown reference path, unknown candidate name (when
    ``candidate_names`` is given) and candidate name mapped from several reference paths."""
    ref = list(reference_paths)
    problems = []
    unknown_ref = [k for k in mapping if k not in set(ref)]
    if unknown_ref:
        problems.append(f"{len(unknown_ref)} unknown reference path(s): {_with_hints(unknown_ref, ref)}")
    if candidate_names is not None:
        names = list(candidate_names)
        unknown_cand = [v for v in mapping.values() if v not in set(names)]
        if unknown_cand:
            problems.append(f"{len(unknown_cand)} unknown candidate layer(s): {_with_hints(unknown_cand, names)}")
    doubled = sorted(v for v, n in Counter(mapping.values()).items() if n > 1)
    if doubled:
        problems.append(f"{len(doubled)} candidate layer(s) mapped more than once: {', '.join(doubled)}")
    if problems:
        raise MappingError("invalid layer mapping: " + "; ".join(problems))


def _with_hints(names: list[str], known: list[str]) -> str:
    parts = []
    for name in names:
        close = difflib.get_close_matches(name, known, n=1)
        parts.append(f"'{name}'" + (f" (did you mean '{close[0]}'?)" if close else ""))
    return ", ".join(parts)


def save_mapping(mapping: Mapping[str, str], path: str | Path, header: str = "") -> None:
    """Write ``mapping`` as YAML ``reference_path: candidate_name`` in its order (``header``: comment lines)."""
    lines = [f"# {line}" for line in header.splitlines()]
    lines += [
        f"{yaml.safe_dump(k, width=10**6).strip().removesuffix('...').strip()}: "
        f"{yaml.safe_dump(v, width=10**6).strip().removesuffix('...').strip()}"
        for k, v in mapping.items()
    ]
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")


MODE_NAMES = ("golden", "carried")


@dataclass(frozen=True)
class UnitInfo:
    """One candidate unit: its ``name`` (what a mapping file names), ``op`` (op type or layer class) and
    ``shape`` (output shape in the CANDIDATE's layout, batch of the probe first, e.g. (1, 112, 112, 32))."""

    name: str
    op: str
    shape: tuple[int, ...]


class NamedCandidate(Candidate):
    """A candidate under its own unit names. ``layout``: ``"NCHW"`` (the reference's) or ``"NHWC"``; an NHWC
    candidate transposes 4-D inputs itself and sets ``output_layout = "NHWC"`` for the driver.

    ``mode_limits``: mode -> why this candidate cannot run it (absent = supported); the CLI runs the other
    modes and prints the reason, never skipping a mode silently."""

    layout: ClassVar[str] = "NCHW"
    _units: list[UnitInfo] | None = None
    """Every unit (``units(x)``'s list) once the candidate knows them; None before."""
    spans_gaps: ClassVar[bool] = True
    """True when golden mode runs a mapped unit together with the unmapped units since the previous mapped one
    (so under a sparse mapping a unit covers the unmapped reference layers before it); False when it runs exactly
    the named unit (a torch port's module)."""

    def __init__(self) -> None:
        self.mode_limits: dict[str, str] = {}
        self.notes: list[str] = []
        self._mapped: set[str] = set()

    @abstractmethod
    def units(self, x: np.ndarray) -> list[UnitInfo]:
        """Every unit in execution order, with output shapes for the probe batch ``x`` (reference layout)."""

    def mapped_layers(self, reference_layers: Sequence[LayerInfo]) -> list[str]:
        """Without a mapping: the reference paths that are also unit names (a torch port with the same
        module tree)."""
        names = set(self._names())
        return [layer.path for layer in reference_layers if layer.path in names]

    def _names(self) -> list[str]:
        """The unit names (of ``_units``, which a candidate fills when it reads its model or in ``units(x)``)."""
        if self._units is None:
            raise RepliscopeError(f"{self.name}: call units(x) first")
        return [u.name for u in self._units]

    def sublayer_outputs(self, path: str, inputs: Sequence[np.ndarray]) -> list[tuple[str, np.ndarray]] | None:
        """Golden mode: the unit ``path`` (its own name) run sub-layer by sub-layer on ``inputs``: ("name
        (Class)", output in the layout ``run_layer`` returns) in call order; None when the candidate cannot tell."""
        return None

    def input_units(self, name: str) -> list[str | None] | None:
        """Golden mode: the units whose outputs the golden unit ending at ``name`` reads, one per tensor input in
        the order it reads them (None for the model input), as this candidate's graph wires it; None when the
        candidate cannot tell. Default: None."""
        return None

    def set_mapped(self, names: Iterable[str]) -> None:
        """The unit names a mapping pairs with reference layers, kept in ``_mapped``: a candidate whose golden
        units span gaps stops a unit's chain of unmapped units at them."""
        self._mapped = set(names)

    def to_candidate_layout(self, x: np.ndarray) -> np.ndarray:
        """Reference layout -> this candidate's (NCHW -> NHWC for 4-D when ``layout`` is NHWC)."""
        if self.layout == "NHWC" and x.ndim == 4:
            return np.ascontiguousarray(x.transpose(0, 2, 3, 1))
        return np.ascontiguousarray(x)


class MappedCandidate(Candidate):
    """``inner`` under reference paths via ``mapping`` (reference path -> inner layer name).

    ``candidate_names``: the inner candidate's layer names, to validate the mapping against (optional).
    ``covers``: reference path -> the reference layers its counterpart computes (a fused TFLite CONV_2D
    stands for conv + batch norm + activation), in the order they start; default one-to-one.
    Tensors are passed through unchanged (the inner candidate handles its layout, or declares
    ``output_layout``, which is forwarded).
    """

    name = "mapped"
    supports_ops: ClassVar[bool] = True
    """A mapping may name functional-op reference units (``layer1.0/add``) too."""

    def __init__(
        self,
        inner: Candidate,
        mapping: Mapping[str, str],
        candidate_names: Sequence[str] | None = None,
        covers: Mapping[str, list[str]] | None = None,
        origin: str = "",
    ) -> None:
        self.inner = inner
        self.mapping = dict(mapping)
        self.reverse = {v: k for k, v in self.mapping.items()}
        self.candidate_names = list(candidate_names) if candidate_names is not None else None
        self.output_layout = inner.output_layout  # type: ignore[misc]
        self.mode_limits = dict(inner.mode_limits)
        self.notes = list(inner.notes)
        self.origin = origin
        self._covers = {k: list(v) for k, v in (covers or {}).items()}
        if self.candidate_names is not None:
            validate_mapping(self.mapping, self.mapping, self.candidate_names)

    def mapped_layers(self, reference_layers: Sequence[LayerInfo]) -> list[str]:
        validate_mapping(self.mapping, [layer.path for layer in reference_layers], self.candidate_names)
        if isinstance(self.inner, NamedCandidate):
            self.inner.set_mapped(self.mapping.values())
        return [layer.path for layer in reference_layers if layer.path in self.mapping]

    def covers(self, path: str) -> list[str]:
        return self._covers.get(path, [path])

    def output(self, x: np.ndarray) -> np.ndarray | None:
        out = self.inner.output(x)
        if out is not None and self.output_layout == "NHWC" and out.ndim == 4:
            out = out.transpose(0, 3, 1, 2)
        return out

    def run_layer(self, path: str, inputs: Sequence[np.ndarray]) -> np.ndarray:
        return self.inner.run_layer(self.mapping[path], inputs)

    def forward_layers(self, x: np.ndarray, paths: Iterable[str]) -> Iterator[tuple[str, np.ndarray]]:
        names = [self.mapping[p] for p in paths]
        for name, out in self.inner.forward_layers(x, names):
            yield self.reverse[name], out

    def describe(self) -> dict[str, str]:
        origin = f" ({self.origin})" if self.origin else ""
        return {**self.inner.describe(), "mapping": f"{len(self.mapping)} layers mapped{origin}"}


class FixedBatch(Candidate):
    """``inner`` whose model input has a FIXED batch size ``batch`` (an ONNX file exported from a batch-1 example
    without dynamic axes, as ``torch.onnx.export`` does by default) run on a larger batch: every call is split
    into chunks of ``batch`` samples along axis 0 and the outputs concatenated (inference graphs treat the samples
    of a batch independently). Carried mode runs the chunks' forward passes in lockstep, so the activations held
    at once are those of the whole batch, as without chunking."""

    def __init__(self, inner: Candidate, batch: int) -> None:
        self.inner = inner
        self.batch = batch
        self.name = inner.name  # type: ignore[misc]
        self.supports_ops = inner.supports_ops  # type: ignore[misc]
        self.output_layout = inner.output_layout  # type: ignore[misc]
        self.mode_limits = dict(inner.mode_limits)

    @property
    def notes(self) -> Sequence[str]:  # the inner candidate's, as they are now (it adds some while pairing)
        return list(self.inner.notes)

    @notes.setter
    def notes(self, value: Sequence[str]) -> None:
        self.inner.notes = value

    def _chunks(self, n: int) -> list[slice]:
        if n % self.batch:
            raise RepliscopeError(
                f"the candidate's input has a fixed batch size of {self.batch} (exported without "
                f"a dynamic batch axis): give --batch a multiple of {self.batch}, not {n}"
            )
        return [slice(lo, lo + self.batch) for lo in range(0, n, self.batch)]

    def mapped_layers(self, reference_layers: Sequence[LayerInfo]) -> list[str]:
        return self.inner.mapped_layers(reference_layers)

    def covers(self, path: str) -> list[str]:
        return self.inner.covers(path)

    def input_sources(self, path: str) -> list[str] | None:
        return self.inner.input_sources(path)

    def unmatched(self) -> list[Unmatched]:
        return self.inner.unmatched()

    def describe(self) -> dict[str, str]:
        return {**self.inner.describe(), "fixed_batch": f"{self.batch} (run in chunks)"}

    def run_layer(self, path: str, inputs: Sequence[np.ndarray]) -> np.ndarray:
        if not inputs or inputs[0].ndim == 0 or inputs[0].shape[0] == self.batch:
            return self.inner.run_layer(path, inputs)
        parts = [self.inner.run_layer(path, [a[s] for a in inputs]) for s in self._chunks(int(inputs[0].shape[0]))]
        return np.concatenate(parts)

    def forward_layers(self, x: np.ndarray, paths: Iterable[str]) -> Iterator[tuple[str, np.ndarray]]:
        wanted = list(paths)
        if x.shape[0] == self.batch:
            yield from self.inner.forward_layers(x, wanted)
            return
        runs = [self.inner.forward_layers(x[s], wanted) for s in self._chunks(int(x.shape[0]))]
        for step in zip(*runs, strict=True):
            yield step[0][0], np.concatenate([out for _, out in step])

    def output(self, x: np.ndarray) -> np.ndarray | None:
        if x.shape[0] == self.batch:
            return self.inner.output(x)
        parts = [self.inner.output(x[s]) for s in self._chunks(int(x.shape[0]))]
        return None if any(p is None for p in parts) else np.concatenate(parts)  # type: ignore[arg-type]
