"""Does an evaluation scale to 50,000 samples? Time per sample, memory per sample, store inserts, interactive
commands on the biggest run, and COCO mAP of 5,000 images x 100 detections, all measured in this one run.

Every figure is printed beside a ratio measured in the same run (machines are noisy, and this one may be shared):
- ladder: for each size N (``--sizes``, default 1000,5000,20000,50000) a fresh child process evaluates N samples:
  the 1000-image ``../shared/data/imagenet-sample`` repeated under distinct names (``<name>-r<k>.JPEG``, a
  temporary folder of symlinks). Fixed plan, no calibration: pipelined, batch 32, 2 pre-processing threads x 2
  runtime threads. Default model: ``examples/tiny-resnet.yaml`` on ONNX Runtime (32x32 input: the loop is decode
  and resize, so 50,000 samples take minutes, not an hour; ``--manifest examples/efficientnet-lite0.yaml`` for
  Lite0), labels not read (``label_rule none``: the tiny model has 10 classes). Reported: seconds per sample of
  the measured loop and its ratio to the smallest size, also divided by a reference timed in the same child
  (64 samples pre-processed and inferred one by one, before and after the loop: it cancels the machine's load of
  that moment; flat: within 1.10) and the CPU seconds of all its threads per sample (``getrusage``: what a
  busy machine changes least), the child's peak RSS
  (``resource.getrusage``) and the growth per sample between the smallest and each bigger size (budget 10 KB).
- store: the child saves its record into a SQLite file and, when a throw-away PostgreSQL can be started (as
  ``.ci/postgres.sh`` does; ``--postgres URL`` to use one, ``--postgres off`` to skip), into PostgreSQL:
  insert seconds and microseconds per sample row.
- interactive: ``repliscope runs show`` / ``report`` / ``runs compare`` (against a copy with 1 % of the top-1
  changed) of the biggest and of the smallest run, each as a user runs it (a new process, start-up included),
  with ``repliscope --help`` as the start-up floor; target 2 s on a quiet machine, ratio biggest / smallest ~1.
  Then the same of ImageNet-shaped copies of those runs (:func:`save_labelled_pair`: labelled, 1000 classes,
  top-5; the tiny model's runs are unlabelled): the case of a 50,000-image ImageNet val run.
- mAP: ``synthetic_detection`` ground truth of 5,000 images, 100 detections per image jittered from it (seeded),
  the 12 COCO numbers (repliscope.metrics.coco; target 3 s) against faster-coco-eval on the same input, and one
  bootstrap replicate (``evaluate_coco`` draws ``CocoResampler.bounded`` of them).
Usage: python benchmarks/bench_scale.py [--sizes 1000,5000] [--manifest M] [--runtime R] [--data DIR]
       [--postgres auto|off|URL] [--skip-ladder] [--skip-map] [--map-images 5000]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "data" / "imagenet-sample"
DEFAULT_MANIFEST = REPO / "examples" / "tiny-resnet.yaml"
CLI = [sys.executable, "-m", "repliscope.cli.main"]
KB_PER_SAMPLE_BUDGET = 10.0
FLAT = 1.10
INTERACTIVE_SECONDS = 2.0
MAP_SECONDS = 3.0
PG_PORT = 55433


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.1f} / {five:.1f} (1 / 5 min) on {os.cpu_count()} logical cores"


def rss_kb() -> int:
    """Current resident set size of this process in KiB (Linux /proc)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def link_folder(source: Path, n: int, into: Path) -> Path:
    """``n`` symlinks to the images of ``source`` (cycled), named ``<stem>-r<k><suffix>`` (the wnid prefix kept)."""
    images = sorted(p for p in source.iterdir() if p.suffix.lower() in (".jpeg", ".jpg", ".png"))
    folder = into / f"links-{n}"
    folder.mkdir()
    for i in range(n):
        src = images[i % len(images)]
        (folder / f"{src.stem}-r{i // len(images):03d}{src.suffix}").symlink_to(src.resolve())
    return folder


