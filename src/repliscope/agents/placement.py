"""Placement: which agents may run a job. A job's :class:`Constraints` (the manifest's framework and its PEP 440
version constraint, the runtime, the architecture's package requirement and ``package://`` source distribution,
extra PEP 508 ``requires``, hardware selectors, a stack key) are checked against each agent's advertised
capabilities; :func:`unmet` gives the human reasons an agent does not qualify."""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from repliscope.agents.capabilities import AgentCapabilities
from repliscope.errors import RepliscopeError

HARDWARE_KEYS = ("agent_id", "cores", "cpu_flags", "cpu_model", "gpus", "hostname", "memory_gib")
"""Keys of a hardware selector (``gpus`` compares the GPU count, ``cpu_flags`` tests membership)."""
_NUMERIC = ("cores", "memory_gib", "gpus")
_OPS = (">=", "<=", "~=", "=")


@dataclass(frozen=True)
class Selector:
    """One parsed hardware selector ``KEY OP VALUE`` (OP one of ``=``, ``>=``, ``<=``, ``~=``)."""

    key: str
    op: str
    value: str
    text: str


@dataclass(frozen=True)
class Constraints:
    """What an agent must offer to run a job: ``framework`` (manifest ``framework.name``) within
    ``framework_version`` (PEP 440), ``runtime`` available, every ``requires`` (PEP 508, ``NAME[SPECIFIER]``)
    installed, every ``hardware`` selector met, and (when given) the stack ``stack`` (its key)."""

    framework: str | None = None
    framework_version: str | None = None
    runtime: str | None = None
    requires: tuple[str, ...] = ()
    hardware: tuple[str, ...] = ()
    stack: str | None = None

    def describe(self) -> str:
        """One line: ``framework torch>=2.1,<3, runtime torch, requires ..., hardware ..., stack ...``."""
        parts = []
        if self.framework:
            parts.append(f"framework {self.framework}{self.framework_version or ''}")
        if self.runtime:
            parts.append(f"runtime {self.runtime}")
        if self.requires:
            parts.append(f"requires {', '.join(self.requires)}")
        if self.hardware:
            parts.append(f"hardware {', '.join(self.hardware)}")
        if self.stack:
            parts.append(f"stack {self.stack}")
        return "; ".join(parts) or "none"


class NoAgentMatches(RepliscopeError):
    """No live agent meets a job's constraints; ``reasons``: agent id -> why it does not qualify."""

    def __init__(self, constraints: Constraints, reasons: Mapping[str, Sequence[str]]) -> None:
        self.constraints = constraints
        self.reasons = {k: list(v) for k, v in reasons.items()}
        if not self.reasons:
            text = (
                "no live agent: start one with `repliscope agent --scheduler ADDRESS` (constraints: "
                f"{constraints.describe()})"
            )
        else:
            listed = "; ".join(f"{agent}: {', '.join(why)}" for agent, why in sorted(self.reasons.items()))
            text = (
                f"no live agent meets the job's constraints ({constraints.describe()}); "
                f"{len(self.reasons)} agent(s): {listed}"
            )
        super().__init__(text)


class InvalidPlacementOption(RepliscopeError):
    """A job's placement option (``requires`` or ``hardware``, named by ``option``) that does not parse."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(message)
        self.option = option


def check_placement_options(requires: Sequence[str] | None, hardware: Sequence[str] | None) -> None:
    """Every ``requires`` entry parses as a requirement and every ``hardware`` entry as a selector; else
    :class:`InvalidPlacementOption` naming the option, with the parser's message."""
    for option, texts, parse in (("requires", requires, parse_requirement), ("hardware", hardware, parse_selector)):
        for text in texts or ():
            try:
                parse(text)
            except RepliscopeError as exc:
                raise InvalidPlacementOption(option, str(exc)) from None


