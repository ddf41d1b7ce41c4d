"""Stack environments with pip's resolution and installs mocked (the real registry build is in test_real_stack.py):
what is installed, the key, the cache, list/get/remove, and the clean-up of a failed build."""

from __future__ import annotations

import json
import os
import sys
from importlib import metadata
from pathlib import Path

import pytest

from repliscope.stacks import store
from repliscope.stacks.spec import StackError, parse_spec
from repliscope.stacks.store import (
    agent_command,
    create_stack,
    get_stack,
    install_requirements,
    list_stacks,
    remove_stack,
    source_root,
    stack_key,
)
from tests.conftest import REPO

RESOLVED = {"numpy": "2.4.6", "onnx": "1.19.0", "onnxruntime": "1.20.1", "dask": "2026.8.0"}


def test_install_requirements() -> None:
    reqs = install_requirements(parse_spec("onnxruntime==1.20.1"), REPO)
    assert reqs[:5] == [
        "onnxruntime==1.20.1",
        "onnx>=1.16",
        f"dask=={metadata.version('dask')}",
        f"distributed=={metadata.version('distributed')}",
        f"cryptography=={metadata.version('cryptography')}",  # an agent checks each peer certificate's role
    ]
    assert "numpy>=1.26,<3" in reqs and "alembic>=1.13" in reqs  # core dependencies from the checkout
    assert not any(r.startswith(("torch", "pytest", "onnxscript")) for r in reqs)  # no extras
    pinned = install_requirements(parse_spec("numpy<2 onnxruntime==1.18.0 onnx==1.16.0"), REPO)
    assert pinned[:3] == ["numpy<2", "onnx==1.16.0", "onnxruntime==1.18.0"]
    assert [r for r in pinned if r.startswith(("numpy", "onnx"))] == pinned[:3]  # the spec's own pins win


def test_key_is_the_resolved_set_and_python() -> None:
    key = stack_key(RESOLVED, "3.11.7")
    assert len(key) == 12 and key == stack_key(dict(reversed(RESOLVED.items())), "3.11.7")
    assert key == stack_key({"NumPy": "2.4.6", **{k: v for k, v in RESOLVED.items() if k != "numpy"}}, "3.11.7")
    assert key != stack_key(RESOLVED, "3.12.1")
    assert key != stack_key({**RESOLVED, "onnxruntime": "1.20.0"}, "3.11.7")
    assert key != stack_key(RESOLVED, "3.11.7", ["foolbox==3.3.4"])


def test_source_root_is_this_checkout() -> None:
    assert source_root() == REPO


