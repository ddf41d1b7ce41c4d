"""What `repliscope bench` itself costs: single-stream p50 against a bare `session.run` loop, and the no-op runtime.

Everything is measured in this one run (machines are noisy; compare ratios, not absolute numbers):
- bare loop : `session.run` on the ONNX Runtime session the benchmark uses (same options, same threads), on the
  same pre-processed inputs, timed with perf_counter around each call;
- harness   : the single-stream scenario through the query issuer (batching from the query sample library, the
  Runner's timing wrapper, spans at the given trace level), once with the manifest's post-processing ops (softmax
  + top-k + labels: what `repliscope bench` measures) and once without (the same work as the bare loop);
- the two are interleaved in ROUNDS blocks (alternating which goes first) so drift of a shared machine hits both
  alike; p50 over all blocks;
- no-op     : the issue loop on the no-op runtime (zeros, no work): per-query latency and whole cycle, in µs.
Usage: python benchmarks/bench_harness.py [--queries-per-block N] [--rounds R] [--threads T] [--trace-level L]
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from repliscope.bench.clock import RealClock
from repliscope.bench.qsl import QuerySampleLibrary
from repliscope.bench.run import make_tracer, measure_overhead
from repliscope.bench.scenarios import ScenarioSettings, run_scenario
from repliscope.bench.sut import QueryIssuer
from repliscope.datasets import resolve_dataset
from repliscope.evaluation.run import RunSettings, input_shape, prepare

REPO = Path(__file__).resolve().parents[1]
LITE0 = REPO / "examples" / "efficientnet-lite0.yaml"


def bare_loop(session: object, input_name: str, output_name: str, inputs: list[np.ndarray], n: int) -> list[float]:
    """Seconds of each of ``n`` `session.run` calls, cycling over ``inputs`` (each (1, 3, 224, 224))."""
    out = []
    run = session.run  # type: ignore[attr-defined]
    for i in range(n):
        x = inputs[i % len(inputs)]
        t0 = time.perf_counter()
        run([output_name], {input_name: x})
        out.append(time.perf_counter() - t0)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries-per-block", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--trace-level", default="none")
    args = parser.parse_args()

    prepared = prepare(LITE0, RunSettings(runtime="onnxruntime", threads=args.threads))
    data = resolve_dataset("foolbox_imagenet")
    qsl = QuerySampleLibrary.load(prepared.pipeline, data.samples, input_shape(prepared), False)
    runner = prepared.runner
    runner.load()
    session = runner._session  # type: ignore[attr-defined]
    names = runner.notes["session"]
    inputs = [x[np.newaxis] for x in qsl.inputs]
    tracer = make_tracer(args.trace_level)
    issuers = {
        "with post-processing": QueryIssuer(qsl, runner, prepared.pipeline, tracer),
        "without post-processing": QueryIssuer(qsl, runner, prepared.pipeline, tracer, postprocess=False),
    }
    clock = RealClock()
    settings = ScenarioSettings(
        "single-stream", min_duration_s=0.0, min_queries=args.queries_per_block, warmup_queries=10
    )
    bare_loop(session, names["input"], names["output"], inputs, 20)  # warm-up
    times: dict[str, list[float]] = {"bare": [], **{k: [] for k in issuers}}
    order = list(times)
    for r in range(args.rounds):  # rotate which goes first
        for name in order[r % 3 :] + order[: r % 3]:
            if name == "bare":
                times[name] += bare_loop(session, names["input"], names["output"], inputs, args.queries_per_block)
            else:
                run = run_scenario(issuers[name], len(qsl), replace(settings, seed=r), clock)
                times[name] += run.latencies_s.tolist()
    b50 = float(np.median(times["bare"])) * 1e3
    print(
        f"ONNX Runtime {args.threads} thread(s), Lite0, {len(times['bare'])} queries each, trace level "
        f"{args.trace_level}"
    )
    print(f"bare session.run loop p50: {b50:.3f} ms")
    for name in issuers:
        h50 = float(np.median(times[name])) * 1e3
        print(f"repliscope single-stream p50 {name}: {h50:.3f} ms, ratio to bare {h50 / b50:.4f} (target <= 1.05)")
    over = measure_overhead(prepared, settings, args.trace_level, 5000, clock)
    print(
        f"no-op runtime, {over.queries} queries: {over.latency_p50_us:.1f} µs p50 inside the measured latency, "
        f"{over.latency_mean_us:.1f} µs mean, {over.cycle_mean_us:.1f} µs per whole issue cycle (target <= 50 µs)"
    )
    print(
        f"  of which the harness alone (no post-processing ops): {over.loop_p50_us:.1f} µs p50 inside the latency, "
        f"{over.loop_cycle_mean_us:.1f} µs per cycle; softmax + top-k + labels on (1, 1000) scores are the rest"
    )


if __name__ == "__main__":
    main()
