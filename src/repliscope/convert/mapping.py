"""The declarative torch -> Keras mapping file (YAML): name rules plus per-kind layout transforms.

A rule maps a torch MODULE path pattern to a Keras LAYER name (``{torch: "_blocks.{i}._bn1", keras:
"block{i}_dw_bn", kind: batch_norm}``). The kind says which of the module's tensors become which Keras weights
and how their axes are permuted (:data:`KINDS`). Rules are tried in order; the first match wins. The same rules
serve the weight converter (state_dict keys) and the layer-level diff (module paths; ``path#k`` is the k-th
call, k >= 2, of a module forward() calls several times).

Pure Python + numpy: no framework is imported here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from repliscope.errors import ManifestError, RepliscopeError
from repliscope.manifest.yaml_lines import line_of, load_with_lines

Kind = Literal["conv", "depthwise", "dense", "batch_norm", "none"]


@dataclass(frozen=True)
class TensorRule:
    """One torch tensor of a module kind: the Keras weight it becomes and the axis permutation applied first
    (``np.transpose(tensor, permute)``; None = unchanged)."""

    keras_weight: str
    permute: tuple[int, ...] | None = None


KINDS: dict[str, dict[str, TensorRule]] = {
    # torch Conv2d weight (O, I, kh, kw) -> Keras Conv2D kernel (kh, kw, I, O)
    "conv": {"weight": TensorRule("kernel", (2, 3, 1, 0)), "bias": TensorRule("bias")},
    # torch depthwise Conv2d(groups=C) weight (C, 1, kh, kw) -> Keras DepthwiseConv2D kernel (kh, kw, C, 1)
    "depthwise": {"weight": TensorRule("kernel", (2, 3, 0, 1)), "bias": TensorRule("bias")},
    # torch Linear weight (out, in) -> Keras Dense kernel (in, out)
    "dense": {"weight": TensorRule("kernel", (1, 0)), "bias": TensorRule("bias")},
    "batch_norm": {
        "weight": TensorRule("gamma"),
        "bias": TensorRule("beta"),
        "running_mean": TensorRule("moving_mean"),
        "running_var": TensorRule("moving_variance"),
    },
    "none": {},
}


class MappingError(RepliscopeError):
    """A mapping file is malformed (names the file and the field), or a rule cannot be applied."""


class Rule(BaseModel):
    """``torch`` module path pattern -> ``keras`` layer name template, with the layout ``kind``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    torch: str
    keras: str
    kind: Kind = "none"
    permute: dict[str, list[int]] = Field(default_factory=dict)

    @field_validator("torch")
    @classmethod
    def _valid_pattern(cls, value: str) -> str:
        compile_pattern(value)
        return value

    @cached_property
    def regex(self) -> re.Pattern[str]:
        return compile_pattern(self.torch)

    def tensors(self) -> dict[str, TensorRule]:
        """The kind's tensor table with this rule's ``permute`` overrides applied."""
        table = dict(KINDS[self.kind])
        for name, perm in self.permute.items():
            if name not in table:
                raise MappingError(
                    f"rule '{self.torch}': permute names tensor '{name}', which kind "
                    f"'{self.kind}' does not convert (it converts: {', '.join(table) or 'nothing'})"
                )
            table[name] = TensorRule(table[name].keras_weight, tuple(perm))
        return table

    def keras_name(self, match: re.Match[str]) -> str:
        try:
            return self.keras.format(**match.groupdict())
        except (KeyError, IndexError) as exc:
            raise MappingError(
                f"rule '{self.torch}': keras template '{self.keras}' uses {exc}, which the "
                f"torch pattern does not capture"
            ) from None


