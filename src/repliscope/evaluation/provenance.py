"""Software and hardware provenance for the evaluation record: what ran, where, with how many threads.

``software_stack`` sees only the BLAS/OpenMP libraries loaded so far, so call it after the runtime loaded
its model (torch and onnxruntime bring their own OpenMP/MKL).
"""

from __future__ import annotations

import functools
import os
import platform
import socket
import sys
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from repliscope.manifest.schema import Manifest

from repliscope.backends import runtime_entries

THREAD_ENV_VARS = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "OPENBLAS_CORETYPE",
    "MKL_CBWR",
    "MKL_ENABLE_INSTRUCTIONS",
    "ONEDNN_MAX_CPU_ISA",
    "ONEDNN_DEFAULT_FPMATH_MODE",
)
"""Environment variables that change thread counts or the numeric kernels chosen; unset ones are None."""

DISTRIBUTIONS_OF_RUNTIME: dict[str, tuple[str, ...]] = {
    r.name: r.distributions for r in runtime_entries() if r.distributions
}
"""Per runtime registry name, the distributions whose versions a record of it should carry (the framework, and
the converters a runtime may run a foreign format through: tf2onnx for .tflite / frozen graphs on ONNX runtimes);
from the backends' entries (:mod:`repliscope.backends`)."""

SYSTEM_LIBRARY_RUNTIMES: dict[str, str] = {r.name: r.system_library for r in runtime_entries() if r.system_library}
"""Runtimes whose framework is a system library, not a Python distribution: the record carries its version as the
runner's framework version (e.g. the Debian package version), so they have no entry in
:data:`DISTRIBUTIONS_OF_RUNTIME`."""


def runtime_distributions(runtime: str) -> tuple[str, ...]:
    """The distributions to record for ``runtime`` (see :data:`DISTRIBUTIONS_OF_RUNTIME`; () for another name)."""
    return DISTRIBUTIONS_OF_RUNTIME.get(runtime, ())


CORE_DISTRIBUTIONS = ("numpy", "scipy", "pydantic")
"""Recorded for every run: the numerics of the metrics and the manifest's validation."""

EXPORT_DISTRIBUTIONS: dict[tuple[str, str], tuple[str, ...]] = {
    ("torch", "onnxruntime"): ("onnxscript",),
    ("torch", "opencv_dnn"): ("onnxscript",),
}
"""(manifest framework, runtime) -> the converters that run in between (a torch model reaches the ONNX
runtimes through ``torch.onnx``, which uses onnxscript)."""


def manifest_distributions(manifest: Manifest, runtime: str, extra: Iterable[str] = ()) -> tuple[str, ...]:
    """The distributions whose versions a record of ``manifest`` run on ``runtime`` carries, derived from the
    manifest: :data:`CORE_DISTRIBUTIONS`, its framework's (``framework.name``), the converters between framework
    and runtime (:data:`EXPORT_DISTRIBUTIONS`), the runtime's (:func:`runtime_distributions`), the installed
    distribution its ``source`` is read from (``package://DIST/...``), its ``architecture.package`` requirement
    and the release an importer reproduces (``provenance.imported_from.reproduces``); then ``extra``. In that
    order, each once (names compared as PEP 503 normalised)."""
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    from repliscope.manifest.frameworks import DISTRIBUTIONS_OF_FRAMEWORK

    framework = manifest.framework.name
    names = [
        *CORE_DISTRIBUTIONS,
        *DISTRIBUTIONS_OF_FRAMEWORK.get(framework, ()),
        *EXPORT_DISTRIBUTIONS.get((framework, runtime), ()),
        *runtime_distributions(runtime),
    ]
    if manifest.source.uri.startswith("package://"):
        names.append(manifest.source.uri.removeprefix("package://").split("/", 1)[0])
    requirements = [manifest.architecture.package if manifest.architecture else None]
    imported = manifest.provenance.imported_from if manifest.provenance else None
    requirements.append(imported.reproduces if imported else None)
    for requirement in requirements:
        try:
            names.append(Requirement(requirement).name) if requirement else None
        except InvalidRequirement:  # the manifest check refuses it before a run; a record never fails on it
            continue
    names.extend(extra)
    seen: set[str] = set()
    out = []
    for name in names:
        if canonicalize_name(name) not in seen:
            seen.add(canonicalize_name(name))
            out.append(name)
    return tuple(out)


