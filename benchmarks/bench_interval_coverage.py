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

``--part`` (default all) adds two more known-truth worlds, on the same sizes and trials:

- ``segmentation``: ``--population`` images of a seeded segmentation world (12 classes, from background in 95 % of
  the images to classes in 6 %; per-image confusion matrices, see :func:`segmentation_population`), and a variant
  run of the same images with 3 % of the right pixels moved on average. The truths are the population's mIoU,
  fwIoU, pixel accuracy, each class's IoU and the variant's ΔmIoU; per sample, ``evaluate``'s own intervals
  (:func:`repliscope.metrics.segmentation.evaluate_confusions`, ``paired_delta``) beside the percentile interval
  (what they were before) and :func:`repliscope.metrics.bootstrap.corrected_interval` with the bias subtracted
  twice and once, on the same replicates.
- ``paired``: the paired ΔAP of two detection runs on the same images (``evaluate``'s detection ``paired``,
  :func:`repliscope.metrics.detection_paired.paired_ap_deltas` / ``delta_ap_interval``) in each ``--world``, the
  variant the same detections moved ``--shift`` pixels (default 2); the truth is the population's ΔAP.

Usage: python benchmarks/bench_interval_coverage.py [--sizes 30,60,100] [--trials 200] [--replicates 200]
       [--population 5000] [--seed 0] [--world default|sparse|all] [--part ap|segmentation|paired|all]
       [--shift 2]
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
    corrected_interval,
)
from repliscope.metrics.detection_paired import delta_ap_interval, paired_ap_deltas
from repliscope.metrics.intervals import MIN_BOOTSTRAP_SAMPLES, MIN_OBJECTS_PER_CATEGORY, wilson_interval
from repliscope.metrics.segmentation import (
    METRIC_NAMES,
    draw_counts,
    evaluate_confusions,
    iou_per_class,
    paired_delta,
    paired_miou_deltas,
    replicate_deltas,
    summary,
)

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


class Tally:
    """Coverage counts of one (size, quantity) over trials, per interval method (in the order first given)."""

    def __init__(self) -> None:
        self.trials = 0
        self.covered: dict[str, int] = {}
        self.above: dict[str, int] = {}
        self.half: dict[str, float] = {}
        self.bias = self.boot_bias = 0.0

    def add(self, truth: float, value: float, deltas: np.ndarray, intervals: dict[str, tuple[float, float]]) -> None:
        """One trial: the sample's ``value``, its replicates' ``deltas`` (each replicate's number minus
        ``value``) and each method's interval, against the population's ``truth``."""
        self.trials += 1
        self.bias += value - truth
        self.boot_bias += float(np.nanmean(deltas)) if np.isfinite(deltas).any() else 0.0
        for method, (low, high) in intervals.items():
            self.covered[method] = self.covered.get(method, 0) + (low <= truth <= high)
            self.above[method] = self.above.get(method, 0) + (truth > high)
            self.half[method] = self.half.get(method, 0.0) + (high - low) / 2

    def rows(self, n: int, name: str) -> list[str]:
        out = []
        for method, c in self.covered.items():
            t = max(self.trials, 1)
            lo, hi = wilson_interval(c, t)
            below = self.trials - c - self.above[method]
            out.append(
                f"{n:>5} {name:<16} {method:<14} {100 * c / t:>8.1f}% [{100 * lo:5.1f}, {100 * hi:5.1f}] % "
                f"{100 * self.half[method] / t:>9.2f} pt {self.above[method]:>6} {below:>6}  bias "
                f"{100 * self.bias / t:+.2f} pt, bootstrap's {100 * self.boot_bias / t:+.2f} pt ({self.trials} trials)"
            )
        return out


def alternatives(
    value: float, deltas: np.ndarray, n: int, bounds: tuple[float, float]
) -> dict[str, tuple[float, float]]:
    """The intervals compared with ``evaluate``'s on the same replicates' ``deltas``: ``percentile`` (the value
    plus the deltas' 2.5 / 97.5 percentiles: the segmentation intervals before, the paired ΔAP's now) and
    :func:`repliscope.metrics.bootstrap.corrected_interval` with the bias subtracted twice (``corrected x2``, the
    COCO AP's) and once (``corrected x1``)."""
    d = deltas[~np.isnan(deltas)]
    if d.size == 0:
        return {"percentile": (value, value), "corrected x2": (value, value), "corrected x1": (value, value)}
    low, high = value + np.percentile(d, [2.5, 97.5])
    return {
        "percentile": (max(bounds[0], float(low)), min(bounds[1], float(high))),
        "corrected x2": corrected_interval(value, d, n, bounds=bounds, bias_factor=2.0),
        "corrected x1": corrected_interval(value, d, n, bounds=bounds, bias_factor=1.0),
    }


HEADER = (
    f"{'n':>5} {'quantity':<16} {'method':<14} {'coverage':>9} {'(95 % Wilson)':>16} {'half-width':>11} "
    f"{'above':>6} {'below':>6}"
)