@pytest.fixture
def fake_pip(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """resolve -> RESOLVED; installs recorded, not run (the venv itself and pip freeze are real)."""
    calls: list[list[str]] = []
    monkeypatch.setattr(store, "resolve", lambda spec, root, on_line=None: dict(RESOLVED))

    def run_pip(args: list[str], on_line: object, what: str) -> None:
        calls.append(args)

    monkeypatch.setattr(store, "_run_pip", run_pip)
    return calls


@pytest.mark.stack
def test_create_then_cached_list_get_remove(fake_pip: list[list[str]], tmp_path: Path) -> None:
    lines: list[str] = []
    stack = create_stack("onnxruntime == 1.20.1", on_line=lines.append, cache_dir=tmp_path)
    key = stack_key(RESOLVED, data=["foolbox==3.3.4"])
    assert stack.key == key and stack.data == ["foolbox==3.3.4"]
    assert stack.spec == "onnxruntime==1.20.1" and not stack.cached
    assert stack.path == tmp_path / "stacks" / key and stack.python_executable.exists()
    assert [c[2:5] for c in fake_pip] == [["install", "--no-deps", "--progress-bar"]] * 3
    building = tmp_path / "stacks" / f".building-{key}-{os.getpid()}"  # built aside, then renamed to its key
    assert fake_pip[0][-2:] == ["-r", str(building / "resolved.txt")] and fake_pip[2][-2:] == ["-e", str(REPO)]
    assert not building.exists() and (stack.path / "resolved.txt").is_file()
    assert fake_pip[1][-1] == "foolbox==3.3.4"  # the foolbox_imagenet images, without foolbox's dependencies
    assert (
        stack.path / "resolved.txt"
    ).read_text() == "numpy==2.4.6\nonnx==1.19.0\nonnxruntime==1.20.1\ndask==2026.8.0\n"
    assert (stack.path / "lock.txt").read_text() == ""  # pip freeze of the (mock-installed, empty) venv
    marker = json.loads((stack.path / "venv" / "repliscope-stack.json").read_text())
    assert marker == {"key": key, "spec": "onnxruntime==1.20.1", "lock_sha256": stack.lock_sha256}
    assert stack.main_versions == {"onnxruntime": "1.20.1", "onnx": "1.19.0", "numpy": "2.4.6"}
    assert lines[0].startswith("resolving onnxruntime==1.20.1") and lines[-1].startswith(f"created stack {key}")

    again = create_stack("ONNXRuntime==1.20.1", on_line=lines.append, cache_dir=tmp_path)
    assert again.cached and again.key == key and len(fake_pip) == 3 and lines[-1].startswith("cached: stack")
    assert again.created_at == stack.created_at and again.create_seconds == stack.create_seconds

    assert [s.key for s in list_stacks(tmp_path)] == [key]
    assert get_stack(key[:6], tmp_path).key == key and get_stack("onnxruntime==1.20.1", tmp_path).key == key
    assert get_stack("current", tmp_path).key == "current"
    with pytest.raises(StackError, match=r"no stack 'onnxruntime==1.18.0' \(stacks: " + key):
        get_stack("onnxruntime==1.18.0", tmp_path)
    cmd = agent_command(stack, "tcp://127.0.0.1:8786", "agent-x")
    assert cmd == [
        str(stack.path / "venv" / "bin" / "python"),
        "-m",
        "repliscope.cli.main",
        "agent",
        "--scheduler",
        "tcp://127.0.0.1:8786",
        "--name",
        "agent-x",
    ]
    assert agent_command(get_stack("current"), "tcp://h:1")[0] == sys.executable
    assert remove_stack(key, tmp_path).key == key and list_stacks(tmp_path) == []
    assert not (tmp_path / "stacks" / key).exists()
    with pytest.raises(StackError, match="not a stack"):
        remove_stack("current", tmp_path)


@pytest.mark.stack
def test_a_failed_install_leaves_nothing(
    fake_pip: list[list[str]], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def failing(args: list[str], on_line: object, what: str) -> None:
        raise StackError(f"{what} failed (pip exit 1):\nERROR: No matching distribution found for onnxruntime")

    monkeypatch.setattr(store, "_run_pip", failing)
    with pytest.raises(StackError, match="No matching distribution"):
        create_stack("onnxruntime==1.20.1", cache_dir=tmp_path)
    key = stack_key(RESOLVED, data=["foolbox==3.3.4"])
    assert list((tmp_path / "stacks").iterdir()) == [tmp_path / "stacks" / f".{key}.lock"]
    assert list_stacks(tmp_path) == []


@pytest.mark.network  # a real resolution against the package index
def test_pip_errors_are_reported(tmp_path: Path) -> None:
    """A real resolution that cannot succeed: pip's own error comes back in the StackError."""
    with pytest.raises(StackError) as exc:
        store.resolve(parse_spec("onnxruntime==0.0.0.1"), REPO)
    assert "resolving stack spec 'onnxruntime==0.0.0.1' failed (pip exit 1)" in str(exc.value)
    assert "onnxruntime==0.0.0.1" in str(exc.value).splitlines()[-1]


def test_not_a_source_install(monkeypatch: pytest.MonkeyPatch) -> None:
    class Wheel:
        def read_text(self, name: str) -> str:
            return json.dumps({"url": "https://files.example.org/repliscope-0.1.0.whl", "archive_info": {}})

    monkeypatch.setattr(store.metadata, "distribution", lambda name: Wheel())
    with pytest.raises(StackError, match="not an editable or source install"):
        source_root()
