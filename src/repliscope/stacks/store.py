"""Stack environments on disk: one cached venv per resolved requirement set, under ``<cache>/stacks/<key>/``.

``create_stack`` resolves the spec together with repliscope's core dependencies, ``dask``/``distributed`` at this
interpreter's versions and the runtime's companions (onnxruntime -> onnx), with this interpreter's pip
(``pip install --dry-run --report``: the pip configuration, indexes and wheels on disk apply). The key is the
sha256 (first 12 hex) of the resolved ``name==version`` lines plus the Python version, so equivalent specs share
one venv. A new venv gets exactly the resolved set (``--no-deps``), then repliscope from this checkout
(``pip install --no-deps -e ROOT``); ``lock.txt`` is its ``pip freeze``. Layout::

    <cache>/stacks/<key>/stack.json     {key, spec, requirements, resolved, lock_sha256, python, created_at, ...}
    <cache>/stacks/<key>/lock.txt       pip freeze of the venv
    <cache>/stacks/<key>/venv/          the environment; venv/repliscope-stack.json names the stack inside it
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections import deque
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlparse

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from pydantic import BaseModel, Field

from repliscope.stacks.current import MARKER, current_stack
from repliscope.stacks.spec import CURRENT, StackError, StackSpec, parse_spec

if TYPE_CHECKING:
    from repliscope.agents.security import ClusterSecurity

LineCallback = Callable[[str], None]

COMPANIONS: dict[str, tuple[str, ...]] = {"onnxruntime": ("onnx",)}
"""Runtime distribution -> the distributions repliscope needs beside it to run that runtime (taken with their
specifiers from repliscope's extras; onnxruntime checks and reads models with ``onnx``)."""

AGENT_DISTRIBUTIONS = ("dask", "distributed", "cryptography")
"""Installed in every stack at this interpreter's versions, so its agents speak this scheduler's protocol and check
the role of each peer's TLS certificate (:mod:`repliscope.agents.roles` reads it with ``cryptography``)."""

DATA_DISTRIBUTIONS = ("foolbox",)
"""Distributions that only carry data of registered datasets (``foolbox_imagenet``: the images in the foolbox
wheel): installed ``--no-deps`` at this environment's version, when installed here, so a stack reads the same
samples."""

MAIN_DISTRIBUTIONS = (
    "torch",
    "onnxruntime",
    "onnx",
    "opencv-python-headless",
    "tensorflow-cpu",
    "keras",
    "ai-edge-litert",
    "numpy",
)
"""Distributions ``stack list`` shows the versions of (when a stack has them)."""


class Stack(BaseModel):
    """A stack environment: ``key`` (12 hex, or ``current``), canonical ``spec``, the ``resolved`` set
    (canonical name -> version), ``python`` version, ``path`` (the stack's folder; None for ``current``),
    ``created_at`` (UTC), ``create_seconds`` (the cold build, s) and ``cached`` (this call reused it)."""

    key: str
    spec: str
    requirements: list[str] = Field(default_factory=list)
    resolved: dict[str, str] = Field(default_factory=dict)
    data: list[str] = Field(default_factory=list)
    """Data distributions installed without their dependencies (:data:`DATA_DISTRIBUTIONS`), ``name==version``."""
    lock_sha256: str
    python: str
    created_at: datetime
    create_seconds: float | None = None
    path: Path | None = None
    cached: bool = False

    @property
    def python_executable(self) -> Path:
        """The interpreter of this stack (this process's for ``current``)."""
        return Path(sys.executable) if self.path is None else self.path / "venv" / "bin" / "python"

    @property
    def main_versions(self) -> dict[str, str]:
        """Versions of the spec's distributions and of :data:`MAIN_DISTRIBUTIONS` present in the stack."""
        names: list[str] = [canonicalize_name(Requirement(r).name) for r in self.requirements]
        names += [n for n in MAIN_DISTRIBUTIONS if n not in names]
        return {n: self.resolved[n] for n in names if n in self.resolved}

    def size_mb(self) -> float:
        """Disk use of the stack's folder in MB (10^6 bytes; files not followed through symlinks); 0 for
        ``current``."""
        if self.path is None:
            return 0.0
        total = 0
        for root, _dirs, files in os.walk(self.path):
            for name in files:
                with contextlib.suppress(OSError):
                    total += os.lstat(os.path.join(root, name)).st_size
        return round(total / 1e6, 1)


def stacks_root(cache_dir: Path | None = None) -> Path:
    """``<cache>/stacks`` (cache: ``$REPLISCOPE_CACHE`` or the user cache directory)."""
    from repliscope.paths import default_cache_dir

    return (cache_dir or default_cache_dir()) / "stacks"


def source_root() -> Path:
    """The checkout repliscope is installed from (its ``direct_url.json``: an editable or local source install);
    StackError when it is installed from an index or a wheel (a stack installs repliscope from source)."""
    try:
        text = metadata.distribution("repliscope").read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        text = None
    info = json.loads(text) if text else {}
    url = info.get("url", "")
    if "dir_info" not in info or not url.startswith("file://"):
        raise StackError(
            "stacks install repliscope from its source checkout, but this repliscope is not an editable "
            f"or source install ({url or 'installed from a package index or wheel'}): install it with "
            "`pip install -e <checkout>`"
        )
    root = Path(unquote(urlparse(url).path))
    if not (root / "pyproject.toml").is_file():
        raise StackError(f"repliscope's source checkout {root} has no pyproject.toml (moved or deleted?)")
    return root


def _project_requirements(root: Path) -> tuple[list[str], dict[str, list[str]]]:
    """(core dependencies, extras) of the checkout being installed (its pyproject.toml, which may be newer than
    the installed metadata), else of the installed distribution's metadata."""
    pyproject = root / "pyproject.toml"
    if pyproject.is_file():
        project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
        return list(project.get("dependencies", [])), dict(project.get("optional-dependencies", {}))
    core = [r for r in metadata.requires("repliscope") or [] if "extra" not in str(Requirement(r).marker or "")]
    return core, {}


def install_requirements(spec: StackSpec, root: Path) -> list[str]:
    """What a stack of ``spec`` installs besides repliscope itself: the spec, repliscope's core dependencies (a
    name the spec constrains is left to the spec), dask/distributed pinned to this interpreter's versions, and the
    companions of the spec's runtimes with the specifiers of repliscope's extras."""
    core, extras = _project_requirements(root)
    named: set[str] = set(spec.names)
    out = list(spec.requirements)
    extra_reqs: dict[str, str] = {canonicalize_name(Requirement(r).name): r for reqs in extras.values() for r in reqs}
    for name in spec.names:
        for companion in COMPANIONS.get(name, ()):
            if companion not in named:
                out.append(extra_reqs.get(companion, companion))
                named.add(companion)
    for name in AGENT_DISTRIBUTIONS:
        if name not in named:
            out.append(f"{name}=={metadata.version(name)}")
            named.add(name)
    out += [r for r in core if canonicalize_name(Requirement(r).name) not in named]
    return out


def _run_pip(args: list[str], on_line: LineCallback | None, what: str) -> None:
    """This interpreter's pip with ``args``; each output line goes to ``on_line``; StackError with pip's last
    lines when it fails."""
    cmd = [sys.executable, "-m", "pip", *args]
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PYTHONUNBUFFERED": "1"}
    tail: deque[str] = deque(maxlen=15)
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env) as proc:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.rstrip()
            if not line or "is ignored: it is neither a file nor a directory" in line:
                continue
            tail.append(line)
            if on_line is not None:
                on_line(line)
        code = proc.wait()
    if code != 0:
        raise StackError(f"{what} failed (pip exit {code}):\n" + "\n".join(tail))


