"""Agents on Dask: scale-out (2 agents x 1 thread vs 1 agent x 1 thread) and per-job dispatch overhead.

Scale-out: EfficientNet-Lite0 on onnxruntime over the 1000-image ImageNet sample (``../shared/data/imagenet-sample``),
split into N shard jobs (``shard: I/N``), each one agent thread doing everything (``schedule: data_parallel``,
1 pre-processing worker, 1 inference thread, batch 1). All N jobs are submitted at once through ``submit_job`` to a
``repliscope cluster scheduler`` process; first with one ``repliscope agent`` process, then with two. Both agents
are warmed up (model loaded once, the ONNX export cached) before their phase. Prints images/s of both phases and
the ratio (target >= 1.8 on 2 cores). Every result is checked: the shard records together hold each image exactly
once and the top-1 of both phases is identical.

Dispatch overhead: a one-image evaluate job (Lite0 on onnxruntime, one foolbox image),
overhead = the submitter's wall time - the seconds execute_job took on the agent, median over R jobs; on the
embedded default (an in-process scheduler and agent, ``Cluster.connect(None)``) and on the TCP scheduler with an
agent process.

Usage: python benchmarks/bench_agents.py [--shards 4] [--repeats 20] [--limit N] [--only dispatch|scale-out]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT.parent / "shared" / "data" / "imagenet-sample"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    try:
        yield started
    finally:
        for p in reversed(started):
            p.terminate()
        for p in started:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()


def start_scheduler(started: list[subprocess.Popen[bytes]], log_dir: Path) -> str:
    """A ``repliscope cluster scheduler`` process (what a user runs: Dask's scheduler with repliscope's settings) on
    a free loopback port; returns its address once it listens (it prints the address then)."""
    port = free_port()
    log = log_dir / "scheduler.log"
    started.append(
        subprocess.Popen(
            [sys.executable, "-m", "repliscope.cli.main", "cluster", "scheduler", "--port", str(port)],
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
        )
    )
    address = f"tcp://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while address not in log.read_text(errors="replace"):
        if started[-1].poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the scheduler did not start: {log.read_text(errors='replace')[-2000:]}")
        time.sleep(0.1)
    return address


def start_agent(started: list[subprocess.Popen[bytes]], scheduler: str, name: str, log_dir: Path) -> None:
    log = (log_dir / f"{name}.log").open("wb")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    started.append(
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "repliscope.cli.main",
                "agent",
                "--scheduler",
                scheduler,
                "--name",
                name,
                "--nthreads",
                "1",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
    )


def evaluate_job(manifest: Path, dataset: str, label_rule: str | None, **options: object) -> object:
    from repliscope.job_execution import JobSpec

    job_id = uuid.uuid4().hex
    return JobSpec(
        job_id=job_id,
        kind="evaluate",
        manifest_ref=manifest.stem,
        manifest_text=manifest.read_text(),
        runtime="onnxruntime",
        dataset_name=dataset,
        dataset_spec=dataset,
        options={
            "manifest_path": str(manifest),
            "threads": 1,
            "batch_size": 1,
            "prep_workers": 1,
            "schedule": "data_parallel",
            **({"label_rule": label_rule} if label_rule else {}),
            **options,
        },
    )


def run_phase(cluster: object, manifest: Path, shards: int, limit: int | None) -> tuple[float, dict[str, int]]:
    """The shard jobs at once (``submit_sharded``); returns (wall seconds, sample id -> top-1)."""
    from repliscope.agents.placement import Constraints
    from repliscope.agents.submit import submit_sharded

    constraints = Constraints(framework="torch", framework_version=">=2.1,<3", runtime="onnxruntime")
    job = evaluate_job(manifest, str(SAMPLE), "imagenet_wnid", **({"limit": limit} if limit else {}))
    t0 = time.perf_counter()
    outcomes = submit_sharded(cluster, job, constraints, shards)  # type: ignore[arg-type]
    wall = time.perf_counter() - t0
    top1: dict[str, int] = {}
    for outcome in outcomes:
        for record in outcome.records:
            for s in record["samples"]:
                assert s["sample_id"] not in top1, f"{s['sample_id']} evaluated twice"
                top1[s["sample_id"]] = s["topk_indices"][0] if s["topk_indices"] else -1
    agents = sorted({o.agent.get("agent_id", "?") for o in outcomes})
    print(f"  {shards} jobs on {', '.join(agents)}: {len(top1)} images in {wall:.1f} s = {len(top1) / wall:.1f}/s")
    return wall, top1


def warm(cluster: object, manifest: Path, agent: str) -> None:
    from repliscope.agents.placement import Constraints
    from repliscope.agents.submit import submit_job

    job = evaluate_job(manifest, str(SAMPLE), "imagenet_wnid", limit=4)
    submit_job(cluster, job, Constraints(runtime="onnxruntime", hardware=(f"agent_id={agent}",)))  # type: ignore[arg-type]


def scale_out(shards: int, limit: int | None) -> float:
    from repliscope.agents.cluster import Cluster

    manifest = ROOT / "examples" / "efficientnet-lite0.yaml"
    print(f"scale-out: Lite0 / onnxruntime on {SAMPLE} ({limit or 'all'} images), {shards} shard jobs")
    with tempfile.TemporaryDirectory() as tmp, processes() as started:
        scheduler = start_scheduler(started, Path(tmp))
        start_agent(started, scheduler, "agent-1", Path(tmp))
        cluster = Cluster.connect(scheduler)
        try:
            cluster.wait_for_agents(1, timeout=60)
            warm(cluster, manifest, "agent-1")
            print(" 1 agent x 1 thread")
            one, top1_one = run_phase(cluster, manifest, shards, limit)
            start_agent(started, scheduler, "agent-2", Path(tmp))
            cluster.wait_for_agents(2, timeout=60)
            warm(cluster, manifest, "agent-2")
            print(" 2 agents x 1 thread")
            two, top1_two = run_phase(cluster, manifest, shards, limit)
        finally:
            cluster.close()
    assert top1_one == top1_two, "the two phases disagree on some top-1"
    ratio = (len(top1_two) / two) / (len(top1_one) / one)
    print(
        f" throughput ratio 2 agents / 1 agent: {ratio:.2f}x (target >= 1.8); top-1 identical on {len(top1_one)} images"
    )
    return ratio


def overhead(cluster: object, repeats: int, label: str) -> float:
    from repliscope.agents.placement import Constraints
    from repliscope.agents.submit import dispatch_overheads

    manifest = ROOT / "examples" / "efficientnet-lite0.yaml"
    jobs = [evaluate_job(manifest, "foolbox_imagenet", None, limit=1) for _ in range(repeats + 2)]
    samples = dispatch_overheads(cluster, jobs, Constraints(runtime="onnxruntime"))[2:]  # type: ignore[arg-type]
    med = statistics.median(samples)  # (the first two load the model / export it)
    print(
        f" {label}: dispatch overhead median {med * 1000:.1f} ms, p90 "
        f"{sorted(samples)[int(0.9 * (len(samples) - 1))] * 1000:.1f} ms over {len(samples)} one-image jobs"
    )
    return med


def dispatch(repeats: int) -> None:
    from repliscope.agents.cluster import Cluster

    print("dispatch overhead (submit_job wall - execute_job seconds on the agent)")
    with Cluster.connect(None) as cluster:
        overhead(cluster, repeats, "embedded (in-process scheduler + agent)")
    with tempfile.TemporaryDirectory() as tmp, processes() as started:
        scheduler = start_scheduler(started, Path(tmp))
        start_agent(started, scheduler, "agent-o", Path(tmp))
        with Cluster.connect(scheduler) as cluster:
            cluster.wait_for_agents(1, timeout=60)
            overhead(cluster, repeats, "TCP scheduler + agent process")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--limit", type=int, default=None, help="only the first N images of the sample")
    parser.add_argument("--only", choices=("dispatch", "scale-out"), default=None)
    args = parser.parse_args()
    if args.only != "scale-out":
        dispatch(args.repeats)
    if args.only == "dispatch":
        return
    if not SAMPLE.is_dir():
        print(f"scale-out skipped: {SAMPLE} is absent")
        return
    ratio = scale_out(args.shards, args.limit)
    if ratio < 1.8:
        print("WARNING: below the 1.8x target (a loaded machine? run again on an idle one)")


if __name__ == "__main__":
    main()