# ---------------------------------------------------------------------------------------------------- the child


REFERENCE_SAMPLES = 64


def reference_seconds(prepared: Any, dataset: Any) -> float:
    """Seconds per sample to read and pre-process the first :data:`REFERENCE_SAMPLES` samples on one thread and
    infer them one by one: the same work as the loop at a fixed size, timed in the same process just before and
    after it, so a child's loop time divided by it cancels the machine's load of that moment."""
    import numpy as np

    from repliscope.evaluation.engine import prepare_sample
    from repliscope.evaluation.run import input_shape

    samples = dataset.samples[:REFERENCE_SAMPLES]
    start = time.perf_counter()
    for sample in samples:
        data, _ = prepare_sample(prepared.pipeline, sample, input_shape(prepared))
        if data is not None:
            prepared.runner.infer(np.expand_dims(data, 0))
    return (time.perf_counter() - start) / len(samples)


def child(args: argparse.Namespace) -> None:
    """Evaluate one folder and save the record; print one JSON line of measurements."""
    from repliscope.datasets import resolve_dataset
    from repliscope.evaluation.run import RunSettings, evaluate, prepare
    from repliscope.store import RunStore

    settings = RunSettings(
        runtime=args.runtime, threads=2, batch_size=32, prep_workers=2, cache_dir=Path(args.cache), allow_download=False
    )
    prepared = prepare(args.manifest, settings)
    dataset = resolve_dataset(str(args.child), label_rule="none" if args.unlabelled else None)
    prepared.runner.load()
    reference = reference_seconds(prepared, dataset)
    before = rss_kb()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    record = evaluate(prepared, dataset)
    done = resource.getrusage(resource.RUSAGE_SELF)
    peak = done.ru_maxrss
    reference = (reference + reference_seconds(prepared, dataset)) / 2
    after = rss_kb()
    out: dict[str, Any] = {
        "n": len(dataset),
        "failed": record.counts["failed"],
        "loop_seconds": record.timings.loop_seconds,
        "reference_seconds": reference,
        "cpu_seconds": done.ru_utime + done.ru_stime - usage.ru_utime - usage.ru_stime,
        "rss_before_kb": before,
        "rss_after_kb": after,
        "peak_rss_kb": peak,
        "record_json_bytes": len(record.model_dump_json()),
        "run_id": record.run_id,
    }
    for name, url in (("sqlite", args.sqlite), ("postgresql", args.pg)):
        if not url:
            continue
        with RunStore(url) as store:
            start = time.perf_counter()
            store.save(record)
            out[f"insert_{name}_seconds"] = time.perf_counter() - start
    if args.copy_for_compare:  # run B: the same record with 1 % of the top-1 changed (another runtime, say)
        changed = record.model_copy(deep=True)
        changed.run_id = "b" + record.run_id[1:]
        for s in changed.samples[::100]:
            if s.topk_indices:
                s.topk_indices = [s.topk_indices[1], s.topk_indices[0], *s.topk_indices[2:]]
        with RunStore(args.sqlite) as store:
            store.save(changed)
        out["run_b"] = changed.run_id
        out["labelled_a"], out["labelled_b"] = save_labelled_pair(record, args.sqlite)
    print("RESULT " + json.dumps(out), flush=True)


