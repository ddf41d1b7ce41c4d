"""Per-runtime speed of the three shipped detection models, and the cost of COCO evaluation with its bootstrap.

Everything is measured in this one run (machines are noisy; compare the ratios, not absolute numbers):
- per model and runtime: `repliscope bench`'s single-stream scenario (1 thread, pre-processed library; a
  query's latency ends at the runtime's output, the manifest's detection post-processing runs after it): p50 ms
  per image, the ratio to the model's fastest runtime, and the post-processing's cost per query (the no-op
  runtime replaying real outputs, `harness_overhead_us.postprocess_mean_us`);
  BlazeFace (tflite; onnxruntime / opencv_dnn via tf2onnx) and MTCNN (onnxruntime, opencv_dnn; the cascade
  per image) on faces-dlib testing.xml, SSDLite (tensorflow; onnxruntime / opencv_dnn via tf2onnx) on the
  first images of coco-val-mini;
- COCO: `evaluate` of SSDLite on the whole coco-val-mini, then `evaluate_coco` on its records without and with
  the default bootstrap (the 12 numbers + per class; 500 replicates).
A one-time tf2onnx conversion is cached in the cache folder (its seconds are printed when it ran now).
Usage: python benchmarks/bench_detection.py [--queries N] [--skip-coco]
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path

from repliscope.bench.qsl import QuerySampleLibrary
from repliscope.bench.run import BenchOptions, run_benchmark
from repliscope.bench.scenarios import ScenarioSettings
from repliscope.datasets import resolve_dataset
from repliscope.datasets.base import Dataset
from repliscope.evaluation.run import RunSettings, evaluate, input_shape, prepare

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"
FACES = f"dlib_xml:{DATA / 'faces-dlib' / 'testing.xml'}"
COCO = f"coco:{DATA / 'coco-val-mini'}"
MODELS = [  # (manifest, runtimes, dataset, images in the library, queries per runtime relative to --queries)
    ("blazeface-full-range.yaml", ("tflite", "onnxruntime", "opencv_dnn"), FACES, None, 1.0),
    ("ssdlite-mobilenet-v2-coco.yaml", ("tensorflow", "onnxruntime", "opencv_dnn"), COCO, 20, 1.0),
    ("mtcnn.yaml", ("onnxruntime", "opencv_dnn"), FACES, None, 0.25),
]


@dataclass(frozen=True)
class Row:
    """One runtime of one model: latencies in ms, ``post_ms`` the post-processing's cost per query, after its
    completion (the no-op runtime's ``postprocess_mean_us``), ``conversion_s`` when tf2onnx ran now (None: cached
    or not needed)."""

    runtime: str
    p50: float
    p90: float
    queries: int
    post_ms: float
    load_s: float
    conversion_s: float | None


def bench_model(manifest: str, runtimes: tuple[str, ...], data: Dataset, queries: int) -> list[Row]:
    """Single-stream p50 per runtime on one library (pre-processed once)."""
    rows: list[Row] = []
    qsl = None
    for runtime in runtimes:
        prepared = prepare(REPO / "examples" / manifest, RunSettings(runtime=runtime, threads=1))
        if qsl is None:
            qsl = QuerySampleLibrary.load(
                prepared.pipeline, data.samples, input_shape(prepared), False, prepared.artifact.input_dtype
            )
        s = ScenarioSettings(
            scenario="single-stream", min_duration_s=0.0, min_queries=queries, warmup_queries=5, seed=0
        )
        rec = run_benchmark(prepared, data, qsl, 1, BenchOptions(scenario=s, overhead_queries=200))
        post_us = rec.overhead.postprocess_mean_us
        assert post_us is not None  # set by every run_benchmark since the latency ends at the response
        conversion = prepared.runner.notes.get("conversion") or {}
        rows.append(
            Row(
                runtime,
                rec.latency.percentiles["p50"].value,
                rec.latency.percentiles["p90"].value,
                rec.queries,
                post_us / 1000,
                prepared.runner.load_seconds,
                None if conversion.get("cached", True) else float(conversion["seconds"]),
            )
        )
    return rows


def print_rows(manifest: str, images: int, rows: list[Row]) -> None:
    best = min(r.p50 for r in rows)
    print(f"\n{manifest} ({images} images in the library, 1 thread, single-stream)")
    print(
        f"{'runtime':<12} {'p50 ms':>8} {'p90 ms':>8} {'ratio':>6} {'post ms':>8} {'queries':>7} {'load s':>7}"
        "  conversion"
    )
    for r in rows:
        conv = "cached/none" if r.conversion_s is None else f"tf2onnx {r.conversion_s:.1f} s"
        print(
            f"{r.runtime:<12} {r.p50:8.2f} {r.p90:8.2f} {r.p50 / best:5.2f}x {r.post_ms:8.3f} {r.queries:>7} "
            f"{r.load_s:7.2f}  {conv}"
        )


def coco_cost() -> None:
    """evaluate SSDLite on coco-val-mini, then the COCO numbers alone and with the default bootstrap."""
    from repliscope.metrics.coco import DEFAULT_REPLICATES, evaluate_coco

    data = resolve_dataset(COCO)
    prepared = prepare(
        REPO / "examples" / "ssdlite-mobilenet-v2-coco.yaml", RunSettings(runtime="tensorflow", threads=1, batch_size=8)
    )
    start = time.perf_counter()
    record = evaluate(prepared, data)
    total = time.perf_counter() - start
    detections = sum(len(s.detections or []) for s in record.samples)
    timings, used = {}, {}
    for replicates in (1, DEFAULT_REPLICATES):
        start = time.perf_counter()
        result = evaluate_coco(record.samples, data, bootstrap=replicates)
        timings[replicates] = time.perf_counter() - start
        used[replicates] = result.replicates
    ap = next(m for m in result.metrics if m.name == "AP")
    n = used[DEFAULT_REPLICATES]
    print(f"\nCOCO on coco-val-mini: {len(record.samples)} images, {detections} detections (SSDLite, tensorflow)")
    print(f"evaluate (load + loop + metrics with {DEFAULT_REPLICATES} replicates): {total:.2f} s")
    extra = timings[DEFAULT_REPLICATES] - timings[1]
    print(
        f"evaluate_coco, 12 numbers + per class, {used[1]} replicate(s): {timings[1]:.2f} s; {DEFAULT_REPLICATES} "
        f"asked, {n} run: {timings[DEFAULT_REPLICATES]:.2f} s (bootstrap {extra:.2f} s, "
        f"{extra / max(1, n - used[1]) * 1000:.1f} ms per replicate); AP {ap.value:.4f} [{ap.ci_low:.4f}, "
        f"{ap.ci_high:.4f}]"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queries", type=int, default=200, help="single-stream queries per runtime (MTCNN: 1/4)")
    parser.add_argument("--skip-coco", action="store_true", help="skip the COCO evaluation timing")
    args = parser.parse_args()
    if not DATA.is_dir():
        raise SystemExit(f"needs the shared data in {DATA}")
    for manifest, runtimes, spec, limit, share in MODELS:
        data = resolve_dataset(spec, limit=limit)
        rows = bench_model(manifest, runtimes, data, max(10, int(args.queries * share)))
        print_rows(manifest, len(data.samples), rows)
    if not args.skip_coco:
        coco_cost()


if __name__ == "__main__":
    main()
