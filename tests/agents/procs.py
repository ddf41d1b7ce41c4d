"""Real processes for the agent tests: a ``dask scheduler`` and ``repliscope agent`` processes on localhost, on
free ports, every one killed at teardown."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

DASK = Path(sys.executable).parent / "dask"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Processes:
    """Started processes by name; :meth:`stop_all` terminates (then kills) each one still running."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def _start(self, name: str, cmd: list[str]) -> subprocess.Popen[bytes]:
        out = (self.folder / f"{name}.out").open("wb")
        err = (self.folder / f"{name}.err").open("wb")
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env)
        self.procs[name] = proc
        return proc

    def scheduler(self, timeout: float = 30.0) -> str:
        """Start ``dask scheduler`` on a free port; its address once it accepts connections."""
        if not DASK.is_file():
            pytest.skip(f"{DASK} is absent (the 'agents' extra is not installed)")
        port = free_port()
        self._start("scheduler", [str(DASK), "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    return f"tcp://127.0.0.1:{port}"
            except OSError:
                if self.procs["scheduler"].poll() is not None:
                    break
                time.sleep(0.2)
        raise RuntimeError(f"dask scheduler did not start: {self.log('scheduler')}")

    def agent(self, key: str, scheduler: str, name: str | None = None) -> subprocess.Popen[bytes]:
        """Start ``repliscope agent`` (agent id ``name``, default ``key``) as process ``key``."""
        return self._start(
            key, [sys.executable, "-m", "repliscope.cli.main", "agent", "--scheduler", scheduler, "--name", name or key]
        )

    def log(self, name: str) -> str:
        return "".join((self.folder / f"{name}.{ext}").read_text(errors="replace") for ext in ("out", "err"))

    def kill(self, name: str) -> None:
        self.procs[name].send_signal(signal.SIGKILL)
        self.procs[name].wait(timeout=10)

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