def parse_requirement(text: str) -> Requirement:
    """``NAME[SPECIFIER]`` (PEP 508, no URL, extras or markers) -> Requirement; else a RepliscopeError."""
    try:
        req = Requirement(text)
    except InvalidRequirement as exc:
        raise RepliscopeError(
            f"--requires {text!r} is not a valid requirement (e.g. 'onnxruntime>=1.20'): {exc}"
        ) from exc
    if req.url or req.extras or req.marker:
        raise RepliscopeError(
            f"--requires {text!r}: give NAME[SPECIFIER] only (no URL, extras or markers), e.g. 'onnxruntime>=1.20'"
        )
    return req


def parse_selector(text: str) -> Selector:
    """``KEY=VALUE``, ``KEY>=N``, ``KEY<=N`` or ``KEY~=SUBSTRING`` -> Selector; an unknown key, an operator the
    key does not take or a non-number for a numeric key is a RepliscopeError listing what is allowed."""
    for op in _OPS:
        key, sep, value = text.partition(op)
        if sep:
            break
    else:
        raise RepliscopeError(
            f"hardware selector {text!r} has no operator (allowed forms: KEY=VALUE, KEY>=N, "
            f"KEY<=N, KEY~=SUBSTRING with KEY one of {', '.join(HARDWARE_KEYS)})"
        )
    key, value = key.strip(), value.strip()
    if key not in HARDWARE_KEYS:
        raise RepliscopeError(f"hardware selector {text!r}: unknown key '{key}' (allowed: {', '.join(HARDWARE_KEYS)})")
    if not value:
        raise RepliscopeError(f"hardware selector {text!r}: no value after '{op}'")
    allowed = ("=", ">=", "<=") if key in _NUMERIC else ("=", "~=")
    if op not in allowed:
        raise RepliscopeError(f"hardware selector {text!r}: key '{key}' takes {', '.join(allowed)}, not '{op}'")
    if key in _NUMERIC:
        try:
            float(value)
        except ValueError:
            raise RepliscopeError(f"hardware selector {text!r}: '{key}' compares numbers, got {value!r}") from None
    return Selector(key, op, value, text)


def constraints_for(
    loaded: Any, runtime: str, requires: Sequence[str] = (), hardware: Sequence[str] = (), stack: str | None = None
) -> Constraints:
    """The constraints of running ``loaded`` (a LoadedManifest) on ``runtime``: its framework and version
    constraint, its ``architecture.package`` requirement and the distribution of a ``package://`` source, plus
    ``requires`` and ``hardware`` (validated now: a bad one is an error before anything is submitted)."""
    from repliscope.runtimes.base import RUNTIMES

    if runtime not in RUNTIMES:
        raise RepliscopeError(f"unknown runtime '{runtime}' (allowed: {', '.join(RUNTIMES.names())})")
    manifest = loaded.manifest
    derived: list[str] = []
    architecture = getattr(manifest, "architecture", None)
    if architecture is not None and architecture.package:
        derived.append(architecture.package)
    uri = manifest.source.uri
    if uri.startswith("package://"):
        derived.append(uri[len("package://") :].split("/", 1)[0])
    for text in requires:
        parse_requirement(text)
    for text in hardware:
        parse_selector(text)
    all_requires = tuple(dict.fromkeys([*derived, *requires]))
    return Constraints(
        framework=manifest.framework.name,
        framework_version=manifest.framework.version,
        runtime=runtime,
        requires=all_requires,
        hardware=tuple(hardware),
        stack=stack,
    )


def _installed(caps: AgentCapabilities, name: str) -> str | None:
    wanted = canonicalize_name(name)
    for dist, version in caps.installed.items():
        if canonicalize_name(dist) == wanted:
            return version
    return None


def _satisfies(version: str, specifier: Any) -> bool:
    try:
        public = Version(version).public
    except InvalidVersion:
        return False
    return bool(specifier.contains(public, prereleases=True))