class MappingFile(BaseModel):
    """The whole mapping file (see ``examples/keras_efficientnet_lite/mapping.yaml`` for a commented one)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: Literal[1] = 1
    model: str = ""
    keras_model: str | None = None
    """``"file.py:function"`` (relative to the mapping file) that builds the Keras model, if known."""
    batch_norm_epsilon: Literal["check", "set", "ignore"] = "check"
    ignore: list[str] = Field(default_factory=list)
    """fnmatch-style globs of state_dict keys that are deliberately not converted (``*.num_batches_tracked``)."""
    layers: list[Rule]


@dataclass(frozen=True)
class LayerMapping:
    """A loaded mapping: the validated file plus where it came from (relative paths resolve against it)."""

    spec: MappingFile
    path: Path | None = None

    @property
    def base_dir(self) -> Path:
        return self.path.parent if self.path is not None else Path.cwd()

    def match(self, module_path: str) -> tuple[Rule, str] | None:
        """``(rule, keras layer name)`` of the first rule matching ``module_path`` (``path`` or, for the k-th
        call of a module called several times, ``path#k``), else None."""
        for rule in self.spec.layers:
            m = rule.regex.fullmatch(module_path)
            if m is not None:
                return rule, rule.keras_name(m)
        return None

    def ignored(self, key: str) -> bool:
        return any(_glob(p).fullmatch(key) for p in self.spec.ignore)

    def with_changes(self, **changes: Any) -> LayerMapping:
        """A copy with top-level fields replaced (e.g. ``batch_norm_epsilon="ignore"``)."""
        return LayerMapping(self.spec.model_copy(update=changes), self.path)

    def with_rules_first(self, rules: list[dict[str, Any]]) -> LayerMapping:
        """A copy with extra rules tried before the existing ones (one-layer overrides)."""
        extra = [Rule.model_validate(r) for r in rules]
        return LayerMapping(self.spec.model_copy(update={"layers": extra + list(self.spec.layers)}), self.path)


def load_mapping(source: str | Path | Mapping[str, Any]) -> LayerMapping:
    """Read and validate a mapping file (or an already-parsed dict). Unknown keys, unknown kinds and bad
    patterns are errors naming the file and the field."""
    path: Path | None = None
    lines: dict[Any, int] = {}
    if isinstance(source, Mapping):
        data: Any = dict(source)
        where = "<mapping>"
    else:
        path = Path(source)
        where = str(path)
        try:
            data, lines = load_with_lines(path.read_text(encoding="utf-8"), where)
        except OSError as exc:
            raise MappingError(f"cannot read mapping file '{path}': {exc.strerror}") from None
        except ManifestError as exc:
            raise MappingError(str(exc)) from None
    if not isinstance(data, dict):
        raise MappingError(
            f"{where}: a mapping file is a YAML mapping with the fields {', '.join(MappingFile.model_fields)}"
        )
    try:
        spec = MappingFile.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            field = ".".join(str(p) for p in err["loc"])
            line = line_of(tuple(err["loc"]), lines) if lines else None
            field = f"{field}' (line {line})" if line else f"{field}'"
            if err["type"] == "extra_forbidden":
                model = Rule if err["loc"][0] == "layers" else MappingFile
                problems.append(f"field '{field}: unknown key (allowed: {', '.join(model.model_fields)})")
            else:
                problems.append(f"field '{field}: {err['msg']}")
        raise MappingError(f"{where}: invalid mapping file: " + "; ".join(problems)) from None
    mapping = LayerMapping(spec, path)
    for rule in spec.layers:
        rule.tensors()  # permute overrides must name converted tensors
    return mapping


_PLACEHOLDER = re.compile(r"\{(\w+)\}")


def compile_pattern(pattern: str) -> re.Pattern[str]:
    """A module path pattern -> regex: ``{name}`` captures one component (no dots, no '#'), ``*`` matches any
    run of characters within a component, everything else is literal. ``re:...`` is a raw regex."""
    if pattern.startswith("re:"):
        try:
            return re.compile(pattern[3:])
        except re.error as exc:
            raise ValueError(f"invalid regex {pattern[3:]!r}: {exc}") from None
    out, pos = [], 0
    for m in _PLACEHOLDER.finditer(pattern):
        out.append(_literal(pattern[pos : m.start()]))
        out.append(f"(?P<{m.group(1)}>[^.#]+)")
        pos = m.end()
    out.append(_literal(pattern[pos:]))
    try:
        return re.compile("".join(out))
    except re.error as exc:  # e.g. the same placeholder twice
        raise ValueError(f"invalid pattern {pattern!r}: {exc}") from None


def _literal(text: str) -> str:
    return "[^.]*".join(re.escape(part) for part in text.split("*"))


def _glob(pattern: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(p) for p in pattern.split("*")))


def split_key(key: str) -> tuple[str, str]:
    """``"_blocks.0._bn1.running_var"`` -> ``("_blocks.0._bn1", "running_var")``."""
    module, _, tensor = key.rpartition(".")
    return module, tensor


def transform(array: np.ndarray, rule: TensorRule) -> np.ndarray:
    """Apply the axis permutation of ``rule`` (a copy, C-contiguous)."""
    if rule.permute is None:
        return np.ascontiguousarray(array)
    if len(rule.permute) != array.ndim or sorted(rule.permute) != list(range(array.ndim)):
        raise MappingError(f"permutation {list(rule.permute)} does not fit a tensor of rank {array.ndim}")
    return np.ascontiguousarray(np.transpose(array, rule.permute))
