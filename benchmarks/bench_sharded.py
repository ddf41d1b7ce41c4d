"""A sharded evaluation on agents, merged into ONE record: 1 vs 2 agents, and the merge's cost (issue 37).

Scale-out: EfficientNet-Lite0 on onnxruntime over the 1000-image ImageNet sample
(``../shared/data/imagenet-sample``) on a ``repliscope cluster scheduler`` process with two ``repliscope agent``
processes. The same per-agent settings on both sides (printed): 1 task thread per agent, ``OMP_NUM_THREADS=1``,
every job 1 pre-processing worker, 1 inference thread, batch 1: one core per job. Phase 1: the single-machine run,
one job on one agent (``submit_job``). Phase 2: the same evaluation as N shard jobs (``shard: I/N``) on both agents,
merged into one record (what ``submit_merged`` runs: ``submit_sharded``, each shard's record validated as it
arrives, then ``merge_validated``). Each phase is timed from submit to the (merged) record; storing it is timed
apart. Each agent is warmed first (model loaded, the ONNX export cached). The two phases alternate ``--rounds``
times (a shared machine's load changes by the minute); prints images/s of each phase, each round's ratio and their
median (target >= 1.8 on 2 cores), the load average before and after each phase, and per phase: each job's
scheduling, set-up, model load, warm-up, loop (ms/image), the outcome's trip back and its JSON size, the merge, the
store write; the CPU seconds of every process (scheduler, agents, submitter); and the 2-agent phase's gap to 2x
split into outside the agents, the tail, the per-job fixed cost and a slower loop. Checks that every merged record
IS the single run's: same result hash, dataset identity and metrics, every image once.

Merge cost: ``merge_outcomes`` of the phase-2 shard outcomes (validating the records, the checks, interleaving,
identity, metrics, verdicts, result hash; in a run the validation happens as each shard arrives), median of R
repeats, per 1,000 samples; then the same on shards of ~50,000 samples (the evaluated ones renamed 50 times over:
the 50,000-image ImageNet val's size).

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


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds() -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class Phase:
    """One phase's wall time from submit to the (merged) record, each shard's start and finish as the submitter saw
    them (its ``log`` lines), and the CPU seconds of every process of the cluster over the phase."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self.started: dict[str, float] = {}  # shard label -> seconds after submit its agent said "start"
        self.finished: dict[str, float] = {}  # shard label -> seconds after submit its outcome was here
        self.t0 = time.perf_counter()
        self.cpu0 = {name: cpu_seconds(pid) for name, pid in pids.items()}
        self.own0 = own_cpu_seconds()
        self.load_before = load()
        self.wall = self.merge = 0.0
        self.cpu: dict[str, float] = {}

    def log(self, line: str) -> None:
        now = time.perf_counter() - self.t0
        label = line[len("[shard ") : line.index("]")] if line.startswith("[shard ") else "0/1"
        if "running on agent" in line:
            self.started.setdefault(label, now)
        elif " done on agent " in line:
            self.finished[label] = now

    def stop(self, merge_seconds: float = 0.0) -> None:
        self.wall = time.perf_counter() - self.t0
        self.merge = merge_seconds
        self.cpu = {name: cpu_seconds(pid) - self.cpu0[name] for name, pid in self.pids.items()}
        self.cpu["submitter"] = own_cpu_seconds() - self.own0
        self.load_after = load()


def breakdown(phase: Phase, outcomes: list[JobOutcome]) -> str:
    """Where a phase's wall time went, per shard job: scheduling (submit -> its agent started it), on the agent
    the job's own set-up (manifest, dataset listing, shard cut: execute - load - warm-up - loop - record), model load
    (the ONNX session) and warm-up, the loop (read, pre-process, infer) with its ms per image, the record (metrics,
    intervals, hash) and the outcome's trip back (agent done -> the submitter has it: JSON, transfer; measured
    from the start event's arrival, so the event's own lag is in "scheduled" and may make this negative); then
    the merge."""
    parts = []
    for i, o in enumerate(outcomes):
        label = f"{i}/{len(outcomes)}"
        t = o.records[0]["timings"]
        n = len(o.records[0]["samples"])
        start, done = phase.started.get(label, 0.0), phase.finished.get(label, phase.wall)
        back = done - start - o.seconds
        parts.append(
            f"{label} on {o.agent.get('agent_id')}: scheduled {start * 1000:.0f} ms, set-up + record "
            f"{(o.seconds - t['total_seconds']) * 1000:.0f} ms, model load {t['load_seconds'] * 1000:.0f} ms, "
            f"warm-up {t['warmup_seconds'] * 1000:.0f} ms, loop {t['loop_seconds']:.2f} s "
            f"({t['loop_seconds'] / n * 1000:.2f} ms/image), outcome back {back * 1000:.0f} ms "
            f"({len(o.model_dump_json()) / 1e6:.2f} MB JSON), done at {done:.2f} s"
        )
    return "; ".join(parts) + (f"; merge {phase.merge * 1000:.0f} ms" if phase.merge else "")