def _framework_reasons(caps: AgentCapabilities, c: Constraints) -> list[str]:
    from packaging.specifiers import SpecifierSet

    from repliscope.manifest.frameworks import DISTRIBUTIONS_OF_FRAMEWORK

    assert c.framework is not None
    if c.framework == "darknet":  # a Debian package, not a distribution: checked where the job runs (check_darknet)
        return []
    candidates = DISTRIBUTIONS_OF_FRAMEWORK.get(c.framework, (c.framework,))
    installed = [(d, v) for d in candidates if (v := _installed(caps, d)) is not None]
    want = c.framework_version or ""
    if not installed:
        return [f"framework '{c.framework}' needs {candidates[0]}{want}, which is not installed"]
    dist, version = installed[0]
    if want and not _satisfies(version, SpecifierSet(want)):
        return [f"framework '{c.framework}' needs {dist}{want}, but {dist} {version} is installed"]
    return []


def _number(caps: AgentCapabilities, key: str) -> float | None:
    if key == "gpus":
        return float(len(caps.gpus))
    value = getattr(caps, key)
    return None if value is None else float(value)


_COMPARE: dict[str, Callable[[float, float], bool]] = {"=": operator.eq, ">=": operator.ge, "<=": operator.le}


def selector_met(caps: AgentCapabilities, sel: Selector) -> bool:
    """Whether ``caps`` meets ``sel`` (``~=``: case-insensitive substring; ``cpu_flags``: membership)."""
    if sel.key in _NUMERIC:
        have = _number(caps, sel.key)
        return have is not None and _COMPARE[sel.op](have, float(sel.value))
    if sel.key == "cpu_flags":
        if sel.op == "=":
            return sel.value in caps.cpu_flags
        return any(sel.value.lower() in f.lower() for f in caps.cpu_flags)
    have_text = str(getattr(caps, sel.key))
    return have_text == sel.value if sel.op == "=" else sel.value.lower() in have_text.lower()


def _selector_reason(caps: AgentCapabilities, sel: Selector) -> str:
    if sel.key == "gpus":
        have: Any = len(caps.gpus)
    elif sel.key == "cpu_flags":
        have = " ".join(caps.cpu_flags) or "none"
    else:
        have = getattr(caps, sel.key)
    return f"hardware {sel.text} not met ({sel.key} is {have})"


def unmet(caps: AgentCapabilities, c: Constraints) -> list[str]:
    """Why the agent of ``caps`` may not run a job of constraints ``c``: human reasons, [] when it qualifies."""
    reasons: list[str] = []
    if c.framework is not None:
        reasons += _framework_reasons(caps, c)
    if c.runtime is not None and c.runtime not in caps.runtimes:
        reasons.append(
            f"runtime '{c.runtime}' is not available (available: {', '.join(sorted(caps.runtimes)) or 'none'})"
        )
    for text in c.requires:
        req = parse_requirement(text)
        version = _installed(caps, req.name)
        if version is None:
            reasons.append(f"requires {text}: {req.name} is not installed")
        elif req.specifier and not _satisfies(version, req.specifier):
            reasons.append(f"requires {text}: {req.name} {version} is installed")
    for text in c.hardware:
        sel = parse_selector(text)
        if not selector_met(caps, sel):
            reasons.append(_selector_reason(caps, sel))
    if c.stack is not None and caps.stack.get("key") != c.stack:
        reasons.append(f"runs stack '{caps.stack.get('key')}', not '{c.stack}'")
    return reasons


def qualifying_agents(cluster: Any, constraints: Constraints) -> tuple[list[Any], dict[str, list[str]]]:
    """The live agents (``AgentInfo``) of ``cluster`` (an ``agents.cluster.Cluster``) meeting ``constraints`` and,
    for the other live ones, agent id -> reasons."""
    ok, reasons = [], {}
    for agent in cluster.agents():
        if not agent.alive:
            continue
        why = unmet(agent.capabilities, constraints)
        if why:
            reasons[agent.capabilities.agent_id] = why
        else:
            ok.append(agent)
    return ok, reasons


def place(cluster: Any, constraints: Constraints) -> list[Any]:
    """The live agents of ``cluster`` that qualify; none -> :class:`NoAgentMatches` naming every live agent's
    reasons (or that there is no live agent)."""
    ok, reasons = qualifying_agents(cluster, constraints)
    if not ok:
        raise NoAgentMatches(constraints, reasons)
    return ok