def save_labelled_pair(record: Any, url: str) -> tuple[str, str]:
    """Store two ImageNet-shaped copies of ``record`` (same sample ids): every sample labelled from 1000 classes,
    top-5 distinct indices and float32 softmax-like probabilities (seeded), about 75 % top-1, every 997th sample
    failed; the second with 1 % of the top-1 changed. What a 50,000-image ImageNet val run and its re-run look like to
    ``report`` / ``runs compare`` (the tiny model's own runs are unlabelled, with 10 classes). Returns both ids."""
    import numpy as np

    from repliscope.evaluation.record import SamplePrediction, result_hash
    from repliscope.store import RunStore
    from repliscope.tasks.base import get_task

    rng = np.random.default_rng(50)
    n = len(record.samples)
    labels = rng.integers(0, 1000, n)
    hit = rng.random(n) < 0.75
    tops = np.empty((n, 5), np.int64)
    for i in range(n):  # five distinct classes, as a real top-k; the label first in a hit
        row = rng.choice(1000, 5, replace=False)
        if hit[i]:
            rest = row[row != labels[i]][:4]
            row = np.concatenate(([labels[i]], rest))
        tops[i] = row
    probs = np.sort(rng.dirichlet(np.ones(6), n).astype(np.float32)[:, :5], axis=1)[:, ::-1]
    samples = []
    for i, s in enumerate(record.samples):
        if i % 997 == 5:
            samples.append(SamplePrediction(sample_id=s.sample_id, label=int(labels[i]), error="SampleError: x"))
        else:
            samples.append(
                SamplePrediction(
                    sample_id=s.sample_id,
                    label=int(labels[i]),
                    topk_indices=tops[i].tolist(),
                    topk_probs=probs[i].astype(np.float64).tolist(),
                )
            )
    task = get_task(record.task)
    ids = []
    for prefix in ("c", "d"):
        if prefix == "d":  # the re-run: 1 % of the top-1 swapped with the second
            for s in samples[::100]:
                if s.topk_indices:
                    s.topk_indices = [s.topk_indices[1], s.topk_indices[0], *s.topk_indices[2:]]
        failed = sum(s.error is not None for s in samples)
        copy = record.model_copy(
            update={
                "run_id": prefix + record.run_id[1:],
                "samples": samples,
                "metrics": task.metrics(samples),
                "result_hash": result_hash(samples),
                "counts": {"total": n, "evaluated": n - failed, "failed": failed, "labelled": n},
            },
            deep=True,
        )
        with RunStore(url) as store:
            store.save(copy)
        ids.append(copy.run_id)
    return ids[0], ids[1]


# ---------------------------------------------------------------------------------------------------- the parent


@contextlib.contextmanager
def throwaway_postgres() -> Iterator[str | None]:
    """A PostgreSQL server on 127.0.0.1:PG_PORT in a temporary folder for the duration (None, with a message, when the
    binaries or the ``postgres`` user are missing or it does not start)."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    initdb = str(found[-1]) if found else shutil.which("initdb")
    if not initdb:
        print("postgresql: no initdb found; PostgreSQL inserts skipped")
        yield None
        return
    pg_ctl = str(Path(initdb).with_name("pg_ctl"))
    data = Path(tempfile.mkdtemp(prefix="bench-scale-pg-"))  # its own folder: the postgres user must reach it
    as_postgres = os.geteuid() == 0
    if as_postgres:
        shutil.chown(data, "postgres")

    def run(cmd: str) -> bool:
        full = ["su", "postgres", "-s", "/bin/sh", "-c", cmd] if as_postgres else ["/bin/sh", "-c", cmd]
        return subprocess.run(full, capture_output=True, text=True).returncode == 0

    started = run(f"{initdb} -D {data} -A trust -U postgres >/dev/null") and run(
        f"{pg_ctl} -D {data} -l {data}/log -w -o '-p {PG_PORT} -k /tmp -c listen_addresses=127.0.0.1' start"
    )
    try:
        if not started:
            print("postgresql: the throw-away server did not start; PostgreSQL inserts skipped")
            yield None
        else:
            yield f"postgresql+psycopg://postgres@127.0.0.1:{PG_PORT}/postgres"
    finally:
        if started:
            run(f"{pg_ctl} -D {data} -m fast stop >/dev/null")
        shutil.rmtree(data, ignore_errors=True)


def run_child(args: argparse.Namespace, folder: Path, sqlite: str, pg: str | None, copy: bool) -> dict[str, Any]:
    cmd = [
        sys.executable,
        __file__,
        "--child",
        str(folder),
        "--manifest",
        str(args.manifest),
        "--runtime",
        args.runtime,
        "--cache",
        args.cache,
        "--sqlite",
        sqlite,
    ]
    if pg:
        cmd += ["--pg", pg]
    if copy:
        cmd.append("--copy-for-compare")
    if args.unlabelled:
        cmd.append("--unlabelled")
    proc = subprocess.run(cmd, capture_output=True, text=True)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"child for {folder} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(lines[0][len("RESULT ") :])
    return result


def timed_cli(argv: list[str], repeat: int = 2) -> float:
    """Best wall seconds of ``repliscope argv`` over ``repeat`` runs (a new process each; output discarded)."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        proc = subprocess.run([*CLI, *argv], capture_output=True, text=True)
        seconds = time.perf_counter() - start
        if proc.returncode not in (0, 1):
            raise SystemExit(f"repliscope {' '.join(argv)} failed:\n{proc.stderr[-2000:]}")
        best = min(best, seconds)
    return best