def cpu_line(phase: Phase, n: int, busy: list[str]) -> str:
    """CPU seconds per process over the phase; the busy agents' CPU ms per image; what the rest took from the
    2 cores."""
    each = ", ".join(f"{name} {sec:.2f}" for name, sec in phase.cpu.items())
    jobs = sum(phase.cpu[a] for a in busy)
    rest = sum(sec for name, sec in phase.cpu.items() if name not in busy)
    return (
        f"CPU s: {each}; the job agents {jobs / n * 1000:.2f} ms/image, the rest {rest:.2f} s "
        f"= {rest / phase.wall:.1%} of a core"
    )


def gap(one: Phase, single: JobOutcome, two: Phase, shards: list[JobOutcome]) -> str:
    """The 2-agent phase's wall time minus the ideal (the 1-agent phase's / 2), split exactly into: outside the
    agents (submit, scheduling, the outcomes' trip back, merge: wall - the slowest shard's execute_job, minus half
    the 1-agent phase's own), the tail (slowest shard - the shards' mean), each shard's fixed cost paid whole
    (set-up, load, warm-up, record: each shard's minus half the single job's) and a slower loop (the shards' mean
    loop - half the single job's loop)."""
    ideal = one.wall / 2
    if len(shards) != 2:  # the split below assumes one shard job per agent
        return f"gap to 2x: {(two.wall - ideal) * 1000:+.0f} ms over the ideal {ideal:.2f} s (split for 2 shards only)"
    execs = [o.seconds for o in shards]
    loops = [o.records[0]["timings"]["loop_seconds"] for o in shards]
    single_loop = single.records[0]["timings"]["loop_seconds"]
    outside = (two.wall - max(execs)) - (one.wall - single.seconds) / 2
    tail = max(execs) - statistics.mean(execs)
    fixed = statistics.mean(e - lo for e, lo in zip(execs, loops, strict=True)) - (single.seconds - single_loop) / 2
    slower = statistics.mean(loops) - single_loop / 2
    total = two.wall - ideal
    per_image = (statistics.mean(loops) / len(shards[0].records[0]["samples"])) / (
        single_loop / len(single.records[0]["samples"])
    )
    return (
        f"gap to 2x: {total * 1000:+.0f} ms over the ideal {ideal:.2f} s = outside the agents {outside * 1000:+.0f} ms "
        f"+ tail {tail * 1000:+.0f} ms + fixed cost per job {fixed * 1000:+.0f} ms + slower loop "
        f"{slower * 1000:+.0f} ms ({per_image - 1:+.1%} per image)"
    )


def store_seconds(store: object, outcome: JobOutcome) -> float:
    import uuid

    t0 = time.perf_counter()
    store.save_outcome(outcome, uuid.uuid4().hex, kind="evaluate")  # type: ignore[attr-defined]
    return time.perf_counter() - t0


