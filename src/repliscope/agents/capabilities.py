"""What an agent advertises: its runtimes with their exact versions, repliscope's version, CPU, memory, GPUs,
host, and the software stack it runs in. Probed from installed distribution metadata (no ML framework import)."""

from __future__ import annotations

import os
import platform
import socket
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from repliscope.backends import runtime_entries

ADVERTISED_DISTRIBUTIONS: tuple[str, ...] = (
    *dict.fromkeys(d for r in runtime_entries() for d in r.distributions),
    "numpy",
    "pillow",
)
"""Framework, runtime and converter distributions an agent lists (the installed ones) for placement: every
backend runtime's distributions (:mod:`repliscope.backends`), numpy and pillow."""

_MAIN_DISTRIBUTIONS: dict[str, tuple[tuple[str, ...], ...]] = {r.name: r.main for r in runtime_entries() if r.main}
"""Runtimes whose main distribution is not simply the first of ``DISTRIBUTIONS_OF_RUNTIME``: every group must
have one installed member (OpenCV's headless or full build; Keras plus its backend)."""


class AgentCapabilities(BaseModel):
    """One agent (a Dask worker named ``agent_id``). ``runtimes``: registered runtime name -> {distribution:
    version or None} for each runtime whose main distribution is installed; ``distributions``: installed
    :data:`ADVERTISED_DISTRIBUTIONS` -> version; ``installed``: every installed distribution (canonical name ->
    version; what ``--requires`` is checked against); ``cores``: usable cores; ``memory_gib``: physical memory (GiB);
    ``gpus``: GPU names ([] without one); ``stack``: ``repliscope.stacks.current.current_stack()``."""

    agent_id: str
    hostname: str
    pid: int
    repliscope_version: str
    python: str
    runtimes: dict[str, dict[str, str | None]]
    distributions: dict[str, str]
    installed: dict[str, str] = Field(default_factory=dict)
    cpu_model: str
    cpu_flags: list[str]
    cores: int
    memory_gib: float | None
    gpus: list[str] = Field(default_factory=list)
    stack: dict[str, Any] = Field(default_factory=dict)
    started_at: datetime


def default_agent_id() -> str:
    """``<hostname>-<pid>``: unique per process on a host."""
    return f"{socket.gethostname()}-{os.getpid()}"


def available_runtimes() -> dict[str, dict[str, str | None]]:
    """Registered runtime name -> {distribution: installed version or None} (its
    ``provenance.DISTRIBUTIONS_OF_RUNTIME``), for each runtime whose main distribution(s) are installed."""
    from repliscope.evaluation.provenance import distribution_version, runtime_distributions
    from repliscope.runtimes.base import RUNTIMES

    out: dict[str, dict[str, str | None]] = {}
    for name in RUNTIMES.names():
        listed = runtime_distributions(name)
        groups = _MAIN_DISTRIBUTIONS.get(name, ((listed[0],),) if listed else ())
        if groups and all(any(distribution_version(d) is not None for d in group) for group in groups):
            out[name] = {d: distribution_version(d) for d in listed}
    return out


def installed_distributions() -> dict[str, str]:
    """Every installed distribution: canonical name -> version (the first found on ``sys.path`` wins)."""
    from importlib import metadata

    from packaging.utils import canonicalize_name

    out: dict[str, str] = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            out.setdefault(canonicalize_name(name), dist.version)
    return dict(sorted(out.items()))


def _gpus() -> list[str]:
    """NVIDIA GPUs the driver lists (``/proc/driver/nvidia/gpus/*/information``'s model line); [] without one."""
    root = Path("/proc/driver/nvidia/gpus")
    names = []
    for info in sorted(root.glob("*/information")) if root.is_dir() else []:
        try:
            lines = info.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue
        model = next((ln.partition(":")[2].strip() for ln in lines if ln.startswith("Model:")), "")
        names.append(model or info.parent.name)
    return names


def probe_capabilities(agent_id: str | None = None) -> AgentCapabilities:
    """This process's capabilities; ``agent_id`` None -> :func:`default_agent_id`."""
    from repliscope import __version__
    from repliscope.evaluation.provenance import distribution_version, hardware
    from repliscope.stacks.current import current_stack

    hw = hardware(threads_used=1)
    versions = {d: distribution_version(d) for d in ADVERTISED_DISTRIBUTIONS}
    return AgentCapabilities(
        agent_id=agent_id or default_agent_id(),
        hostname=hw["hostname"],
        pid=os.getpid(),
        repliscope_version=__version__,
        python=platform.python_version(),
        runtimes=available_runtimes(),
        distributions={d: v for d, v in versions.items() if v is not None},
        installed=installed_distributions(),
        cpu_model=hw["cpu_model"],
        cpu_flags=list(hw["cpu_flags"]),
        cores=int(hw["usable_cores"]),
        memory_gib=hw["memory_gib"],
        gpus=_gpus(),
        stack=dict(current_stack()),
        started_at=datetime.now(UTC),
    )
