"""The backend entries (repliscope.backends) fill the per-runtime registries and tables; importing them imports no
framework."""

from __future__ import annotations

import subprocess
import sys

from repliscope.backends import backends, candidate_targets, native_runtimes, runtime_entries


def test_every_registered_runtime_comes_from_one_backend_entry() -> None:
    from repliscope.runtimes import NATIVE_RUNTIMES, RUNTIMES
    from repliscope.runtimes.base import RUNTIME_SOURCE_FORMATS

    names = [r.name for r in runtime_entries()]
    assert len(names) == len(set(names)) and sorted(names) == RUNTIMES.names()
    assert native_runtimes() == NATIVE_RUNTIMES and set(NATIVE_RUNTIMES.values()) <= set(RUNTIMES.names())
    assert set(RUNTIME_SOURCE_FORMATS) == set(names) and all(RUNTIME_SOURCE_FORMATS.values())
    assert [b.name for b in backends()] == sorted(b.name for b in backends())


def test_candidates_instruments_and_distributions_follow_the_entries() -> None:
    from repliscope.diff import CANDIDATES, FRAMEWORK_FREE_CANDIDATES
    from repliscope.evaluation.provenance import DISTRIBUTIONS_OF_RUNTIME, SYSTEM_LIBRARY_RUNTIMES
    from repliscope.tracing.instruments import INSTRUMENTS

    assert CANDIDATES.names() == sorted([*candidate_targets(), *FRAMEWORK_FREE_CANDIDATES])
    assert INSTRUMENTS.names() == sorted(r.name for r in runtime_entries() if r.instrument)
    for entry in runtime_entries():  # a runtime records its distributions, or says which system library it is
        assert bool(DISTRIBUTIONS_OF_RUNTIME.get(entry.name)) != bool(SYSTEM_LIBRARY_RUNTIMES.get(entry.name))


def test_importing_the_entries_imports_no_framework() -> None:
    probe = (
        "import sys, repliscope.backends as b, repliscope.runtimes, repliscope.diff, repliscope.tracing.instruments; "
        "b.backends(); print(sorted(m for m in ('torch', 'onnxruntime', 'tensorflow', 'cv2', 'keras') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"
