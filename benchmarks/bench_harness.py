"""What `repliscope bench` itself costs: single-stream p50 against a bare `session.run` loop, and the no-op runtime.

Everything is measured in this one run (machines are noisy; compare ratios, not absolute numbers):
- bare loop : `session.run` on the ONNX Runtime session the benchmark uses (same options, same threads), on the
  same pre-processed inputs, timed with perf_counter around each call;
- harness   : the single-stream scenario through the query issuer as `repliscope bench` runs it (at trace level
  none its lean path: a list look-up, the backend's inference, the copy of its output as the response; the
  manifest's post-processing, softmax + top-k + labels, after the completion was stamped, as LoadGen scores
  accuracy after `QuerySamplesComplete`); the same without post-processing; the spanned path (span context
  managers, the Runner's timing wrapper: the path at trace level model or deeper); and the previous latency
  definition, the post-processing inside each query (`in-query post-processing`);
- the five, and the bare loop a second time (an A/A control: the noise of a paired ratio on this machine), are
  interleaved in ROUNDS blocks (the order rotated every round) so drift of a shared machine hits them alike; p50
  over all blocks, and the median over rounds of each round's paired p50 ratio to the bare loop (the figure of
  issue 37: target <= 1.02);
- no-op     : the issue loop on the no-op runtime (zeros, no work): per-query latency and whole cycle, in µs.
The 1-minute load average is printed before and after.
Usage: python benchmarks/bench_harness.py [--queries-per-block N] [--rounds R] [--threads T] [--trace-level L]
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Sequence
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


class InQueryIssuer(QueryIssuer):
    """The previous latency definition: each query post-processes its response before it returns."""

    def __call__(self, indices: Sequence[int]) -> None:
        super().__call__(indices)
        super().complete()

    def complete(self, limit: int | None = None) -> int:
        return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries-per-block", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=24)
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
    pipeline = prepared.pipeline
    issuers: dict[str, QueryIssuer] = {
        "repliscope bench": QueryIssuer(qsl, runner, pipeline, tracer),
        "without post-processing": QueryIssuer(qsl, runner, pipeline, tracer, postprocess=False),
        "spanned path": QueryIssuer(qsl, runner, pipeline, tracer, lean=False),
        "in-query post-processing": InQueryIssuer(qsl, runner, pipeline, tracer),
    }
    clock = RealClock()
    settings = ScenarioSettings(
        "single-stream", min_duration_s=0.0, min_queries=args.queries_per_block, warmup_queries=10
    )

    bare_loop(session, names["input"], names["output"], inputs, 20)  # warm-up
    times: dict[str, list[float]] = {"bare": [], "bare again (A/A control)": [], **{k: [] for k in issuers}}
    per_round: dict[str, list[float]] = {k: [] for k in times}
    order = list(times)
    load_before = os.getloadavg()
    for r in range(args.rounds):  # rotate which goes first
        for name in order[r % len(order) :] + order[: r % len(order)]:
            if name.startswith("bare"):
                block = bare_loop(session, names["input"], names["output"], inputs, args.queries_per_block)
            else:
                block = run_scenario(issuers[name], len(qsl), replace(settings, seed=r), clock).latencies_s.tolist()
            times[name] += block
            per_round[name].append(float(np.median(block)))
    load_after = os.getloadavg()
    p50 = {k: float(np.median(v)) * 1e3 for k, v in times.items()}
    bare = np.asarray(per_round["bare"])

    print(
        f"machine load (1, 5, 15 min) {', '.join(f'{v:.2f}' for v in load_before)} before, "
        f"{', '.join(f'{v:.2f}' for v in load_after)} after; cores {os.cpu_count()}"
    )
    print(
        f"ONNX Runtime {args.threads} thread(s), Lite0, {len(times['bare'])} queries each "
        f"({args.rounds} rounds of {args.queries_per_block}, the order rotated), trace level {args.trace_level}"
    )
    print(f"bare session.run loop p50: {p50['bare']:.3f} ms")
    for name in ["bare again (A/A control)", *issuers]:
        ratios = np.asarray(per_round[name]) / bare
        print(
            f"single-stream p50, {name}: {p50[name]:.3f} ms; / bare p50 {p50[name] / p50['bare']:.4f}; "
            f"median of {len(ratios)} per-round ratios {float(np.median(ratios)):.4f} "
            f"(quartiles {float(np.quantile(ratios, 0.25)):.4f}-{float(np.quantile(ratios, 0.75)):.4f})"
        )
    headline = float(np.median(np.asarray(per_round["repliscope bench"]) / bare))
    print(
        f"issue 37: repliscope bench single-stream p50 / bare session.run p50, median of rounds {headline:.4f} "
        f"(target <= 1.02: {'met' if headline <= 1.02 else 'NOT met'}) at load {load_before[0]:.2f} -> "
        f"{load_after[0]:.2f}"
    )
    over = measure_overhead(prepared, settings, args.trace_level, 5000, clock)
    print(
        f"no-op runtime, {over.queries} queries: {over.latency_p50_us:.1f} µs p50 inside the measured latency, "
        f"{over.latency_mean_us:.1f} µs mean, {over.cycle_mean_us:.1f} µs per whole issue cycle with the "
        "post-processing after each completion (target <= 50 µs)"
    )
    print(
        f"  without post-processing ops: {over.loop_p50_us:.1f} µs p50 inside the latency, "
        f"{over.loop_cycle_mean_us:.1f} µs per cycle; softmax + top-k + labels on (1, 1000) scores, after each "
        f"completion: {over.postprocess_mean_us:.1f} µs per query"
    )
    for name, issuer in issuers.items():
        if issuer.postprocessed:
            print(
                f"  {name}: post-processing {issuer.postprocess_seconds / issuer.postprocessed * 1e6:.1f} µs per "
                f"query on Lite0's real scores ({issuer.postprocessed} queries)"
            )


if __name__ == "__main__":
    main()