def ladder(args: argparse.Namespace, tmp: Path, pg: str | None) -> None:
    sizes = sorted(args.sizes)
    sqlite = f"sqlite:///{tmp / 'runs.db'}"
    print(
        f"\n== ladder: {args.manifest.name} on {args.runtime}, pipelined batch 32, 2 x 2 threads "
        f"({'unlabelled' if args.unlabelled else 'labelled'}) =="
    )
    warm = link_folder(args.data, 64, tmp)  # fills the export / conversion cache: no size pays for it
    run_child(args, warm, f"sqlite:///{tmp / 'warm.db'}", None, copy=False)
    shutil.rmtree(warm)
    rows = []
    for n in sizes:
        folder = link_folder(args.data, n, tmp)
        started = time.perf_counter()
        r = run_child(args, folder, sqlite, pg, copy=n in (sizes[0], sizes[-1]))
        r["wall"] = time.perf_counter() - started
        shutil.rmtree(folder)
        rows.append(r)
        print(
            f"  {n:>6} samples: loop {r['loop_seconds']:.1f} s, {1000 * r['loop_seconds'] / n:.3f} ms/sample; peak RSS "
            f"{r['peak_rss_kb'] / 1024:.0f} MiB; child wall {r['wall']:.0f} s; {load()}",
            flush=True,
        )
    base = rows[0]

    def normalised(r: dict[str, Any]) -> float:  # loop seconds per sample / the child's reference seconds per sample
        return float(r["loop_seconds"] / r["n"] / r["reference_seconds"])

    def cpu(r: dict[str, Any]) -> float:  # CPU seconds (all threads) of evaluate() per sample
        return float(r["cpu_seconds"] / r["n"])

    per_base = base["loop_seconds"] / base["n"]
    print(
        "\n  N        ms/sample  ratio to N0  loop/reference  its ratio to N0  CPU ms/sample  its ratio to N0  "
        "peak RSS MiB  KB/sample vs N0  record JSON B/sample"
    )
    for r in rows:
        per = r["loop_seconds"] / r["n"]
        growth = (r["peak_rss_kb"] - base["peak_rss_kb"]) / (r["n"] - base["n"]) * 1.024 if r is not base else 0.0
        print(
            f"  {r['n']:<8} {1000 * per:9.3f}  {per / per_base:11.3f}  {normalised(r):14.3f}  "
            f"{normalised(r) / normalised(base):15.3f}  {1000 * cpu(r):13.3f}  {cpu(r) / cpu(base):15.3f}  "
            f"{r['peak_rss_kb'] / 1024:12.0f}  {growth:15.2f}  "
            f"{r['record_json_bytes'] / r['n']:20.0f}"
        )
    ratios = [normalised(r) / normalised(base) for r in rows]
    cpu_ratios = [cpu(r) / cpu(base) for r in rows]
    growths = [
        (r["peak_rss_kb"] - base["peak_rss_kb"]) / (r["n"] - base["n"]) * 1.024 for r in rows[1:] if r["n"] > base["n"]
    ]
    worst = max(max(ratios), max(cpu_ratios))  # growth against the smallest size; a per-sample time that
    # falls with N (the run's fixed costs spread over more samples) is not a scaling problem
    print(
        f"  time per sample against N0 (loop / reference): at most {max(ratios):.3f}, at N={sizes[-1]} "
        f"{ratios[-1]:.3f}; CPU time per sample against N0: at most {max(cpu_ratios):.3f}, at N={sizes[-1]} "
        f"{cpu_ratios[-1]:.3f} -> {'flat or falling' if worst <= FLAT else 'GROWS'} (flat: <= {FLAT}; max / min "
        f"over sizes {max(ratios) / min(ratios):.3f} and {max(cpu_ratios) / min(cpu_ratios):.3f}); "
        f"peak RSS growth: at most {max(growths, default=0):.2f} KB/sample (budget {KB_PER_SAMPLE_BUDGET})"
    )
    print("\n== store inserts (record of the run saved by the child) ==")
    for r in rows:
        parts = []
        for name in ("sqlite", "postgresql"):
            key = f"insert_{name}_seconds"
            if key in r:
                parts.append(f"{name} {r[key]:.2f} s ({1e6 * r[key] / r['n']:.0f} us/sample)")
        print(f"  {r['n']:>6} samples: " + "; ".join(parts))
    if pg is None:
        print("  (PostgreSQL: not measured, see above)")
    interactive(rows[0], rows[-1], sqlite)


