import json
import os
import platform

import numpy
import PIL
import pytest

from repliscope.evaluation.provenance import THREAD_ENV_VARS, hardware, software_stack


def test_software_stack_keys_and_versions(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    sw = software_stack(["numpy", "surely-not-an-installed-distribution"])
    assert {
        "python",
        "python_implementation",
        "platform",
        "numpy",
        "pillow",
        "pillow_libraries",
        "distributions",
        "threadpools",
        "env",
    } <= set(sw)
    assert sw["numpy"] == numpy.__version__
    assert sw["pillow"] == PIL.__version__
    assert sw["python"] == platform.python_version()
    assert sw["distributions"] == {"numpy": numpy.__version__, "surely-not-an-installed-distribution": None}
    assert set(sw["env"]) == set(THREAD_ENV_VARS)
    assert sw["env"]["OMP_NUM_THREADS"] == "3" and sw["env"]["MKL_NUM_THREADS"] is None
    json.dumps(sw)  # stored as JSON


def test_threadpools_describe_numpys_blas() -> None:
    pools = software_stack()["threadpools"]
    assert pools, "numpy is imported, so its BLAS is loaded"
    for pool in pools:
        assert {"internal_api", "version", "num_threads"} <= set(pool)
        assert pool["num_threads"] >= 1


def test_hardware() -> None:
    hw = hardware(threads_used=2)
    assert {
        "cpu_model",
        "cpu_flags",
        "logical_cores",
        "usable_cores",
        "memory_gib",
        "machine",
        "threads_used",
        "hostname",
    } <= set(hw)
    assert hw["logical_cores"] == os.cpu_count() and hw["logical_cores"] >= 1
    assert 1 <= hw["usable_cores"] <= hw["logical_cores"]
    assert hw["threads_used"] == 2
    assert hw["machine"] == platform.machine()
    assert isinstance(hw["cpu_model"], str) and hw["cpu_model"]
    assert hw["memory_gib"] is None or hw["memory_gib"] > 0
    json.dumps(hw)
