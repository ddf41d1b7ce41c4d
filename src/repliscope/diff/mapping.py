"""Any pair of implementations, given a user mapping of layer names (YAML ``{reference_path: candidate_name}``).

:class:`MappedCandidate` wraps a candidate that speaks its OWN layer names (``run_layer(name, ...)``,
``forward_layers(x, names)``) and presents it under the reference paths, so the layer diff can compare it.
"""

from __future__ import annotations

import difflib
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np
import yaml

from repliscope.diff.base import Candidate, LayerInfo
from repliscope.errors import RepliscopeError


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
        raise MappingError(f"'{path}' must be a non-empty YAML mapping 'reference_path: candidate_layer_name', "
                           f"got {type(data).__name__}")
    bad = [f"{k!r}: {v!r}" for k, v in data.items() if not isinstance(k, str) or not isinstance(v, str)]
    if bad:
        raise MappingError(f"'{path}': {len(bad)} entr(y/ies) are not 'string: string': {', '.join(bad)}")
    return dict(data)


def validate_mapping(mapping: Mapping[str, str], reference_paths: Iterable[str],
                     candidate_names: Iterable[str] | None = None) -> None:
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


class MappedCandidate(Candidate):
    """``inner`` under reference paths via ``mapping`` (reference path -> inner layer name).

    ``candidate_names``: the inner candidate's layer names, to validate the mapping against (optional).
    Tensors are passed through unchanged (the inner candidate handles its layout, or declares
    ``output_layout``, which is forwarded).
    """

    name = "mapped"

    def __init__(self, inner: Candidate, mapping: Mapping[str, str],
                 candidate_names: Sequence[str] | None = None) -> None:
        self.inner = inner
        self.mapping = dict(mapping)
        self.reverse = {v: k for k, v in self.mapping.items()}
        self.candidate_names = list(candidate_names) if candidate_names is not None else None
        self.output_layout = inner.output_layout  # type: ignore[misc]
        if self.candidate_names is not None:
            validate_mapping(self.mapping, self.mapping, self.candidate_names)

    def mapped_layers(self, reference_layers: Sequence[LayerInfo]) -> list[str]:
        validate_mapping(self.mapping, [layer.path for layer in reference_layers], self.candidate_names)
        return [layer.path for layer in reference_layers if layer.path in self.mapping]

    def run_layer(self, path: str, inputs: Sequence[np.ndarray]) -> np.ndarray:
        return self.inner.run_layer(self.mapping[path], inputs)

    def forward_layers(self, x: np.ndarray, paths: Iterable[str]) -> Iterator[tuple[str, np.ndarray]]:
        names = [self.mapping[p] for p in paths]
        for name, out in self.inner.forward_layers(x, names):
            yield self.reverse[name], out

    def describe(self) -> dict[str, str]:
        return {**self.inner.describe(), "mapping": f"{len(self.mapping)} layers renamed"}