def interactive(small: dict[str, Any], big: dict[str, Any], sqlite: str) -> None:
    print(f"\n== interactive commands, a new process each (best of 2), {load()} ==")
    floor = timed_cli(["--help"])
    print(f"  start-up floor `repliscope --help`: {floor:.2f} s")
    out = Path(tempfile.mkdtemp(prefix="bench-scale-report-"))
    for a_key, b_key, what in (("run_id", "run_b", "the runs"), ("labelled_a", "labelled_b", "ImageNet-shaped")):
        print(
            f"  {what}"
            + (
                ": the same sample ids labelled from 1000 classes, top-5, ~75 % top-1 (save_labelled_pair)"
                if a_key != "run_id"
                else ""
            )
        )
        for name, argv in (
            ("runs show", ["runs", "show", "{a}"]),
            ("report", ["report", "{a}", "-o", str(out / "r.html")]),
            ("runs compare", ["runs", "compare", "{a}", "{b}"]),
        ):
            times = []
            for r in (small, big):
                cmd = [x.format(a=r[a_key][:12], b=r[b_key][:12]) for x in argv] + ["--db", sqlite]
                times.append(timed_cli(cmd))
            print(
                f"    {name:<13} {small['n']:>6} samples {times[0]:.2f} s; {big['n']:>6} samples {times[1]:.2f} s "
                f"(ratio {times[1] / times[0]:.2f}; minus start-up {max(times[1] - floor, 0):.2f} s; "
                f"target {INTERACTIVE_SECONDS} s quiet)"
            )
    shutil.rmtree(out)


