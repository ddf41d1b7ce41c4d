"""A pitfall sweep (every variant, Lite0, onnxruntime) against the same variants run as separate evaluations.

Both sides run in this one process on the same data and the same plan (the calibrated one `evaluate` and
`pitfalls` use, unless --threads/--batch-size/--schedule are given); the separate side is what
`repliscope evaluate` does per variant (its own read + pre-processing + inference loop).
The floor is computed in the same run from single-thread costs: (the sweep's shared pre-processing + every
plan's inference) / (every plan's own pre-processing + inference). Inference cannot be shared, and variants that
change the decoder or the resize (or the decoder's channel order) need their own decode / resize.
Usage: python benchmarks/bench_sweep.py [--dataset DIR] [--limit N]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from repliscope.datasets import resolve_dataset
from repliscope.evaluation.engine import LoopOptions, read_and_prepare, run_loop
from repliscope.evaluation.run import RunSettings, plan_for, prepare
from repliscope.pitfalls.sweep import plan_sweep, prepare_all, run_sweep

REPO = Path(__file__).resolve().parents[1]
LITE0 = REPO / "examples" / "efficientnet-lite0.yaml"
DEFAULT_DATA = REPO.parent / "shared" / "data" / "imagenet-sample"
PROBE = 100


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--batch-size", type=int, default=None)
    ap.add_argument("--schedule", default=None)
    args = ap.parse_args()
    if not args.dataset.is_dir():
        raise SystemExit(f"{args.dataset} is absent: this benchmark needs the 1000-image ImageNet sample")
    data = resolve_dataset(str(args.dataset), limit=args.limit)
    prepared = prepare(
        LITE0,
        RunSettings(runtime="onnxruntime", threads=args.threads, batch_size=args.batch_size, schedule=args.schedule),
    )
    run_plan = plan_for(prepared, data)  # calibrates (or reads the cached calibration) before either side
    plans, skipped = plan_sweep(prepared, None, run_plan)

    start = time.perf_counter()
    out = run_sweep(prepared, data, visual_samples=3)
    t_sweep = time.perf_counter() - start
    loop_sweep = out.result.timings["loop_seconds"]  # the measured loop: no load, export or warm-up

    shape = tuple(prepared.artifact.input_shape[1:])
    per_variant = {}
    t_separate = 0.0
    for plan in plans:  # each as `evaluate` runs it; its load / replica load / warm-up are outside its loop
        t0 = time.perf_counter()
        loop = run_loop(
            plan.pipeline,
            plan.runner,
            data.samples,
            LoopOptions(batch_size=plan.batch_size, prep_workers=run_plan.workers, schedule=run_plan.schedule),
            shape,
        )
        t_separate += time.perf_counter() - t0
        per_variant[plan.name] = loop.loop_seconds
    loop_separate = sum(per_variant.values())

    # the floor: CPU the sweep cannot avoid (each distinct op prefix once + every plan's inference) over the CPU
    # of the separate runs (every plan's own pre-processing + inference), single-thread costs on PROBE samples
    probe = data.samples[:PROBE]
    for smp in probe[:3]:
        prepare_all(smp, plans, shape)  # warm caches
    t0 = time.perf_counter()
    for smp in probe:
        prepare_all(smp, plans, shape)
    shared_prep = (time.perf_counter() - t0) / len(probe)
    own_prep = 0.0
    for plan in plans:
        t0 = time.perf_counter()
        for smp in probe:
            read_and_prepare(plan.pipeline, smp, shape)
        own_prep += (time.perf_counter() - t0) / len(probe)
    infer = sum(out.result.outcome(p.name).inference_seconds for p in plans) / len(data)
    floor = (shared_prep + infer) / (own_prep + infer)

    print(
        f"images {len(data)}, plans {len(plans)} (reference + {len(plans) - 1} variants), "
        f"not applicable {len(skipped)}; plan {run_plan.schedule}, batch {run_plan.batch_size}, "
        f"{run_plan.workers} workers x {run_plan.threads} threads ({run_plan.source.split(':')[0]})"
    )
    for name, t in per_variant.items():
        v = out.result.outcome(name)
        t1 = v.metric("top1")
        print(f"  {name:26s} separate loop {t:6.1f} s   top-1 {100 * t1.value:5.1f} %" if t1 else f"  {name}")
    print(f"sweep                      {loop_sweep:7.1f} s measured loop ({t_sweep:.1f} s with loads and warm-up)")
    print(
        f"separate evaluations       {loop_separate:7.1f} s measured loops ({t_separate:.1f} s with loads and warm-up)"
    )
    print(
        f"per image (1 thread): shared pre-processing of all plans {1000 * shared_prep:.1f} ms, each plan's own "
        f"pre-processing summed {1000 * own_prep:.1f} ms, inference summed {1000 * infer:.1f} ms"
    )
    print(f"floor (shared prep + inference) / (own prep + inference) {floor:7.2f}")
    print(f"ratio sweep / separate     {loop_sweep / loop_separate:7.2f}   (measured loops; target: the floor)")


if __name__ == "__main__":
    main()