SEG_CLASSES = 12


def segmentation_population(n_images: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A seeded synthetic segmentation world: (reference, variant) per-image confusion matrices
    (n_images, K, K + 1) of K = 12 classes. Class 0 (background) is in 95 % of the images, class c >= 1 in
    60 % / c of them (class 11 in 5.5 %: rare); each present class covers lognormal(8.5, 1) pixels; a difficulty
    per image (Beta(2, 2)) sets its pixel accuracy per class (about 0.9 to 0.45); the wrong pixels go 70 % to
    the image's other classes, 20 % to a class it does not hold, 10 % outside the classes. The variant is the same
    run with a further Beta(1, 30) share (3 % on average) of each class's right pixels moved to another class (a
    slightly worse pre-processing)."""
    rng = np.random.default_rng(seed)
    k = SEG_CLASSES
    presence = np.array([0.95] + [0.6 / c for c in range(1, k)])
    ref = np.zeros((n_images, k, k + 1), np.int64)
    var = np.zeros_like(ref)
    for i in range(n_images):
        present = rng.random(k) < presence
        if not present.any():
            present[0] = True
        difficulty = rng.beta(2, 2)
        classes = np.flatnonzero(present)
        absent = np.flatnonzero(~present)
        for c in classes:
            pixels = int(rng.lognormal(8.5, 1.0))
            accuracy = float(np.clip(rng.normal(0.9 - 0.45 * difficulty, 0.08), 0.02, 0.995))
            right = rng.binomial(pixels, accuracy)
            others = classes[classes != c]
            shares = np.array([0.7 if len(others) else 0.0, 0.2 if len(absent) else 0.0, 0.1])
            to_other, to_absent, outside = rng.multinomial(pixels - right, shares / shares.sum())
            ref[i, c, c] = right
            if to_other:
                np.add.at(ref[i, c], rng.choice(others, size=to_other), 1)
            if to_absent:
                np.add.at(ref[i, c], rng.choice(absent, size=to_absent), 1)
            ref[i, c, k] += outside
            var[i, c] = ref[i, c]
            moved = rng.binomial(right, rng.beta(1, 30))
            if moved:
                var[i, c, c] -= moved
                np.add.at(var[i, c], rng.choice(np.delete(np.arange(k), c), size=moved), 1)
    return ref, var


def run_segmentation(sizes: list[int], trials: int, replicates: int, population_size: int, seed: int) -> None:
    """Coverage of ``evaluate``'s segmentation intervals (mIoU, fwIoU, pixel accuracy, each class's IoU, from
    :func:`repliscope.metrics.segmentation.replicate_deltas`) and of the paired ΔmIoU
    (:func:`repliscope.metrics.segmentation.paired_miou_deltas`) on samples of a segmentation world."""
    ref, var = segmentation_population(population_size, seed)
    truth = summary(ref.sum(axis=0))
    truth_iou = iou_per_class(ref.sum(axis=0))
    truth_delta = float(summary(var.sum(axis=0))[0] - truth[0])
    present = (ref.sum(axis=-1) > 0).mean(axis=0)
    print(
        f"\n=== segmentation world: {SEG_CLASSES} classes, {population_size} images, classes present in "
        f"{', '.join(f'{100 * p:.0f}' for p in present)} % of the images; population mIoU {truth[0]:.4f}, fwIoU "
        f"{truth[1]:.4f}, pixel accuracy {truth[2]:.4f}, variant - reference mIoU {100 * truth_delta:+.2f} pt"
    )
    names = [f"class{c}" for c in range(SEG_CLASSES)]
    rng = np.random.default_rng(seed + 1)
    for n in sizes:
        t0 = time.perf_counter()
        tallies = {name: Tally() for name in (*METRIC_NAMES, "IoU (per class)", "IoU (rarest 3)", "ΔmIoU (paired)")}
        for trial in range(trials):
            pick = rng.choice(population_size, size=n, replace=False)
            per_image, variant = ref[pick], var[pick]
            full = per_image.sum(axis=0)
            values = summary(full)
            # evaluate's own intervals (seed = trial), and the alternatives on the same replicates
            ev = evaluate_confusions(per_image, names, replicates=replicates, seed=trial)
            now = {m.name: (m.ci_low, m.ci_high) for m in ev.metrics}
            counts = draw_counts(n, replicates, trial)
            deltas = replicate_deltas(per_image, counts)
            for j, name in enumerate(METRIC_NAMES):
                value = float(values[j])
                intervals = {"evaluate (x1)": now[name], **alternatives(value, deltas[:, j], n, (0.0, 1.0))}
                tallies[name].add(float(truth[j]), value, deltas[:, j], intervals)
            iou = iou_per_class(full)
            reps = iou_per_class(np.einsum("bi,ikl->bkl", counts.astype(np.float64), per_image.astype(np.float64)))
            for c, row in enumerate(ev.per_class):
                if row["iou"] is None or np.isnan(truth_iou[c]):
                    continue
                d = reps[:, c] - iou[c]
                intervals = {
                    "evaluate (x1)": (float(str(row["iou_ci_low"])), float(str(row["iou_ci_high"]))),
                    **alternatives(float(iou[c]), d, n, (0.0, 1.0)),
                }
                tallies["IoU (per class)"].add(float(truth_iou[c]), float(iou[c]), d, intervals)
                if c >= SEG_CLASSES - 3:
                    tallies["IoU (rarest 3)"].add(float(truth_iou[c]), float(iou[c]), d, intervals)
            paired = paired_delta(per_image, variant, replicates=replicates, seed=trial)
            value_delta = paired["delta_miou"]
            d = (
                paired_miou_deltas(per_image, variant, counts) - value_delta
            )  # each replicate's ΔmIoU minus the sample's
            intervals = {
                "evaluate (x1)": (paired["delta_miou_ci_low"], paired["delta_miou_ci_high"]),
                **alternatives(value_delta, d, n, (-1.0, 1.0)),
            }
            tallies["ΔmIoU (paired)"].add(truth_delta, value_delta, d, intervals)
        print(f"\nn = {n} ({time.perf_counter() - t0:.0f} s)")
        print(HEADER)
        for name, tally in tallies.items():
            print("\n".join(tally.rows(n, name)))


def shifted(detections: list[ImageDetections], pixels: float) -> list[ImageDetections]:
    """The same detections with every box moved ``pixels`` right and down (a variant run: an off-by-N crop)."""
    return [ImageDetections(d.boxes + np.array([pixels, pixels, 0.0, 0.0]), d.scores, d.classes) for d in detections]


def run_paired(
    world: str, sizes: list[int], trials: int, replicates: int, population_size: int, seed: int, shift: float
) -> None:
    """Coverage of the paired ΔAP interval (``evaluate``'s detection ``paired``: the variant's AP minus the
    reference's on the same image draws, :func:`repliscope.metrics.detection_paired.paired_ap_deltas`) on samples
    of a detection world, the variant the same detections moved ``shift`` pixels."""
    objects, n_categories = WORLDS[world]
    categories = list(range(1, n_categories + 1))
    truths, detections = population(population_size, seed, objects, n_categories)
    moved = shifted(detections, shift)
    truth = float(
        CocoResampler(truths, moved, categories).cocoeval_values()[0][0]
        - CocoResampler(truths, detections, categories).cocoeval_values()[0][0]
    )
    print(
        f"\n=== paired ΔAP, world {world}: the variant's boxes moved {shift:g} px right and down; {population_size} "
        f"images, population ΔAP {100 * truth:+.2f} pt"
    )
    rng = np.random.default_rng(seed + 2)
    for n in sizes:
        t0 = time.perf_counter()
        tally = Tally()
        for trial in range(trials):
            pick = rng.choice(population_size, size=n, replace=False)
            sample = [truths[i] for i in pick]
            ref_rs = CocoResampler(sample, [detections[i] for i in pick], categories)
            var_rs = CocoResampler(sample, [moved[i] for i in pick], categories)
            value = var_rs.ap() - ref_rs.ap()
            deltas = (
                paired_ap_deltas(ref_rs, var_rs, replicates, trial) - value
            )  # each replicate's ΔAP minus the sample's
            intervals = {
                "evaluate": delta_ap_interval(value, deltas + value),
                **alternatives(value, deltas, n, (-1.0, 1.0)),
            }
            tally.add(truth, value, deltas, intervals)
        print(f"\nn = {n} ({time.perf_counter() - t0:.0f} s)")
        print(HEADER)
        print("\n".join(tally.rows(n, "ΔAP (paired)")))


PARTS = ("ap", "segmentation", "paired")
"""``--part``: the COCO AP intervals, the segmentation intervals (and the paired ΔmIoU), the paired ΔAP."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="30,60,100,200,400")
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--replicates", type=int, default=200)
    parser.add_argument("--population", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--world", choices=[*sorted(WORLDS), "all"], default="all")
    parser.add_argument("--part", choices=[*PARTS, "all"], default="all")
    parser.add_argument("--shift", type=float, default=2.0, help="paired: the variant's box shift in pixels")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(
        f"{args.trials} samples per size, {args.replicates} bootstrap replicates each; the verdict judges AP from "
        f"{MIN_BOOTSTRAP_SAMPLES} images and {MIN_OBJECTS_PER_CATEGORY:g} objects per category"
    )
    start = time.perf_counter()
    parts = PARTS if args.part == "all" else (args.part,)
    worlds = sorted(WORLDS) if args.world == "all" else [args.world]
    if "ap" in parts:
        for world in worlds:
            run_world(world, sizes, args.trials, args.replicates, args.population, args.seed)
    if "segmentation" in parts:
        run_segmentation(sizes, args.trials, args.replicates, args.population, args.seed)
    if "paired" in parts:
        for world in worlds:
            run_paired(world, sizes, args.trials, args.replicates, args.population, args.seed, args.shift)
    print(f"\n{time.perf_counter() - start:.0f} s in all")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