_THREADPOOL_KEYS = (
    "user_api",
    "internal_api",
    "prefix",
    "version",
    "num_threads",
    "threading_layer",
    "architecture",
    "filepath",
)
_CPU_FLAGS = (
    "sse4_2",
    "avx",
    "avx2",
    "fma",
    "f16c",
    "avx512f",
    "avx512_vnni",
    "avx512_bf16",
    "amx_tile",
    "asimd",
    "sve",
)
"""ISA extensions that decide which kernels BLAS / oneDNN / onnxruntime dispatch to."""


def distribution_version(name: str) -> str | None:
    """Installed version of a distribution, or None when it is not installed."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def software_stack(extra_distributions: Iterable[str] = ()) -> dict[str, Any]:
    """Python, platform, numpy, Pillow (and its JPEG/zlib libraries), the given distributions' versions,
    loaded BLAS/OpenMP libraries (threadpoolctl), the thread-related environment variables and the software
    stack this process runs in (:func:`repliscope.records.stack.current_stack`: key, spec, lock sha256)."""
    import numpy
    import PIL
    from PIL import features
    from threadpoolctl import threadpool_info

    from repliscope.records.stack import current_stack

    return {
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "numpy": numpy.__version__,
        "pillow": PIL.__version__,
        "pillow_libraries": {
            "libjpeg": features.version("jpg"),
            "libjpeg_turbo": features.version("libjpeg_turbo"),
            "zlib": features.version("zlib"),
        },
        "distributions": {name: distribution_version(name) for name in extra_distributions},
        "threadpools": [{k: lib.get(k) for k in _THREADPOOL_KEYS if k in lib} for lib in threadpool_info()],
        "env": {var: os.environ.get(var) for var in THREAD_ENV_VARS},
        "stack": dict(current_stack()),
    }


@functools.cache
def _cpuinfo() -> dict[str, str]:
    """First processor block of /proc/cpuinfo as a dict (empty when unavailable)."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    info: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if info:
                break
            continue
        key, sep, value = line.partition(":")
        if sep:
            info.setdefault(key.strip(), value.strip())
    return info


def usable_cores() -> int:
    """Cores this process may run on (affinity), at least 1."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def _memory_gib() -> float | None:
    try:
        return round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 2)
    except (ValueError, OSError, AttributeError):
        return None


def _cgroup_cpu_limit() -> float | None:
    """CPUs allowed by a cgroup v2 quota (containers), None when unlimited or unknown."""
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
    except (OSError, ValueError):
        return None
    return None if quota == "max" else round(int(quota) / int(period), 2)


def cpu_model() -> str:
    """The CPU model name (``/proc/cpuinfo``, else :func:`platform.processor`), ``unknown`` when neither says."""
    return _cpuinfo().get("model name") or platform.processor() or "unknown"


def hardware(threads_used: int) -> dict[str, Any]:
    """CPU model and ISA flags, logical / usable cores, memory, architecture, threads used, host name."""
    cpu = _cpuinfo()
    flags = set(cpu.get("flags", cpu.get("Features", "")).split())
    return {
        "cpu_model": cpu_model(),
        "cpu_flags": [f for f in _CPU_FLAGS if f in flags],
        "logical_cores": os.cpu_count(),
        "usable_cores": usable_cores(),
        "cgroup_cpu_limit": _cgroup_cpu_limit(),
        "memory_gib": _memory_gib(),
        "machine": platform.machine(),
        "byteorder": sys.byteorder,
        "threads_used": threads_used,
        "hostname": socket.gethostname(),
    }
