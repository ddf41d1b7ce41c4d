"""The REST API under load: R concurrent readers (default 200) for S seconds (default 30) against
``repliscope serve``'s app run by uvicorn in a child process on a free localhost port (a temporary SQLite store
holding N runs, default 200, the store tests' realistic Lite0 record). Each reader loops over the read requests a
client makes (a runs page with a filter, one run, a run's samples page, models, jobs, datasets) with a viewer
token, through one bounded httpx.AsyncClient (at most R connections). Prints requests, errors (any non-200 or
transport error), throughput and latency p50/p90/p99/max; exits 1 on any error. Stops by itself.

Usage: python benchmarks/bench_api_load.py [--readers 200] [--seconds 30] [--runs 200] [--workers 1]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the realistic record of the store tests
from tests.store.records import TOP1_A, TOP1_B, make_record


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def fill(url: str, n: int) -> tuple[str, list[str]]:
    """N runs and a viewer token in a fresh store (migrated as ``repliscope serve`` opens it)."""
    from repliscope.cli.serve_cmd import first_start
    from repliscope.store.accounts import create_token
    from repliscope.store.repository import RunStore

    store = RunStore(url)
    first_start(store)
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    ids = []
    for i in range(n):
        run_id = f"{i:032x}"
        store.save(
            make_record(
                run_id,
                list(TOP1_A if i % 2 else TOP1_B),
                created_at=t0 + timedelta(minutes=i),
                runtime=("onnxruntime", "torch", "opencv_dnn")[i % 3],
            )
        )
        ids.append(run_id)
    token = create_token(store, "bench", "viewer")
    store.close()
    return token, ids


def start_server(url: str, port: int, workers: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "REPLISCOPE_DB": url}
    cmd = [
        sys.executable,
        "-m",
        "uvicorn",
        "repliscope.service.app:create_app",
        "--factory",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--log-level",
        "warning",
        "--workers",
        str(workers),
        "--timeout-keep-alive",
        "75",
    ]  # longer than the client keeps an idle connection (5 s): no close race
    proc = subprocess.Popen(cmd, env=env)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/api/v1/health", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("the server did not start within 60 s")


async def load(base: str, token: str, ids: list[str], readers: int, seconds: float) -> tuple[list[float], list[str]]:
    paths = ["/api/v1/runs?runtime=torch&page_size=20", "/api/v1/models", "/api/v1/jobs", "/api/v1/datasets"]
    paths += [f"/api/v1/runs/{ids[i]}" for i in range(0, len(ids), max(1, len(ids) // 20))]
    paths += [f"/api/v1/runs/{ids[i]}/samples?page_size=10" for i in range(0, len(ids), max(1, len(ids) // 10))]
    latencies: list[float] = []
    errors: list[str] = []
    stop = time.monotonic() + seconds
    limits = httpx.Limits(max_connections=readers, max_keepalive_connections=readers)

    async with httpx.AsyncClient(
        base_url=base, headers={"Authorization": f"Bearer {token}"}, limits=limits, timeout=httpx.Timeout(30.0)
    ) as client:

        async def reader(k: int) -> None:
            i = k
            while time.monotonic() < stop:
                path = paths[i % len(paths)]
                i += 7
                t = time.perf_counter()
                try:
                    r = await client.get(path)
                    if r.status_code != 200:
                        errors.append(f"{path}: {r.status_code}")
                except httpx.HTTPError as exc:
                    errors.append(f"{path}: {type(exc).__name__}: {exc}")
                latencies.append(time.perf_counter() - t)

        await asyncio.gather(*(reader(k) for k in range(readers)))
    return latencies, errors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--readers", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--workers", type=int, default=1, help="uvicorn worker processes")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="repliscope-load-") as tmp:
        url = f"sqlite:///{Path(tmp) / 'runs.db'}"
        token, ids = fill(url, args.runs)
        port = free_port()
        server = start_server(url, port, args.workers)
        try:
            started = time.monotonic()
            latencies, errors = asyncio.run(load(f"http://127.0.0.1:{port}", token, ids, args.readers, args.seconds))
            elapsed = time.monotonic() - started
        finally:
            server.terminate()
            server.wait(timeout=30)
    ms = np.array(latencies) * 1000
    p50, p90, p99 = np.percentile(ms, [50, 90, 99])
    print(
        f"{args.readers} concurrent readers, {elapsed:.1f} s, {args.runs} stored runs, uvicorn workers "
        f"{args.workers}: {len(ms)} requests ({len(ms) / elapsed:.0f}/s), {len(errors)} errors"
    )
    print(f"latency ms: p50 {p50:.1f}  p90 {p90:.1f}  p99 {p99:.1f}  max {ms.max():.1f}")
    for line in errors[:10]:
        print(f"  error: {line}")
    if errors:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
