"""Issue 20 item 16: a ``stack create`` killed mid-build left its half-built folder under the stack's key. Now a
stack is built in ``.building-<key>-<pid>`` and renamed when complete: killed (SIGKILL) mid-install, no folder of
its key exists, the stack is not listed, and the next create of that key removes the leftover and succeeds."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from repliscope.stacks import store
from repliscope.stacks.store import create_stack, list_stacks, stack_key

RESOLVED = {"numpy": "2.4.6"}

CHILD = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from repliscope.stacks import store
    store.resolve = lambda spec, root, on_line=None: {"numpy": "2.4.6"}
    def run_pip(args, on_line, what):  # an install that takes long: the parent kills us meanwhile
        Path(sys.argv[2]).write_text("installing")
        time.sleep(120)
    store._run_pip = run_pip
    store.create_stack("numpy==2.4.6", cache_dir=Path(sys.argv[1]))
""")


@pytest.mark.stack
def test_a_killed_stack_create_leaves_no_half_built_stack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    flag = tmp_path / "installing"
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path), str(flag)])
    try:
        deadline = time.monotonic() + 120
        while not flag.exists():
            assert child.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        key = stack_key(RESOLVED, data=store.data_pins())
        root = tmp_path / "stacks"
        [building] = [p for p in root.iterdir() if p.name.startswith(".building-")]
        assert building.name == f".building-{key}-{child.pid}" and (building / "venv").is_dir()
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=30)
    assert not (root / key).exists() and list_stacks(tmp_path) == []

    monkeypatch.setattr(store, "resolve", lambda spec, root, on_line=None: dict(RESOLVED))
    monkeypatch.setattr(store, "_run_pip", lambda args, on_line, what: None)
    stack = create_stack("numpy==2.4.6", cache_dir=tmp_path)
    assert stack.key == key and stack.path == root / key and stack.python_executable.exists()
    assert sorted(p.name for p in root.iterdir()) == sorted([key, f".{key}.lock"])  # the leftover is gone
    assert [s.key for s in list_stacks(tmp_path)] == [key]
    shebangs = [p.read_bytes() for p in (root / key / "venv" / "bin").iterdir() if p.is_file() and not p.is_symlink()]
    assert not any(b".building-" in data for data in shebangs)  # the venv's paths name its final folder
