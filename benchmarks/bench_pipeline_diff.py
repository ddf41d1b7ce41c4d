"""Pipeline diff cost: the whole ``diff MANIFEST --pipeline`` (both pipelines, comparison, diagnosis) against
running both pipelines once, on the first N images of the ImageNet sample (``../shared/data/imagenet-sample``).

Three candidates of EfficientNet-Lite0's pre-processing, written here with PIL / numpy (repliscope's ops never
called): ``correct`` (a match: no diagnosis), ``bilinear`` (one registered variant explains it: singles only),
``mean_128`` (nothing explains it: singles and then every pair are searched). For each: the time of running the
manifest pipeline and the candidate once over the N images, one thread (the baseline), the time of
:func:`repliscope.diff.pipeline.driver.diff_pipeline` over the same images, and their ratio (target <= 2). The
baseline is measured in the same run, alternating with the diff, best of ``--repeats`` each, after one warm-up diff
on 4 images (imports such as torch for the antialias variant are not counted). Prints the machine load.

Usage: python benchmarks/bench_pipeline_diff.py [--limit 100] [--repeats 2]
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT.parent / "shared" / "data" / "imagenet-sample"
MANIFEST = ROOT / "examples" / "efficientnet-lite0.yaml"


def _resized(path: str, method: Image.Resampling) -> np.ndarray:
    with Image.open(path) as im:
        rgb = im.convert("RGB")
    w, h = rgb.size
    s = 256 / min(w, h)
    size = (256, round(h * s)) if w <= h else (round(w * s), 256)
    a = np.asarray(rgb.resize(size, method))
    top, left = round((a.shape[0] - 224) / 2.0), round((a.shape[1] - 224) / 2.0)
    return a[top : top + 224, left : left + 224]


def correct(path: str) -> np.ndarray:
    return ((_resized(path, Image.Resampling.BICUBIC).astype(np.float32) - 127) / 128).transpose(2, 0, 1)


def bilinear(path: str) -> np.ndarray:
    return ((_resized(path, Image.Resampling.BILINEAR).astype(np.float32) - 127) / 128).transpose(2, 0, 1)


def mean_128(path: str) -> np.ndarray:
    return ((_resized(path, Image.Resampling.BICUBIC).astype(np.float32) - 128) / 128).transpose(2, 0, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    if not SAMPLE.is_dir():
        raise SystemExit(f"{SAMPLE} is absent")
    from repliscope.datasets import resolve_dataset
    from repliscope.diff.pipeline.candidate import classify
    from repliscope.diff.pipeline.driver import diff_pipeline, preprocess_pipeline, single_thread
    from repliscope.manifest.loader import load_manifest
    from repliscope.ops.pipeline import decode_input

    loaded = load_manifest(MANIFEST)
    samples = resolve_dataset(str(SAMPLE)).samples[: args.limit]
    pipeline = preprocess_pipeline(loaded)
    print(f"load average (1 min) {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; {len(samples)} images")
    print(f"{'candidate':10s} {'both once s':>12s} {'diff s':>8s} {'ratio':>6s}  verdict (searched)")
    for fn in (correct, bilinear, mean_128):
        cand = classify(f"bench:{fn.__name__}", fn)
        diff_pipeline(loaded, cand, samples[:4], "imagenet-sample")  # warm: imports (torch for one variant), caches
        boths, totals = [], []
        for _ in range(args.repeats):  # alternated, best of each: the machine is shared
            with single_thread():
                t0 = time.perf_counter()
                for smp in samples:
                    pipeline.preprocess(decode_input(smp.read()))
                    fn(smp.location)
                boths.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            r = diff_pipeline(loaded, cand, samples, "imagenet-sample")
            totals.append(time.perf_counter() - t0)
        both, total = min(boths), min(totals)
        print(
            f"{fn.__name__:10s} {both:12.2f} {total:8.2f} {total / both:6.2f}  {r.verdict} "
            f"({r.diagnosis.searched} variants/pairs, {r.diagnosis.variant or '-'})"
        )


if __name__ == "__main__":
    main()
