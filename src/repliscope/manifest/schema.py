"""The model manifest schema (pydantic). Unknown keys are errors; nothing falls back to a hidden default.

Op entries of ``preprocess``/``postprocess`` are kept as raw mappings here and validated against each op's
own parameter model by :mod:`repliscope.ops.pipeline` (the op registry is the single source of op names).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeAlias

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

if TYPE_CHECKING:
    from repliscope.tasks.base import MetricSpec, Task

Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]

# the official SemVer 2.0.0 regular expression (semver.org): no leading zeros, optional -prerelease +build
_SEMVER = re.compile(
    r"^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)"
    r"(?:-((?:0|[1-9][0-9]*|[0-9]*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9][0-9]*|[0-9]*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$"
)


def check_semver(v: str) -> None:
    """Raise ValueError unless ``v`` is a SemVer 2.0.0 version (``1.0.0``, ``2.1.0-rc.1+build.5``)."""
    if _SEMVER.fullmatch(v):
        return
    if v[:1] in ("v", "V") and _SEMVER.fullmatch(v[1:]):
        raise ValueError(f"{v!r} is not a semantic version: drop the '{v[0]}', write {v[1:]}")
    core = re.split(r"[-+]", v, maxsplit=1)[0].split(".")
    if len(core) != 3 or not all(re.fullmatch("[0-9]+", p) for p in core):
        raise ValueError(f"semantic version needs MAJOR.MINOR.PATCH (e.g. 1.0.0), got {v!r}")
    zeros = [p for p in core if len(p) > 1 and p.startswith("0")]
    if zeros:
        fixed = ".".join(str(int(p)) for p in core)
        raise ValueError(f"{v!r}: leading zeros are not allowed in a semantic version ({zeros[0]!r}); write {fixed}")
    raise ValueError(
        f"{v!r} is not a semantic version: pre-release/build parts are dot-separated "
        "[0-9A-Za-z-] identifiers, numeric ones without leading zeros (e.g. 1.0.0-rc.1+build.5)"
    )


def _task_names() -> list[str]:
    from repliscope.tasks.base import TASKS

    return TASKS.names()


def _output_kinds() -> list[str]:
    from repliscope.tasks.base import all_tasks

    return list(dict.fromkeys(k for t in all_tasks() for k in t.output_kinds))


def _claim_metrics() -> list[str]:
    from repliscope.tasks.base import all_tasks

    return list(dict.fromkeys([*(m for t in all_tasks() for m in t.claim_metrics), *PERFORMANCE_METRICS]))


def task_class(name: str) -> type[Task]:
    """The task class registered as ``name`` (a validated manifest's ``task``)."""
    from repliscope.tasks.base import TASKS

    return TASKS.get(name)


def claim_metric_spec(metric: str) -> MetricSpec | None:
    """The :class:`~repliscope.tasks.base.MetricSpec` of an accuracy claim metric (the task that names it
    first, in name order), None for a performance metric."""
    from repliscope.tasks.base import all_tasks

    return next((spec for t in all_tasks() if (spec := t.metric_spec(metric)) is not None), None)


def _one_of(allowed: Callable[[], list[str]]) -> Callable[[str], str]:
    """A validator: the string must be one of ``allowed()`` (asked at validation time, so a registry's later
    entries count), refused as pydantic's ``literal_error`` (the loader turns it into an allowed list)."""

    def check(value: str) -> str:
        names = allowed()
        if value not in names:
            shown = [repr(n) for n in names]
            expected = f"{', '.join(shown[:-1])} or {shown[-1]}" if len(shown) > 1 else "".join(shown)
            raise PydanticCustomError("literal_error", "Input should be {expected}", {"expected": expected})
        return value

    return check


def _enum_of(allowed: Callable[[], list[str]]) -> Callable[[dict[str, Any]], None]:
    """The JSON Schema of a :func:`_one_of` string: an ``enum`` of the values registered when it is generated."""

    def enum(schema: dict[str, Any]) -> None:
        rest = dict(schema)
        schema.clear()
        schema.update({"enum": allowed(), **rest})

    return enum


TaskName: TypeAlias = Annotated[
    str, AfterValidator(_one_of(_task_names)), Field(json_schema_extra=_enum_of(_task_names))
]
"""A manifest's ``task``: a name of the task registry (:data:`repliscope.tasks.base.TASKS`)."""
OutputKind: TypeAlias = Annotated[
    str, AfterValidator(_one_of(_output_kinds)), Field(json_schema_extra=_enum_of(_output_kinds))
]
"""An ``outputs[].kind``: one of the registered tasks' output kinds (the manifest's task narrows it)."""
ClaimMetric: TypeAlias = Annotated[
    str, AfterValidator(_one_of(_claim_metrics)), Field(json_schema_extra=_enum_of(_claim_metrics))
]
"""A claim's ``metric``: a registered task's claim metric or a performance metric."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FrameworkSpec(_Strict):
    """The model's native framework and the versions it is known to work with (PEP 440 specifier)."""

    name: Literal["torch", "onnx", "tflite", "tensorflow", "keras", "darknet"]
    version: str

    @field_validator("version")
    @classmethod
    def _specifier(cls, v: str) -> str:
        try:
            SpecifierSet(v)
        except InvalidSpecifier as exc:
            raise ValueError(f"not a PEP 440 version constraint: {v!r} (e.g. '>=2.1,<3')") from exc
        return v


class ConfigFileSpec(_Strict):
    """A file the model needs beside its source (a Darknet ``.cfg``): ``uri`` in the source's forms + ``sha256``."""

    uri: str
    sha256: Sha256


class SourceSpec(_Strict):
    """Where the model file comes from: ``package://DIST/path/in/dist``, a path relative to the manifest,
    or ``https://...`` (downloaded to the cache only when asked). ``sha256`` is always required."""

    uri: str
    sha256: Sha256
    format: Literal[
        "pytorch_state_dict", "onnx", "tflite", "tf_frozen_graph", "tf_saved_model", "keras", "mtcnn_cascade", "darknet"
    ]
    config: ConfigFileSpec | None = None
    """``darknet`` only, and required there: the network's ``.cfg`` (the ``uri`` is the ``.weights``), same forms
    and sha256 rule as the source."""

    @model_validator(mode="after")
    def _config_for_darknet(self) -> SourceSpec:
        if self.format == "darknet" and self.config is None:
            raise ValueError("source.format 'darknet' is a .weights file: give 'config: {uri, sha256}' (the .cfg)")
        if self.format != "darknet" and self.config is not None:
            raise ValueError(f"'config' is the .cfg of a darknet source; source.format '{self.format}' has none")
        return self


class ArchitectureSpec(_Strict):
    """For weight-only formats: ``factory`` is ``module:attr`` (attr may be dotted, e.g.
    ``EfficientNet.from_name``), called with ``kwargs``.

    Where the module comes from (at least one): ``package``, a requirement checked as installed (the module is
    imported from it), and/or ``path``, a folder relative to the manifest's folder (same path policy as
    ``source``) holding the module as ``<path>/<module as folders>.py`` (or a package ``__init__.py``), e.g.
    ``path: models`` + ``factory: tiny_resnet:build`` -> ``models/tiny_resnet.py``. With ``path`` the module
    is imported from that folder only (``package`` then names what the module itself needs, e.g. ``torch``), and
    its file's sha256 is recorded in the run's provenance (and pinned when ``sha256`` is given)."""

    factory: Annotated[str, Field(pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")]
    package: str | None = None
    path: str | None = None
    sha256: Sha256 | None = None
    kwargs: dict[str, Any]

    @model_validator(mode="after")
    def _module_origin(self) -> ArchitectureSpec:
        if self.package is None and self.path is None:
            raise ValueError(
                "give 'package' (an installed distribution providing the factory's module) or "
                "'path' (a folder beside the manifest holding it)"
            )
        if self.sha256 is not None and self.path is None:
            raise ValueError("'sha256' pins a local module file: it needs 'path'")
        return self


class TensorSpec(_Strict):
    """A model input/output. ``shape`` uses -1 for the dynamic batch axis."""

    name: str
    shape: list[int]
    dtype: Literal["float32", "float16", "uint8", "int8", "int64"]
    layout: Literal["NCHW", "NHWC", "NC", "N", "NK", "NKC", "NHW"]
    """Inputs: NCHW | NHWC. Outputs: NC (classification scores), N (one value per sample, e.g. a detection
    count), NK (one value per box/anchor), NKC (a vector per box/anchor, e.g. 4 coordinates); segmentation maps:
    NHWC | NCHW (a score per class and pixel) or NHW (one map)."""


class OutputSpec(TensorSpec):
    kind: OutputKind


class LabelsSpec(_Strict):
    """Class names: ``builtin:imagenet-1k`` or a source URI (as for ``source``) of a text file with one
    class per line (``name`` or ``wnid<TAB>name``)."""

    source: str
    sha256: Sha256 | None = None
    num_classes: int


class DatasetRef(_Strict):
    name: str
    split: str


PERFORMANCE_METRICS = ("latency_p90_ms", "latency_p99_ms", "throughput")
"""Performance claims: latency percentiles in milliseconds, throughput in samples per second."""
SCENARIOS = ("single-stream", "multi-stream", "server", "offline")
"""LoadGen's scenarios (``repliscope bench --scenario``)."""


class ClaimHardware(_Strict):
    """What a performance claim was measured on: the CPU model as ``/proc/cpuinfo``'s ``model name`` prints it
    and the runtime's intra-op threads."""

    cpu_model: str
    threads: Annotated[int, Field(ge=1)]


class ClaimSpec(_Strict):
    """A published claim. Accuracy (``top1``/``top5``): ``value`` in percent on ``dataset``, e.g. top-1 75.1 % on
    ImageNet-1k val. Performance (``latency_p90_ms``/``latency_p99_ms`` in ms, ``throughput`` in samples/s):
    ``scenario``, ``batch_size``, ``hardware`` and ``runtime`` (the runtime registry name it was measured with:
    ``torch``, ``onnxruntime``, ``opencv_dnn``) are required (a latency means nothing without them) and
    ``dataset`` is the data it was measured on; accuracy claims must not set them."""

    metric: ClaimMetric
    value: Annotated[float, Field(ge=0)]
    dataset: DatasetRef
    source: str
    scenario: Literal["single-stream", "multi-stream", "server", "offline"] | None = None
    batch_size: Annotated[int, Field(ge=1)] | None = None
    hardware: ClaimHardware | None = None
    runtime: str | None = None

    @property
    def is_performance(self) -> bool:
        return self.metric in PERFORMANCE_METRICS

    @model_validator(mode="after")
    def _fields_of_the_metric(self) -> ClaimSpec:
        extra = {
            "scenario": self.scenario,
            "batch_size": self.batch_size,
            "hardware": self.hardware,
            "runtime": self.runtime,
        }
        if not self.is_performance:
            spec = claim_metric_spec(self.metric)
            problem = spec.claim_error(self.value) if spec is not None else None
            if problem is not None:
                raise ValueError(problem)
            given = [k for k, v in extra.items() if v is not None]
            if given:
                raise ValueError(
                    f"{', '.join(given)} only belong to performance claims "
                    f"({', '.join(PERFORMANCE_METRICS)}), not to {self.metric}"
                )
            return self
        missing = [k for k, v in extra.items() if v is None]
        if missing:
            raise ValueError(
                f"a {self.metric} claim needs {', '.join(missing)} (scenario: "
                f"{' | '.join(SCENARIOS)}; batch_size; hardware: {{cpu_model, threads}}; runtime: the "
                "runtime it was measured with, e.g. onnxruntime)"
            )
        if self.value <= 0:
            raise ValueError(f"{self.metric} must be above 0, got {self.value}")
        return self


class DatasetsSpec(_Strict):
    trained_on: list[DatasetRef]
    evaluated_on: list[DatasetRef]


class ImportedFrom(_Strict):
    """Where an imported manifest came from (``repliscope manifest import``): the original file, its sha256,
    the importer (registry name) and the repliscope version that translated it."""

    format: str
    file: str
    sha256: Sha256
    importer_version: str
    reproduces: str | None = None
    """The foreign tool release whose behaviour the translation reproduces (e.g. ``timm==1.0.31``), when the
    importer is version-specific."""


class ProvenanceSpec(_Strict):
    imported_from: ImportedFrom | None = None


class Manifest(_Strict):
    name: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9._-]*$")]
    version: str
    task: TaskName
    """The task registry's name (:mod:`repliscope.tasks`): it decides the allowed post-processing, the records,
    metrics and claims."""
    description: str
    license: str
    framework: FrameworkSpec
    source: SourceSpec
    architecture: ArchitectureSpec | None = None
    inputs: Annotated[list[TensorSpec], Field(min_length=1, max_length=1)]
    preprocess: Annotated[list[dict[str, Any]], Field(min_length=1)]
    outputs: Annotated[list[OutputSpec], Field(min_length=1, max_length=16)]
    """Classification: exactly one (logits or probabilities). Detection: every output the postprocess reads."""
    postprocess: list[dict[str, Any]]
    labels: LabelsSpec
    claims: list[ClaimSpec]
    datasets: DatasetsSpec
    provenance: ProvenanceSpec | None = None
    """Optional: set by importers (``provenance.imported_from``)."""

    @field_validator("version")
    @classmethod
    def _semver(cls, v: str) -> str:
        check_semver(v)
        return v

    @model_validator(mode="after")
    def _outputs_of_the_task(self) -> Manifest:
        task = task_class(self.task)
        kinds = task.output_kinds
        if task.class_scores and len(self.outputs) != 1:
            raise ValueError(f"{self.task} takes exactly one output ({' or '.join(kinds)}), got {len(self.outputs)}")
        wrong = [f"outputs[{i}].kind '{o.kind}'" for i, o in enumerate(self.outputs) if o.kind not in kinds]
        if wrong:
            raise ValueError(f"{', '.join(wrong)} is not an output of {self.task} (allowed: {', '.join(kinds)})")
        names = [o.name for o in self.outputs]
        if len(set(names)) != len(names):
            raise ValueError(f"output names must be unique, got {names}")
        accuracy = [c.metric for c in self.claims if not c.is_performance]
        allowed = task.claim_metrics
        bad = [m for m in accuracy if m not in allowed]
        if bad:
            raise ValueError(
                f"claims on {', '.join(bad)} do not belong to {self.task} (allowed: "
                f"{', '.join(allowed + PERFORMANCE_METRICS)})"
            )
        return self

    @model_validator(mode="after")
    def _architecture_matches_format(self) -> Manifest:
        if self.source.format == "pytorch_state_dict" and self.architecture is None:
            raise ValueError("source.format 'pytorch_state_dict' holds weights only: 'architecture' is required")
        if self.source.format != "pytorch_state_dict" and self.architecture is not None:
            raise ValueError(f"source.format '{self.source.format}' carries its own graph: remove 'architecture'")
        return self
