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

ONNX_SOURCES: tuple[str, ...] = ("onnx", "pytorch_state_dict", "tflite", "tf_frozen_graph", "darknet", "mtcnn_cascade")
"""The source formats the ONNX runtimes run (a torch, TFLite, frozen-graph or darknet source through its cached
conversion, ``runtimes._common.onnx_source``)."""


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
