"""How often does a COCO AP interval over a sample of images cover the AP of the population it was drawn from?

The claim verdict (``repliscope.evaluation.claims.judge_claim``) calls a claim outside the measured 95 % interval
"inconsistent": that is only fair when the interval covers the true value about 95 % of the time at the sizes
users run. This benchmark measures it, in one run, by simulation (nothing is downloaded, no model runs):

- population: ``--population`` images (default 5,000) of a seeded synthetic detection world (``--world``:
  ``default`` 8 categories, Poisson(4) objects per image; ``sparse`` 20 categories, Poisson(1.5), like COCO's
  many rare categories) with sizes from 8 to 300 px (small, medium and large areas), a difficulty per image that sets
  how often its objects are found and how far the boxes are off (so the IoUs span COCO's 10 thresholds), duplicates
  and Poisson(3) false positives with lower scores. Its AP (``CocoResampler.cocoeval_values``, COCOeval's number)
  is the truth.
- trials: for each world (``--world``, default both) and size n (``--sizes``, default 30,60,100,200,400)
  ``--trials`` samples (default 200) of n images drawn without replacement; each gets ``--replicates`` bootstrap
  replicates (default 200; ``evaluate`` draws 500, which moves the mean and spread this method uses little;
  numpy ``default_rng``, :func:`repliscope.metrics.bootstrap.ap_replicate_deltas`) and every interval method of
  :data:`repliscope.metrics.bootstrap.INTERVAL_METHODS` (``percentile``: the interval before issue 35; ``basic``;
  ``bca``; ``normal_bc``: one bootstrap bias correction; ``corrected``: what ``evaluate`` uses now,
  :func:`repliscope.metrics.bootstrap.corrected_interval`).
- printed: per world, size and method the coverage (share of trials whose interval holds the population AP) with
  its own 95 % Wilson interval, the mean half-width in points, and how often the population AP lay above / below it; the
  median objects per category present (what the verdict's rule reads), the mean bias of the sample AP against
  the population's and the bootstrap's own estimate of it. The load average before and after is printed.

Usage: python benchmarks/bench_interval_coverage.py [--sizes 30,60,100] [--trials 200] [--replicates 200]
       [--population 5000] [--seed 0] [--world default|sparse|all]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from repliscope.metrics.bootstrap import (
    INTERVAL_METHODS,
    CocoResampler,
    ImageDetections,
    ImageTruth,
    ap_interval,
    ap_replicate_deltas,
)
from repliscope.metrics.intervals import MIN_BOOTSTRAP_SAMPLES, MIN_OBJECTS_PER_CATEGORY, wilson_interval

CATEGORIES = list(range(1, 9))
WORLDS = {"default": (4.0, 8), "sparse": (1.5, 20)}
"""``--world``: (mean objects per image, categories). ``sparse``: COCO-like, few objects of many categories."""


def population(
    n_images: int, seed: int, objects: float = 4.0, categories: int = 8
) -> tuple[list[ImageTruth], list[ImageDetections]]:
    """A seeded synthetic detection world (see the module docstring): Poisson(``objects``) objects per image of
    ``categories`` categories."""
    rng = np.random.default_rng(seed)
    cats = CATEGORIES[:categories] if categories <= len(CATEGORIES) else list(range(1, categories + 1))
    truths, detections = [], []
    for _ in range(n_images):
        k = rng.poisson(objects)
        wh = np.exp(rng.uniform(np.log(8), np.log(300), size=(k, 2)))
        xy = rng.uniform(0, 640, size=(k, 2))
        gt = np.concatenate([xy, wh], axis=1)
        classes = rng.choice(cats, size=k)
        truths.append(ImageTruth(gt, classes, wh[:, 0] * wh[:, 1], np.zeros(k, bool)))
        difficulty = rng.beta(2, 2)
        found = rng.random(k) < 0.95 - 0.5 * difficulty
        noise = 0.02 + 0.12 * difficulty
        boxes, scores, labels = [], [], []
        for box, cls in zip(gt[found], classes[found], strict=True):
            jitter = rng.normal(0, noise, 4) * np.array([box[2], box[3], box[2], box[3]])
            boxes.append(np.r_[box[:2] + jitter[:2], np.maximum(box[2:] + jitter[2:], 1.0)])
            scores.append(rng.beta(5, 2) * (1 - 0.5 * difficulty))
            labels.append(cls if rng.random() > 0.05 else rng.choice(cats))
            if rng.random() < 0.1:  # a duplicate, lower
                boxes.append(boxes[-1] + rng.normal(0, 2, 4))
                scores.append(scores[-1] * rng.uniform(0.3, 0.9))
                labels.append(cls)
        n_fp = rng.poisson(3)
        for _ in range(n_fp):
            size = np.exp(rng.uniform(np.log(8), np.log(200), 2))
            boxes.append(np.r_[rng.uniform(0, 640, 2), size])
            scores.append(rng.beta(2, 5))
            labels.append(rng.choice(cats))
        detections.append(
            ImageDetections(np.array(boxes, float).reshape(-1, 4), np.array(scores, float), np.array(labels, int))
        )
    return truths, detections


def run_world(world: str, sizes: list[int], trials: int, replicates: int, population_size: int, seed: int) -> None:
    """Every size of one world: the population, then per size the coverage table."""
    objects, n_categories = WORLDS[world]
    categories = list(range(1, n_categories + 1))
    truths, detections = population(population_size, seed, objects, n_categories)
    truth_ap = float(CocoResampler(truths, detections, categories).cocoeval_values()[0][0])
    print(
        f"\n=== world {world}: Poisson({objects:g}) objects of {n_categories} categories per image; "
        f"{population_size} images, {sum(len(t.classes) for t in truths)} objects, "
        f"{sum(len(d.classes) for d in detections)} detections; population AP {truth_ap:.4f}"
    )
    rng = np.random.default_rng(seed + 1)
    header = (
        f"{'n':>5} {'method':<11} {'coverage':>9} {'(95 % Wilson)':>16} {'half-width':>11} {'above':>6} {'below':>6}"
    )
    for n in sizes:
        covered = dict.fromkeys(INTERVAL_METHODS, 0)
        above = dict.fromkeys(INTERVAL_METHODS, 0)
        half = dict.fromkeys(INTERVAL_METHODS, 0.0)
        bias = boot_bias = per_category = 0.0
        t0 = time.perf_counter()
        for trial in range(trials):
            pick = rng.choice(population_size, size=n, replace=False)
            rs = CocoResampler([truths[i] for i in pick], [detections[i] for i in pick], categories)
            value = float(rs.cocoeval_values()[0][0])
            present = np.concatenate([truths[i].classes for i in pick])
            per_category += float(np.median(np.unique(present, return_counts=True)[1])) if len(present) else 0.0
            bias += value - truth_ap
            deltas = ap_replicate_deltas(rs, replicates, seed=trial)
            boot_bias += float(np.nanmean(deltas))
            for method in INTERVAL_METHODS:
                low, high = ap_interval(rs, value, deltas, method)
                covered[method] += low <= truth_ap <= high
                above[method] += truth_ap > high
                half[method] += (high - low) / 2
        print(
            f"\nn = {n}: median {per_category / trials:.1f} objects per category present; sample AP - population AP "
            f"{100 * bias / trials:+.2f} pt on average, the bootstrap's bias estimate "
            f"{100 * boot_bias / trials:+.2f} pt ({time.perf_counter() - t0:.0f} s)"
        )
        print(header)
        for method in INTERVAL_METHODS:
            c = covered[method]
            lo, hi = wilson_interval(c, trials)
            print(
                f"{n:>5} {method:<11} {100 * c / trials:>8.1f}% [{100 * lo:5.1f}, {100 * hi:5.1f}] % "
                f"{100 * half[method] / trials:>9.2f} pt {above[method]:>6} {trials - c - above[method]:>6}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="30,60,100,200,400")
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--replicates", type=int, default=200)
    parser.add_argument("--population", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--world", choices=[*sorted(WORLDS), "all"], default="all")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(
        f"{args.trials} samples per size, {args.replicates} bootstrap replicates each; the verdict judges AP from "
        f"{MIN_BOOTSTRAP_SAMPLES} images and {MIN_OBJECTS_PER_CATEGORY:g} objects per category"
    )
    start = time.perf_counter()
    for world in sorted(WORLDS) if args.world == "all" else [args.world]:
        run_world(world, sizes, args.trials, args.replicates, args.population, args.seed)
    print(f"\n{time.perf_counter() - start:.0f} s in all")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
