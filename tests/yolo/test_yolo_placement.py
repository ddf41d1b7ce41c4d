"""Placing a darknet manifest's job on agents: its framework is Debian's ``darknet`` package, not a Python
distribution, so no agent is refused for lacking one (the job checks it where it runs: ``check_darknet``); the
runtime and the other constraints still decide."""

from __future__ import annotations

import pytest

from tests.yolo._assets import MANIFEST

pytest.importorskip("distributed")


def test_no_agent_is_refused_for_a_darknet_distribution() -> None:
    from repliscope.agents.capabilities import probe_capabilities
    from repliscope.agents.placement import constraints_for, unmet
    from repliscope.manifest.loader import load_manifest

    caps = probe_capabilities("agent-a")
    assert "darknet" not in caps.installed  # no Python distribution of that name
    loaded = load_manifest(MANIFEST)
    c = constraints_for(loaded, "onnxruntime")
    assert c.framework == "darknet" and unmet(caps, c) == []
    refused = unmet(caps, constraints_for(loaded, "onnxruntime", hardware=("cores>=100000",)))
    assert len(refused) == 1 and refused[0].startswith("hardware cores>=100000 not met (cores is ")