def resolve(spec: StackSpec, root: Path, on_line: LineCallback | None = None) -> dict[str, str]:
    """The set pip would install for ``spec`` (:func:`install_requirements`) into an empty environment with this
    Python: canonical name -> version (``pip install --dry-run --ignore-installed --report``)."""
    with tempfile.TemporaryDirectory(prefix="repliscope-resolve-") as tmp:
        report = Path(tmp) / "report.json"
        _run_pip(
            [
                "install",
                "--dry-run",
                "--quiet",
                "--ignore-installed",
                "--report",
                str(report),
                *install_requirements(spec, root),
            ],
            on_line,
            f"resolving stack spec '{spec.text}'",
        )
        data = json.loads(report.read_text(encoding="utf-8"))
    return {
        canonicalize_name(item["metadata"]["name"]): item["metadata"]["version"]
        for item in sorted(data["install"], key=lambda i: canonicalize_name(i["metadata"]["name"]))
    }


def data_pins() -> list[str]:
    """``name==version`` of the :data:`DATA_DISTRIBUTIONS` installed in this environment."""
    pins = []
    for name in DATA_DISTRIBUTIONS:
        with contextlib.suppress(metadata.PackageNotFoundError):
            pins.append(f"{name}=={metadata.version(name)}")
    return pins


