"""A sharded evaluation on agents, merged into ONE record: 1 vs 2 agents, and the merge's cost (issue 37).

Scale-out: EfficientNet-Lite0 on onnxruntime over the 1000-image ImageNet sample (``../shared/data/imagenet-sample``)
on a real ``dask scheduler`` process with ``repliscope agent`` processes (1 task thread each, ``OMP_NUM_THREADS=1``,
every job 1 pre-processing worker, 1 inference thread, batch 1). Phase 1: the single-machine run, one job on one
agent (``submit_job``). Phase 2: the same evaluation as N shard jobs (``shard: I/N``) on two agents, merged into
one record (``submit_sharded`` + ``merge_outcomes``, what ``submit_merged`` runs). Each agent is warmed first
(model loaded, the ONNX export cached). The two phases alternate ``--rounds`` times (a shared machine's load
changes by the minute); prints images/s of each phase, each round's ratio and their median (target >= 1.8 on 2
cores), and the load average before and after each phase; checks that every merged record IS the single run's:
same result hash, dataset identity and metrics, every image once.

Merge cost: ``merge_outcomes`` of the phase-2 shard outcomes (validating the records as they arrive, the checks,
interleaving, identity, metrics, verdicts, result hash), median of R repeats, per 1,000 samples; then the same on
shards of ~50,000 samples (the evaluated ones renamed 50 times over: the 50,000-image ImageNet val's size).

Usage: python benchmarks/bench_sharded.py [--shards 2] [--rounds 3] [--limit N] [--repeats 20]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_agents import ROOT, SAMPLE, evaluate_job, processes, start_agent, start_scheduler, warm

if TYPE_CHECKING:
    from repliscope.job_execution import JobOutcome

MANIFEST = ROOT / "examples" / "efficientnet-lite0.yaml"


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.2f} (1 min) {five:.2f} (5 min)"


def constraints(agent: str | None = None) -> object:
    from repliscope.agents.placement import Constraints

    hardware = (f"agent_id={agent}",) if agent else ()
    return Constraints(framework="torch", framework_version=">=2.1,<3", runtime="onnxruntime", hardware=hardware)


def replicated(outcomes: list[JobOutcome], times: int) -> list[JobOutcome]:
    """The shard outcomes of a dataset made of ``times`` renamed copies of the evaluated one (ids ``rK/ID``):
    consistent shards of ``times`` x as many samples, for the merge's cost at scale (needs the sample count to be a
    multiple of the shard count)."""
    import base64
    import copy

    from repliscope.datasets.base import identity_of_lines
    from repliscope.evaluation.merge import sample_ids_sha256

    n = len(outcomes)
    infos = [o.shard or {} for o in outcomes]
    total = infos[0]["of_samples"]
    assert total % n == 0, f"{total} samples do not split evenly into {n} shards"
    per_shard = [o.records[0]["samples"] for o in outcomes]
    whole_ids = [per_shard[k % n][k // n]["sample_id"] for k in range(total)]
    out = []
    for i, o in enumerate(outcomes):
        lines = [base64.b64decode(x) for x in infos[i]["identity_lines"]]
        samples, new_lines = [], []
        for r in range(times):
            for sample, line in zip(per_shard[i], lines, strict=True):
                renamed = f"r{r}/{sample['sample_id']}"
                samples.append({**sample, "sample_id": renamed})
                new_lines.append(renamed.encode() + b"\0" + line.split(b"\0", 1)[1])
        copied = copy.deepcopy(o)
        record = copied.records[0]
        record["samples"] = samples
        record["dataset"]["identity"] = identity_of_lines(new_lines)
        record["counts"] = {k: v * times for k, v in record["counts"].items()}
        copied.shard = {
            **infos[i],
            "of_samples": total * times,
            "sample_ids_sha256": sample_ids_sha256([f"r{r}/{x}" for r in range(times) for x in whole_ids]),
            "identity_lines": [base64.b64encode(x).decode("ascii") for x in new_lines],
        }
        out.append(copied)
    return out


def merge_cost(outcomes: list[JobOutcome], repeats: int) -> tuple[float, int]:
    """Median seconds of ``merge_outcomes(outcomes)`` over ``repeats`` and the merged sample count."""
    from repliscope.job_execution import merge_outcomes

    seconds = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        merged = merge_outcomes(outcomes)
        seconds.append(time.perf_counter() - t0)
    return statistics.median(seconds), len(merged.records[0]["samples"])


def scale_out(shards: int, limit: int | None, repeats: int, rounds: int) -> float:
    from repliscope.agents.cluster import Cluster
    from repliscope.agents.submit import submit_job, submit_sharded
    from repliscope.job_execution import merge_outcomes

    print(f"sharded evaluation: Lite0 / onnxruntime on {SAMPLE} ({limit or 'all'} images), {rounds} rounds")
    options = {"limit": limit} if limit else {}
    ratios: list[float] = []
    with tempfile.TemporaryDirectory() as tmp, processes() as started:
        scheduler = start_scheduler(started, Path(tmp))
        time.sleep(1.0)
        start_agent(started, scheduler, "agent-1", Path(tmp))
        start_agent(started, scheduler, "agent-2", Path(tmp))
        with Cluster.connect(scheduler) as cluster:
            cluster.wait_for_agents(2, timeout=90)
            for agent in ("agent-1", "agent-2"):
                warm(cluster, MANIFEST, agent)
            for r in range(rounds):  # the phases alternate: a change of the machine's load hits both
                job = evaluate_job(MANIFEST, str(SAMPLE), "imagenet_wnid", **options)
                before = load()
                t0 = time.perf_counter()
                single = submit_job(cluster, job, constraints("agent-1"))  # type: ignore[arg-type]
                one = time.perf_counter() - t0
                record = single.records[0]
                n = len(record["samples"])
                print(
                    f" round {r + 1}: 1 agent, one job: {n} images in {one:.1f} s = {n / one:.1f}/s (on the agent "
                    f"{single.seconds:.1f} s; {before}; after: {load()})"
                )
                job = evaluate_job(MANIFEST, str(SAMPLE), "imagenet_wnid", **options)
                before = load()
                t0 = time.perf_counter()
                outcomes = submit_sharded(cluster, job, constraints(), shards)  # type: ignore[arg-type]
                merged = merge_outcomes(outcomes).records[0]
                two = time.perf_counter() - t0
                on = ", ".join(
                    f"{i}/{shards} on {o.agent.get('agent_id')} {o.seconds:.1f} s" for i, o in enumerate(outcomes)
                )
                print(
                    f" round {r + 1}: 2 agents, {shards} shard jobs merged into one record: {n} images in {two:.1f} s "
                    f"= {n / two:.1f}/s ({on}; {before}; after: {load()}): ratio {one / two:.2f}x"
                )
                assert merged["result_hash"] == record["result_hash"], "the merged record's result hash differs"
                assert merged["dataset"]["identity"] == record["dataset"]["identity"], "the dataset identity differs"
                assert merged["metrics"] == record["metrics"], "the merged metrics differ"
                assert [s["sample_id"] for s in merged["samples"]] == [s["sample_id"] for s in record["samples"]]
                ratios.append(one / two)
    ratio = statistics.median(ratios)
    print(
        f" throughput ratio 2 agents / 1 agent: median {ratio:.2f}x of {', '.join(f'{x:.2f}' for x in ratios)} "
        f"(target >= 1.8); every merged record equals the single run's (result hash {merged['result_hash'][:12]}, "
        f"{n} images once, top-1 {next(m['value'] for m in merged['metrics'] if m['name'] == 'top1'):.4f})"
    )
    med, n = merge_cost(outcomes, repeats)
    print(
        f" merge cost: {med * 1000:.1f} ms for {n} samples in {shards} shards (median of {repeats}) = "
        f"{med * 1000 * 1000 / n:.1f} ms per 1,000 samples ({load()})"
    )
    if n % shards == 0:
        med, n = merge_cost(replicated(outcomes, 50_000 // n or 1), max(1, repeats // 10))
        print(
            f" merge cost at scale (the run's samples renamed into {n:,}): {med:.2f} s = "
            f"{med * 1000 * 1000 / n:.1f} ms per 1,000 samples ({load()})"
        )
    return ratio


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=2, help="shard jobs (default 2: one per agent)")
    parser.add_argument("--limit", type=int, default=None, help="only the first N images of the sample")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3, help="alternations of the two phases (median ratio)")
    args = parser.parse_args()
    if not SAMPLE.is_dir():
        print(f"sharded evaluation skipped: {SAMPLE} is absent")
        return
    ratio = scale_out(args.shards, args.limit, args.repeats, args.rounds)
    if ratio < 1.8:
        print("WARNING: below the 1.8x target (a loaded machine? run again on an idle one)")


if __name__ == "__main__":
    main()