def map_timing(n_images: int) -> None:
    import numpy as np

    from repliscope.datasets import resolve_dataset
    from repliscope.evaluation.record import Detection, SamplePrediction
    from repliscope.metrics.bootstrap import CocoResampler
    from repliscope.metrics.coco import coco_dicts, coco_inputs, faster_coco_eval

    print(f"\n== COCO mAP: {n_images} images x 100 detections, {load()} ==")
    dataset = resolve_dataset("synthetic_detection", seed=3, num_images=n_images)
    rng = np.random.default_rng(5)
    cats = sorted(dataset.categories or {})
    preds = []
    for s in dataset.samples:
        objects = s.objects or ()
        dets = []
        for j in range(100):  # jittered copies of the ground truth, the rest random boxes; scores seeded
            if objects:
                x1, y1, x2, y2 = objects[j % len(objects)].box
                w, h = x2 - x1, y2 - y1
                dx, dy, sw, sh = rng.normal(0, 0.1 + 0.02 * (j // len(objects)), 4)
                box = [x1 + dx * w, y1 + dy * h, x2 + dx * w + sw * w, y2 + dy * h + sh * h]
                cls = objects[j % len(objects)].class_id if rng.random() > 0.1 else int(rng.choice(cats))
            else:
                x, y = rng.random(2) * 100
                box, cls = [x, y, x + 10, y + 10], int(rng.choice(cats))
            dets.append(Detection(box=[float(v) for v in box], score=float(rng.random()), class_id=cls))
        preds.append(SamplePrediction(sample_id=s.id, label=None, detections=dets))
    start = time.perf_counter()
    inputs = coco_inputs(preds, dataset)
    resampler = CocoResampler(inputs.truths, inputs.detections, sorted(inputs.categories))
    ours, _, _ = resampler.cocoeval_values()
    t_ours = time.perf_counter() - start
    start = time.perf_counter()
    ref, _ = faster_coco_eval(*coco_dicts(coco_inputs(preds, dataset)))
    t_ref = time.perf_counter() - start
    start = time.perf_counter()
    resampler.stats(
        np.random.default_rng(0).multinomial(len(inputs.samples), np.full(len(inputs.samples), 1 / n_images))
    )
    t_rep = time.perf_counter() - start
    print(
        f"  repliscope (inputs + matching + 12 numbers): {t_ours:.2f} s (target {MAP_SECONDS} s quiet); "
        f"faster-coco-eval on the same input: {t_ref:.2f} s; ratio {t_ours / t_ref:.2f}\n"
        f"  AP {ours[0]:.6f} vs {ref[0]:.6f} (max |difference| of the 12: {np.abs(ours - ref).max():.1e})\n"
        f"  one bootstrap replicate: {t_rep:.2f} s; evaluate_coco draws {resampler.bounded(500)} "
        f"(about {t_rep * resampler.bounded(500):.0f} s more)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")], default=[1000, 5000, 20000, 50000])
    parser.add_argument("--manifest", type=Path, default=DEFAULT_MANIFEST)
    parser.add_argument("--runtime", default="onnxruntime")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--postgres", default="auto", help="auto (start a throw-away server) | off | a URL")
    parser.add_argument("--skip-ladder", action="store_true")
    parser.add_argument("--skip-map", action="store_true")
    parser.add_argument("--map-images", type=int, default=5000)
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "repliscope-bench-scale-cache"))
    parser.add_argument("--sqlite", help=argparse.SUPPRESS)
    parser.add_argument("--pg", help=argparse.SUPPRESS)
    parser.add_argument("--copy-for-compare", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--unlabelled", action=argparse.BooleanOptionalAction, default=None)
    args = parser.parse_args()
    if args.unlabelled is None:  # the tiny model has 10 classes: ImageNet labels would be refused
        args.unlabelled = args.manifest.name.startswith("tiny-")
    if args.child is not None:
        child(args)
        return
    print(f"bench_scale: {load()}; sizes {args.sizes}")
    if not args.skip_ladder:
        if not args.data.is_dir():
            raise SystemExit(f"no dataset at {args.data}")
        with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
            if args.postgres == "off":
                ladder(args, Path(tmp), None)
            elif args.postgres != "auto":
                ladder(args, Path(tmp), args.postgres)
            else:
                with throwaway_postgres() as pg:
                    ladder(args, Path(tmp), pg)
    if not args.skip_map:
        map_timing(args.map_images)
    print(f"\nbench_scale done: {load()}")


if __name__ == "__main__":
    main()
