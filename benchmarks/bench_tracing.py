"""Benchmark: what leveled tracing costs, per level, on EfficientNet-Lite0 single-stream queries (batch 1).

    .venv/bin/python benchmarks/bench_tracing.py [--runtime onnxruntime --runtime torch] [--queries 200]
                                                 [--rounds 3] [--threads 1] [--json]

A query is what a single-stream benchmark issues (LoadGen semantics: the input is pre-processed beforehand):
``runner.infer`` on one pre-processed image and the manifest's post-processing. Configurations, measured in the
same process, interleaved round-robin (``--rounds`` blocks of ``--queries`` per configuration, the order rotated
every round) so that drift on a shared machine hits all alike:

- ``untraced``: the loop without any span call; ``untraced (A/A)``: the same loop again (the noise floor);
- ``none``: spans on the ``none`` tracer (the shared no-op); ``model``: ``query`` > ``inference`` and
  ``postprocess/<op>`` spans; ``framework``: plus the runner instrumented (torch module hooks, ONNX Runtime's
  profiler, OpenCV DNN per-layer timings), the instrumentation's conversion happening after the block.

Reports the p50 per-query latency of each configuration (all its queries) and its ratio to ``untraced``: the
median over rounds of the per-round ratio of p50s (paired within a round, so drift between rounds cancels).
Targets (issue 8): model <= 1.02, framework <= 1.15, none within the A/A noise (the median per-round
|A/A ratio - 1|).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
MANIFEST = REPO / "examples" / "efficientnet-lite0.yaml"
CONFIGS = ("untraced", "untraced (A/A)", "none", "model", "framework")
TARGETS = {"model": 1.02, "framework": 1.15}


def _block(config: str, runner: Any, pipeline: Any, x: Any, queries: int, warmup: int) -> list[int]:
    from repliscope.tracing import NO_TRACER, make_tracer

    level = config if config in ("none", "model", "framework") else None
    tracer = make_tracer(level, otel=False) if level and level != "none" else NO_TRACER
    latencies: list[int] = []
    with tracer.instrument(runner):
        for i in range(warmup + queries):
            start = time.perf_counter_ns()
            if level is None:
                pipeline.postprocess(runner.infer(x), NO_TRACER)
            else:
                with tracer.span("query", "model", index=i):
                    with tracer.span("inference", "model"):
                        scores = runner.infer(x)
                    pipeline.postprocess(scores, tracer)
            if i >= warmup:
                latencies.append(time.perf_counter_ns() - start)
    return latencies


def measure(runtime: str, threads: int, queries: int, rounds: int) -> dict[str, Any]:
    from repliscope.datasets import resolve_dataset
    from repliscope.diff.task_level import first_batch
    from repliscope.evaluation.run import RunSettings, prepare

    prepared = prepare(MANIFEST, RunSettings(runtime=runtime, threads=threads, batch_size=1))
    _, x = first_batch(
        prepared.pipeline, resolve_dataset("foolbox_imagenet"), 1, tuple(prepared.artifact.input_shape[1:])
    )
    runner = prepared.runner
    runner.load()
    samples: dict[str, list[int]] = {c: [] for c in CONFIGS}
    ratios: dict[str, list[float]] = {c: [] for c in CONFIGS}
    for r in range(rounds):
        order = CONFIGS[r % len(CONFIGS) :] + CONFIGS[: r % len(CONFIGS)]
        block = {c: _block(c, runner, prepared.pipeline, x, queries, warmup=5) for c in order}
        base = statistics.median(block["untraced"])
        for c, v in block.items():
            samples[c] += v
            ratios[c].append(statistics.median(v) / base)
    rows = {
        c: {
            "p50_ms": statistics.median(v) / 1e6,
            "ratio": statistics.median(ratios[c]),
            "ratio_range": [min(ratios[c]), max(ratios[c])],
            "queries": len(v),
        }
        for c, v in samples.items()
    }
    aa = sorted(abs(a - 1) for a in ratios["untraced (A/A)"])
    return {
        "runtime": runtime,
        "threads": threads,
        "framework": runner.info()["framework_version"],
        "configs": rows,
        "aa_noise": aa[len(aa) // 2],
    }


def span_costs(n: int = 200_000) -> dict[str, float]:
    """µs per span (enter + exit) of the no-op tracer and of a recording ``model`` tracer, in a tight loop."""
    from repliscope.tracing import NO_TRACER, make_tracer

    out = {}
    for name, tracer in (("none", NO_TRACER), ("model", make_tracer("model", otel=False))):
        start = time.perf_counter_ns()
        for _ in range(n):
            with tracer.span("inference", "model"):
                pass
        out[name] = (time.perf_counter_ns() - start) / n / 1000
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runtime", action="append", choices=["onnxruntime", "torch", "opencv_dnn"])
    parser.add_argument("--queries", type=int, default=20, help="queries per configuration and round")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = [measure(rt, args.threads, args.queries, args.rounds) for rt in args.runtime or ["onnxruntime", "torch"]]
    costs = span_costs()
    if args.json:
        print(json.dumps({"runtimes": results, "span_us": costs}, indent=2))
        return
    print(
        f"one span (enter + exit): {costs['none']:.3f} µs on the none tracer (no-op), {costs['model']:.3f} µs "
        "recorded (model level)"
    )
    for res in results:
        print(
            f"\n{res['runtime']} {res['framework']}, {res['threads']} thread(s), Lite0 batch 1, "
            f"{res['configs']['untraced']['queries']} queries per configuration"
        )
        print(f"{'configuration':<16} {'p50 ms':>8} {'ratio':>7} {'rounds min-max':>15}  target")
        for config, row in res["configs"].items():
            target = TARGETS.get(config)
            verdict = "" if target is None else f"<= {target:.2f} {'ok' if row['ratio'] <= target else 'MISSED'}"
            if config == "none":
                ok = abs(row["ratio"] - 1) <= res["aa_noise"]
                verdict = f"within the A/A noise (median per-round |A/A - 1| {res['aa_noise']:.3f}): " + (
                    "ok" if ok else "no"
                )
            low, high = row["ratio_range"]
            print(f"{config:<16} {row['p50_ms']:>8.3f} {row['ratio']:>7.3f} {low:>7.3f}-{high:<7.3f}  {verdict}")


if __name__ == "__main__":
    main()