def stack_key(resolved: dict[str, str], python: str | None = None, data: list[str] | None = None) -> str:
    """sha256 (first 12 hex) of the resolved ``name==version`` lines (sorted), the data distributions (``data
    NAME==VERSION`` lines) and the Python version."""
    lines = sorted(f"{canonicalize_name(n)}=={v}" for n, v in resolved.items())
    lines += [f"data {pin}" for pin in sorted(data or [])]
    text = "\n".join(lines) + f"\npython {python or platform.python_version()}\n"
    return hashlib.sha256(text.encode()).hexdigest()[:12]


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock on ``path`` (two creates of one key: the second waits, then finds it cached)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _load(folder: Path) -> Stack | None:
    """The stack in ``folder`` (None when its stack.json is missing: absent or half-made)."""
    try:
        stack = Stack.model_validate_json((folder / "stack.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return stack.model_copy(update={"path": folder})


def current() -> Stack:
    """The environment this process runs in, as a Stack (key ``current``, no folder of its own)."""
    info = current_stack()
    return Stack(
        key=info["key"],
        spec=info["spec"],
        lock_sha256=info["lock_sha256"],
        python=info["python"],
        created_at=datetime.now(UTC),
        cached=True,
    )


def create_stack(spec: StackSpec | str, on_line: LineCallback | None = None, cache_dir: Path | None = None) -> Stack:
    """The stack of ``spec``: resolved, then reused when its venv exists (``cached=True``, ``on_line`` gets
    "cached ...") or built. A failed build removes the half-made folder and raises StackError with pip's error."""
    spec = parse_spec(spec) if isinstance(spec, str) else spec
    if spec.is_current:
        return current()
    root = source_root()
    say = on_line or (lambda _line: None)
    say(f"resolving {spec.text} (+ repliscope's dependencies) with {sys.executable} -m pip")
    resolved = resolve(spec, root, on_line)
    python = platform.python_version()
    data = data_pins()
    key = stack_key(resolved, python, data)
    folder = stacks_root(cache_dir) / key
    with _locked(stacks_root(cache_dir) / f".{key}.lock"):
        existing = _load(folder)
        if existing is not None and existing.python_executable.exists():
            say(f"cached: stack {key} ({folder})")
            return existing.model_copy(update={"cached": True})
        if folder.exists():  # a half-made folder of an interrupted build (before builds were made aside)
            shutil.rmtree(folder)
        for stale in folder.parent.glob(f"{BUILDING_PREFIX}{key}-*"):  # a killed build's (we hold the key's lock)
            shutil.rmtree(stale, ignore_errors=True)
        building = folder.parent / f"{BUILDING_PREFIX}{key}-{os.getpid()}"
        start = time.perf_counter()
        try:
            stack = _build(spec, resolved, data, key, python, building, root, say, on_line)
            stack.create_seconds = round(time.perf_counter() - start, 1)
            (building / "stack.json").write_text(
                stack.model_dump_json(indent=2, exclude={"path", "cached"}), encoding="utf-8"
            )
            _move_venv(building, folder)
        except BaseException:
            shutil.rmtree(building, ignore_errors=True)
            raise
        stack = stack.model_copy(update={"path": folder})
    say(f"created stack {key} in {stack.create_seconds} s ({stack.size_mb()} MB)")
    return stack


BUILDING_PREFIX = ".building-"
"""A stack is built in ``<stacks root>/.building-<key>-<pid>`` and renamed to ``<key>`` once complete (one atomic
rename): a killed ``stack create`` never leaves a half-made ``<key>`` folder; its ``.building-`` folder is removed
by the next create of that key."""


def _move_venv(building: Path, folder: Path) -> None:
    """Rename the finished ``building`` folder to ``folder`` (atomic, same file system), first rewriting the
    venv's absolute paths to ``building`` (console scripts' ``#!`` lines, activate scripts, pyvenv.cfg)."""
    old, new = str(building).encode(), str(folder).encode()
    venv = building / "venv"
    for path in [*(venv / "bin").iterdir(), venv / "pyvenv.cfg"]:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > 1 << 20:
            continue
        data = path.read_bytes()
        if old in data:
            path.write_bytes(data.replace(old, new))
    os.rename(building, folder)


def _build(
    spec: StackSpec,
    resolved: dict[str, str],
    data: list[str],
    key: str,
    python: str,
    folder: Path,
    root: Path,
    say: LineCallback,
    on_line: LineCallback | None,
) -> Stack:
    venv = folder / "venv"
    folder.mkdir(parents=True)
    say(f"creating venv {venv}")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True)
    target = ["--python", str(venv / "bin" / "python")]
    pins = folder / "resolved.txt"
    pins.write_text("".join(f"{n}=={v}\n" for n, v in resolved.items()), encoding="utf-8")
    _run_pip(
        [*target, "install", "--no-deps", "--progress-bar", "off", "-r", str(pins)], on_line, f"installing stack {key}"
    )
    if data:
        _run_pip(
            [*target, "install", "--no-deps", "--progress-bar", "off", *data],
            on_line,
            f"installing the data distributions {', '.join(data)} into stack {key}",
        )
    _run_pip(
        [*target, "install", "--no-deps", "--progress-bar", "off", "-e", str(root)],
        on_line,
        f"installing repliscope from {root} into stack {key}",
    )
    lock = subprocess.run(
        [sys.executable, "-m", "pip", *target, "freeze"],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
    ).stdout
    (folder / "lock.txt").write_text(lock, encoding="utf-8")
    lock_sha256 = hashlib.sha256(lock.encode()).hexdigest()
    stack = Stack(
        key=key,
        spec=spec.text,
        requirements=list(spec.requirements),
        resolved=resolved,
        data=data,
        lock_sha256=lock_sha256,
        python=python,
        created_at=datetime.now(UTC),
        path=folder,
    )
    (venv / MARKER).write_text(
        json.dumps({"key": key, "spec": spec.text, "lock_sha256": lock_sha256}), encoding="utf-8"
    )
    return stack


def list_stacks(cache_dir: Path | None = None) -> list[Stack]:
    """Every complete stack under :func:`stacks_root`, oldest first."""
    root = stacks_root(cache_dir)
    found = (
        [s for s in (_load(d) for d in sorted(root.iterdir()) if d.is_dir()) if s is not None] if root.is_dir() else []
    )
    return sorted(found, key=lambda s: s.created_at)


def get_stack(key_or_spec: str, cache_dir: Path | None = None) -> Stack:
    """``current``; a stack by key (or a unique key prefix of 4+ hex); else by spec (the newest stack whose
    canonical spec equals it). StackError naming the existing stacks otherwise."""
    text = key_or_spec.strip()
    if text.lower() == CURRENT:
        return current()
    stacks = list_stacks(cache_dir)
    by_key = [s for s in stacks if len(text) >= 4 and s.key.startswith(text.lower())]
    if len(by_key) == 1:
        return by_key[0]
    if len(by_key) > 1:
        raise StackError(f"stack key prefix '{text}' is ambiguous: {', '.join(s.key for s in by_key)}")
    spec = parse_spec(text)
    by_spec = [s for s in stacks if s.spec == spec.text]
    if by_spec:
        return by_spec[-1]
    known = ", ".join(f"{s.key} ({s.spec})" for s in stacks) or "none"
    raise StackError(f"no stack '{text}' (stacks: {known}); create it with `repliscope stack create \"{spec.text}\"`")


def remove_stack(key_or_spec: str, cache_dir: Path | None = None) -> Stack:
    """Delete a stack's folder (venv, lock); returns what was removed. ``current`` cannot be removed."""
    stack = get_stack(key_or_spec, cache_dir)
    if stack.path is None:
        raise StackError("'current' is the environment repliscope runs in, not a stack: nothing to remove")
    shutil.rmtree(stack.path)
    return stack


def agent_command(
    stack: Stack, scheduler: str, name: str | None = None, security: ClusterSecurity | None = None
) -> list[str]:
    """The command that starts a repliscope agent in ``stack``'s interpreter, joined to ``scheduler`` (with
    ``security``'s TLS files / ``--insecure-cluster``)."""
    cmd = [str(stack.python_executable), "-m", "repliscope.cli.main", "agent", "--scheduler", scheduler]
    cmd += security.flags() if security is not None else []
    return [*cmd, "--name", name] if name else cmd
