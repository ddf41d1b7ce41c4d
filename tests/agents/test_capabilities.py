"""What an agent advertises, probed in this venv."""

from __future__ import annotations

import os
import socket
from importlib import metadata

import onnxruntime
import pytest
import torch

from repliscope import __version__
from repliscope.agents.capabilities import ADVERTISED_DISTRIBUTIONS, probe_capabilities


def test_capabilities_of_this_venv() -> None:
    caps = probe_capabilities()
    assert caps.agent_id == f"{socket.gethostname()}-{os.getpid()}"
    assert caps.pid == os.getpid() and caps.hostname == socket.gethostname()
    assert caps.repliscope_version == __version__
    assert caps.runtimes["onnxruntime"]["onnxruntime"] == onnxruntime.__version__
    assert caps.runtimes["onnxruntime"]["onnx"] == metadata.version("onnx")
    assert caps.runtimes["torch"] == {"torch": torch.__version__}
    assert caps.distributions["onnxruntime"] == onnxruntime.__version__
    assert caps.distributions["numpy"] == metadata.version("numpy")
    assert set(caps.distributions) <= set(ADVERTISED_DISTRIBUTIONS)
    assert caps.installed["dask"] == metadata.version("dask")
    assert caps.cores == len(os.sched_getaffinity(0))
    assert caps.gpus == []
    assert caps.stack["key"] == "current"
    assert caps.memory_gib is not None and caps.memory_gib > 0


def test_a_runtime_is_listed_only_with_its_main_distribution(monkeypatch: pytest.MonkeyPatch) -> None:
    from repliscope.evaluation import provenance

    real = provenance.distribution_version
    monkeypatch.setattr(
        provenance, "distribution_version", lambda name: None if name in ("torch", "jax") else real(name)
    )
    caps = probe_capabilities("agent-x")
    assert caps.agent_id == "agent-x"
    assert "torch" not in caps.runtimes and "keras_jax" not in caps.runtimes
    assert "torch" not in caps.distributions
    assert caps.runtimes["onnxruntime"]["onnxruntime"] == onnxruntime.__version__
