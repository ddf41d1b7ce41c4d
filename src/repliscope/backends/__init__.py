"""One entry per backend (framework): everything the rest of repliscope needs to know about it, in one place.

A backend is a folder here whose ``__init__.py`` holds ``BACKEND = Backend(...)``: its runtimes (the runner as a
lazy ``"module:attr"`` target, the distributions a record of it carries, its framework-level tracing adapter, its
layer-diff runtime candidate), the manifest frameworks it runs natively, and the re-implementation formats it
compares layer by layer. The registries and tables keyed by runtime or framework (``RUNTIMES``, ``CANDIDATES``,
``INSTRUMENTS``, :data:`~repliscope.runtimes.NATIVE_RUNTIMES`,
:data:`~repliscope.evaluation.provenance.DISTRIBUTIONS_OF_RUNTIME`,
:data:`~repliscope.manifest.frameworks.DISTRIBUTIONS_OF_FRAMEWORK`) are filled from these entries, so adding a
runtime is its code plus one entry. Importing this package imports no ML framework (the entries hold strings).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from repliscope.registry import Registry

CONVERSION_TARGETS: tuple[tuple[str, str, str], ...] = (
    ("pytorch_state_dict", "onnx", "repliscope.runtimes.onnx_export:TORCH_TO_ONNX"),
    ("tflite", "onnx", "repliscope.runtimes.tf2onnx_convert:TFLITE_TO_ONNX"),
    ("tf_frozen_graph", "onnx", "repliscope.runtimes.tf2onnx_convert:FROZEN_GRAPH_TO_ONNX"),
    ("darknet", "onnx", "repliscope.convert.darknet_onnx:DARKNET_TO_ONNX"),
)
"""Every format conversion, in one place: (source format, target format, the
:class:`~repliscope.runtimes.loaders.Conversion` as ``"module:attr"``). A new source format an ONNX runtime runs is
one line here plus its converter; the conversions compose into chains and share one verified cache
(:mod:`repliscope.runtimes.loaders`)."""

CONVERSIONS: Registry[Any] = Registry("conversion")
"""``"<source>-><target>"`` (e.g. ``"pytorch_state_dict->onnx"``) -> its conversion, lazy (no framework imported)."""
for _source, _target, _where in CONVERSION_TARGETS:
    CONVERSIONS.add(f"{_source}->{_target}", _where)

ONNX_MODELS: Registry[Any] = Registry("ONNX model")
"""Source formats that are a model of SEVERAL ONNX graphs plus code between them -> the model class
(``"module:attr"``, a :class:`~repliscope.runtimes.loaders.GraphModel`); the ONNX runtimes run each graph and the
model drives them (MTCNN's cascade of three nets)."""
ONNX_MODELS.add("mtcnn_cascade", "repliscope.runtimes.mtcnn:MtcnnCascade")


def conversion_sources(target: str) -> tuple[str, ...]:
    """The source formats from which ``target`` is reached through registered conversions (chains included), in
    declaration order."""
    reached = [target]
    changed = True
    while changed:
        changed = False
        for source, to, _ in CONVERSION_TARGETS:
            if to in reached and source not in reached:
                reached.append(source)
                changed = True
    return tuple(f for f, *_ in CONVERSION_TARGETS if f in reached and f != target)


ONNX_SOURCES: tuple[str, ...] = ("onnx", *conversion_sources("onnx"), *ONNX_MODELS.names())
"""The source formats the ONNX runtimes run: ONNX itself, every format with a registered conversion to ONNX (run
through its cached conversion, :func:`repliscope.runtimes.loaders.load_as`), and the multi-graph ONNX models."""


@dataclass(frozen=True)
class RuntimeEntry:
    """One runtime: its registry ``name`` (the word in manifests and on the command line), its ``runner`` class
    (``"module:attr"``), the manifest ``source_formats`` it runs, the ``distributions`` whose versions its records
    carry (the framework and the converters it may run a foreign format through), the ``main`` groups of
    distributions of which one member each must be installed for an agent to advertise it (default: the first of
    ``distributions``), ``system_library`` (the framework is a system library, not a distribution: what it is),
    its framework-level tracing ``instrument`` (``"module:attr"``: ``(tracer, runner) -> context manager``) and its
    layer-diff ``candidate`` built from the manifest's model (``"module:attr"``, a
    :class:`~repliscope.diff.base.RuntimeCandidate`)."""

    name: str
    runner: str
    source_formats: tuple[str, ...] = ()
    distributions: tuple[str, ...] = ()
    main: tuple[tuple[str, ...], ...] | None = None
    system_library: str | None = None
    instrument: str | None = None
    candidate: str | None = None


@dataclass(frozen=True)
class Backend:
    """A framework's entry: its ``runtimes``; ``frameworks``: manifest ``framework.name`` -> the runtime that runs
    that format natively (when no runtime is given); ``framework_distributions``: manifest ``framework.name`` ->
    the distribution(s) whose version the manifest's ``framework`` constrains; ``candidates``: re-implementation
    formats (``--candidate-format``) -> their layer-diff candidate class (``"module:attr"``)."""

    name: str
    runtimes: tuple[RuntimeEntry, ...] = ()
    frameworks: Mapping[str, str] = field(default_factory=dict)
    framework_distributions: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    candidates: Mapping[str, str] = field(default_factory=dict)


@cache
def backends() -> tuple[Backend, ...]:
    """Every backend (a subpackage of this package with a ``BACKEND``), in name order."""
    found = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        backend = getattr(module, "BACKEND", None)
        if isinstance(backend, Backend):
            found.append(backend)
    return tuple(found)


def runtime_entries() -> tuple[RuntimeEntry, ...]:
    """Every runtime of every backend."""
    return tuple(r for b in backends() for r in b.runtimes)


def runtime_names() -> list[str]:
    """The runtime names (the words of ``--runtime``), in backend order: what help texts list."""
    return [r.name for r in runtime_entries()]


def native_runtimes() -> dict[str, str]:
    """Manifest ``framework.name`` -> its native runtime, over every backend."""
    return {name: runtime for b in backends() for name, runtime in b.frameworks.items()}


def framework_distributions() -> dict[str, tuple[str, ...]]:
    """Manifest ``framework.name`` -> the distributions its version constraint applies to, over every backend."""
    return {name: dists for b in backends() for name, dists in b.framework_distributions.items()}


def candidate_targets() -> dict[str, str]:
    """Layer-diff candidate name -> ``"module:attr"``: runtime candidates and re-implementation formats."""
    targets = {r.name: r.candidate for r in runtime_entries() if r.candidate is not None}
    for b in backends():
        targets.update(b.candidates)
    return targets