def scale_out(shards: int, limit: int | None, repeats: int, rounds: int) -> float:
    from repliscope.agents.cluster import Cluster
    from repliscope.agents.submit import submit_job, submit_sharded
    from repliscope.evaluation.merge import Shard
    from repliscope.job_execution import merge_validated, outcome_shard
    from repliscope.store.repository import RunStore

    print(
        f"sharded evaluation: Lite0 / onnxruntime on {SAMPLE} ({limit or 'all'} images), {rounds} rounds; the same "
        "agents on both sides: `repliscope agent --nthreads 1`, OMP_NUM_THREADS=1, every job threads 1, batch 1, "
        "1 pre-processing worker (one core per job), on a `repliscope cluster scheduler`"
    )
    options = {"limit": limit} if limit else {}
    ratios: list[float] = []
    cpu_ratios: list[float] = []  # the 1-agent job's agent CPU / the busier agent's in phase 2
    with tempfile.TemporaryDirectory() as tmp, processes() as started:
        scheduler = start_scheduler(started, Path(tmp))
        start_agent(started, scheduler, "agent-1", Path(tmp))
        start_agent(started, scheduler, "agent-2", Path(tmp))
        pids = {"scheduler": started[0].pid, "agent-1": started[1].pid, "agent-2": started[2].pid}
        store = RunStore(f"sqlite:///{tmp}/runs.db")
        with Cluster.connect(scheduler) as cluster:
            cluster.wait_for_agents(2, timeout=90)
            for agent in ("agent-1", "agent-2"):
                warm(cluster, MANIFEST, agent)
            for r in range(rounds):  # the phases alternate: a change of the machine's load hits both
                job = evaluate_job(MANIFEST, str(SAMPLE), "imagenet_wnid", **options)
                one = Phase(pids)
                single = submit_job(cluster, job, constraints("agent-1"), log=one.log)  # type: ignore[arg-type]
                one.stop()
                record = single.records[0]
                n = len(record["samples"])
                stored_one = store_seconds(store, single)
                print(
                    f" round {r + 1}: 1 agent, one job: {n} images in {one.wall:.2f} s = {n / one.wall:.1f}/s "
                    f"({one.load_before}; after: {one.load_after})\n   {breakdown(one, [single])}; "
                    f"store {stored_one * 1000:.0f} ms\n   {cpu_line(one, n, ['agent-1'])}"
                )
                job = evaluate_job(MANIFEST, str(SAMPLE), "imagenet_wnid", **options)
                two = Phase(pids)
                validated: dict[int, Shard] = {}  # what submit_merged runs: each shard validated as it arrives

                def keep(index: int, outcome: JobOutcome, into: dict[int, Shard] = validated) -> None:
                    into[index] = outcome_shard(outcome)

                outcomes = submit_sharded(
                    cluster,
                    job,  # type: ignore[arg-type]
                    constraints(),  # type: ignore[arg-type]
                    shards,
                    log=two.log,
                    on_outcome=keep,
                )
                m0 = time.perf_counter()
                slowest = max(o.seconds for o in outcomes)
                merged_outcome = merge_validated([validated[i] for i in range(shards)], slowest)
                two.stop(time.perf_counter() - m0)
                merged = merged_outcome.records[0]
                stored_two = store_seconds(store, merged_outcome)
                ratio = one.wall / two.wall
                cpu_ratio = one.cpu["agent-1"] / max(two.cpu["agent-1"], two.cpu["agent-2"])
                cpu_ratios.append(cpu_ratio)
                print(
                    f" round {r + 1}: 2 agents, {shards} shard jobs merged into one record: {n} images in "
                    f"{two.wall:.2f} s = {n / two.wall:.1f}/s ({two.load_before}; after: {two.load_after}): "
                    f"ratio {ratio:.2f}x\n   {breakdown(two, outcomes)}; store {stored_two * 1000:.0f} ms\n"
                    f"   {cpu_line(two, n, ['agent-1', 'agent-2'])}; CPU ratio {cpu_ratio:.2f}x\n"
                    f"   {gap(one, single, two, outcomes)}"
                )
                assert merged["result_hash"] == record["result_hash"], "the merged record's result hash differs"
                assert merged["dataset"]["identity"] == record["dataset"]["identity"], "the dataset identity differs"
                assert merged["metrics"] == record["metrics"], "the merged metrics differ"
                assert [s["sample_id"] for s in merged["samples"]] == [s["sample_id"] for s in record["samples"]]
                ratios.append(ratio)
        store.close()
    ratio = statistics.median(ratios)
    print(
        f" throughput ratio 2 agents / 1 agent: median {ratio:.2f}x of {', '.join(f'{x:.2f}' for x in ratios)} "
        f"(target >= 1.8); every merged record equals the single run's (result hash {merged['result_hash'][:12]}, "
        f"{n} images once, top-1 {next(m['value'] for m in merged['metrics'] if m['name'] == 'top1'):.4f})"
    )
    print(
        f" CPU ratio (the 1-agent job's agent CPU seconds / the busier agent's in phase 2; what the wall ratio tends "
        f"to when each job has a core to itself, less what runs outside the agents): median "
        f"{statistics.median(cpu_ratios):.2f}x of {', '.join(f'{x:.2f}' for x in cpu_ratios)}"
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
