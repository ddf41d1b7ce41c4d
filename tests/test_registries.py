"""Every registry is complete on first use: in a fresh process, importing only the module that declares it gives the
same names as importing every module of repliscope first (a registry's contents never depend on import history)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import repliscope

REGISTRIES = {
    "OPS": ("repliscope.ops.base", 40),
    "INSTRUMENTS": ("repliscope.tracing.instruments", 6),
    "TASKS": ("repliscope.tasks.base", 3),
    "METRICS": ("repliscope.metrics.classification", 2),
    "RUNTIMES": ("repliscope.runtimes.base", 9),
    "DATASETS": ("repliscope.datasets.base", 7),
    "LABEL_RULES": ("repliscope.datasets.base", 5),
    "IMPORTERS": ("repliscope.importers.base", 2),
    "CONVERSIONS": ("repliscope.backends", 4),
    "ONNX_MODELS": ("repliscope.backends", 1),
    "PITFALLS": ("repliscope.pitfalls.base", 52),
    "CANDIDATES": ("repliscope.diff.base", 10),
    "CANDIDATE_FORMATS": ("repliscope.diff.layers.candidate_format", 7),
    "SCENARIO_LOOPS": ("repliscope.bench.scenarios", 4),
    "JOB_KINDS": ("repliscope.job_kinds", 4),
    "LOSSES": ("repliscope.diff.loss.contract", 3),
    "LOSS_PITFALLS": ("repliscope.diff.loss.pitfalls", 13),
    "AUGMENTATIONS": ("repliscope.diff.augment.contract", 2),
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


def test_a_user_plugin_added_before_the_first_read_is_kept_with_every_provided_entry() -> None:
    """A plugin registered with ``PITFALLS.add`` before anything read the registry is neither lost nor a duplicate
    when the providers are imported on the first read."""
    code = (
        "from repliscope.pitfalls.base import PITFALLS, Pitfall\n"
        "class Mine(Pitfall):\n"
        "    name = 'my_pitfall'\n"
        "    description = 'a user plugin'\n"
        "    def derive(self, base, ctx):\n"
        "        raise NotImplementedError\n"
        "PITFALLS.add('my_pitfall', Mine)\n"
        "names = PITFALLS.names()\n"
        "print(len(names), 'my_pitfall' in names, 'yolo_input_608' in names, PITFALLS.get('my_pitfall') is Mine)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == [str(REGISTRIES["PITFALLS"][1] + 1), "True", "True", "True"]


def test_a_provider_that_cannot_be_imported_is_an_error_naming_it() -> None:
    from repliscope.errors import RepliscopeError
    from repliscope.registry import Registry

    reg: Registry[object] = Registry("widget", providers=("repliscope._no_such_provider",))
    with pytest.raises(RepliscopeError, match=r"widget registry: importing its provider repliscope\._no_such_provider"):
        reg.names()
    with pytest.raises(RepliscopeError, match=r"repliscope\._no_such_provider"):
        _ = "anything" in reg  # still incomplete: the next read tries again


def test_every_registry_declared_in_the_code_is_checked_here() -> None:
    """A new ``NAME: Registry[...] = Registry(...)`` anywhere in ``repliscope`` must be added to REGISTRIES (with the
    module declaring it), so its completeness on first read is tested too."""
    declared = re.compile(r"^([A-Z_]+): Registry\[.*\] = Registry\(", re.M)
    root = Path(repliscope.__file__).parent
    found = {}
    for path in root.rglob("*.py"):
        module = ".".join(path.relative_to(root.parent).with_suffix("").parts).removesuffix(".__init__")
        for name in declared.findall(path.read_text(encoding="utf-8")):
            found[name] = module
    assert found == {name: module for name, (module, _) in REGISTRIES.items()}


def test_threads_reading_a_registry_first_at_once_all_see_every_entry() -> None:
    """A fresh service's first requests run in threads: none may read PITFALLS half filled while another thread
    imports its providers (each saw 0 names before the registry held a lock)."""
    code = """
import json, threading
from repliscope.pitfalls.base import PITFALLS
barrier = threading.Barrier(4)
seen = []
def read():
    barrier.wait()
    seen.append(["yolo_input_608" in PITFALLS, len(PITFALLS.names())])
threads = [threading.Thread(target=read) for _ in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(json.dumps(seen))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(out.stdout) == [[True, REGISTRIES["PITFALLS"][1]]] * 4
