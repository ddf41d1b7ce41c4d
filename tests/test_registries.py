"""Every registry is complete on first use: in a fresh process, importing only the module that declares it gives the
same names as importing every module of repliscope first (a registry's contents never depend on import history)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

REGISTRIES = {
    "OPS": ("repliscope.ops.base", 40),
    "INSTRUMENTS": ("repliscope.tracing.instruments", 6),
    "TASKS": ("repliscope.tasks.base", 3),
    "METRICS": ("repliscope.metrics.classification", 2),
    "RUNTIMES": ("repliscope.runtimes.base", 9),
    "DATASETS": ("repliscope.datasets.base", 7),
    "LABEL_RULES": ("repliscope.datasets.base", 5),
    "IMPORTERS": ("repliscope.importers.base", 2),
    "PITFALLS": ("repliscope.pitfalls.base", 44),
    "CANDIDATES": ("repliscope.diff.base", 6),
    "SCENARIO_LOOPS": ("repliscope.bench.scenarios", 4),
}
"""Registry -> (the module declaring it, how many entries it has): a lost registration changes the count."""

_EVERYTHING = """
import importlib, json, pkgutil, repliscope
skip = (".cli", ".service", ".agents", ".stacks", ".testkit.plugin", ".migrations")
for info in pkgutil.walk_packages(repliscope.__path__, "repliscope."):
    if not info.name.endswith("__main__") and not any(s in info.name for s in skip):
        importlib.import_module(info.name)
regs = json.loads({regs!r})
print(json.dumps({{k: getattr(importlib.import_module(m), k).names() for k, (m, _) in regs.items()}}))
"""


def _run(code: str) -> dict[str, list[str]]:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    result: dict[str, list[str]] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


@pytest.fixture(scope="module")
def everything() -> dict[str, list[str]]:
    """Each registry's names after importing every module of the core."""
    return _run(_EVERYTHING.format(regs=json.dumps(REGISTRIES)))


@pytest.mark.parametrize("registry", sorted(REGISTRIES))
def test_a_registry_is_complete_in_a_fresh_process(registry: str, everything: dict[str, list[str]]) -> None:
    module, count = REGISTRIES[registry]
    alone = _run(
        f"import importlib, json; print(json.dumps({{'r': importlib.import_module({module!r}).{registry}.names()}}))"
    )["r"]
    assert alone == everything[registry]
    assert len(alone) == count, alone


def test_membership_and_get_see_a_late_provider_entry() -> None:
    """`in` and `get` complete the registry too, not only `names()` (the service checks `name in PITFALLS`)."""
    code = (
        "from repliscope.pitfalls.base import PITFALLS\n"
        "print('yolo_input_608' in PITFALLS, PITFALLS.get('yolo_input_608').name)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["True", "yolo_input_608"]
