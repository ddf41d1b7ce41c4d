"""Filtered run queries on a store of N realistic records (default 100,000): p50 / p95 / max per query.

The records are EfficientNet-Lite0-sized evaluation records (the store tests' hand-made record: 20 samples,
pipeline, provenance, metrics with intervals, a claim verdict) varied over 12 models x 3 versions, 3 runtimes
with 2 framework versions each, 4 CPUs, 5 datasets, 2 kinds and the 3 verdicts, spread over a year. Every row
is what ``RunStore.save`` writes (``_run_row`` + the sample rows); they are inserted in bulk batches (thousands
of rows a transaction), which is the only difference from calling ``save`` per record. Queries go through
``RunStore.query_runs`` (page 1, 50 rows, newest first, with the total count), each timed REPEAT times.
Usage: python benchmarks/bench_store_queries.py [--n 100000] [--samples-per-run 20] [--db URL] [--postgres URL]
(--db: a URL of an EMPTY database; default: a temporary SQLite file; --postgres: also run on that PostgreSQL
database, whose tables are dropped first and after).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import MetaData, insert

from repliscope.evaluation.record import ClaimVerdict, EvaluationRecord
from repliscope.store import RunQuery, RunStore
from repliscope.store.models import RunRow, SampleRow
from repliscope.store.repository import _run_row

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the realistic record of the store tests
from tests.store.records import TOP1_A, TOP1_B, make_record

MODELS = [
    f"{family}-{size}"
    for family in ("efficientnet-lite", "mobilenet-v3", "resnet", "blazeface")
    for size in ("s", "m", "l")
]
VERSIONS = ["1.0.0", "1.1.0", "2.0.0"]
RUNTIMES = {"onnxruntime": ["1.31.1", "1.30.0"], "torch": ["2.13.0", "2.12.1"], "opencv_dnn": ["4.12.0", "4.11.0"]}
CPUS = ["AMD EPYC 7B13", "Intel(R) Xeon(R) Gold 6130 CPU @ 2.10GHz", "Apple M3 Pro", "AMD Ryzen 9 7950X"]
DATASETS = ["foolbox_imagenet", "imagenet-sample", "coco-val-mini", "voc2007-test", "faces"]
VERDICTS = ["consistent", "inconsistent", "not comparable"]
T0 = datetime(2025, 11, 1, tzinfo=UTC)
BATCH = 2000
REPEAT = 20
QUERIES: dict[str, RunQuery] = {
    "model": RunQuery(model="resnet-m"),
    "model+version": RunQuery(model="mobilenet-v3-s", version="2.0.0"),
    "runtime": RunQuery(runtime="torch"),
    "runtime+framework_version": RunQuery(runtime="onnxruntime", framework_version="1.30.0"),
    "dataset+runtime": RunQuery(dataset="coco-val-mini", runtime="opencv_dnn"),
    "hardware": RunQuery(hardware="Intel(R) Xeon(R) Gold 6130 CPU @ 2.10GHz"),
    "kind": RunQuery(kind="pitfall_variant"),
    "verdict": RunQuery(verdict="inconsistent"),
    "date range (1 week)": RunQuery(created_from=T0 + timedelta(days=100), created_to=T0 + timedelta(days=107)),
    "model+runtime+verdict+month": RunQuery(
        model="efficientnet-lite-s",
        runtime="torch",
        verdict="consistent",
        created_from=T0 + timedelta(days=30),
        created_to=T0 + timedelta(days=60),
    ),
}


def _bases(rng: random.Random) -> list[EvaluationRecord]:
    """A pool of distinct realistic records (every combination appears); rows reuse their JSON."""
    a, b = make_record("0" * 32, TOP1_A), make_record("1" * 32, TOP1_B)
    pool = []
    for i in range(400):
        base = a if i % 2 else b
        runtime = rng.choice(list(RUNTIMES))
        claim = ClaimVerdict(**{**base.claims[0].model_dump(), "verdict": VERDICTS[i % 3]})
        pool.append(
            base.model_copy(
                update={
                    "manifest": base.manifest.model_copy(
                        update={"name": MODELS[i % len(MODELS)], "version": VERSIONS[(i // 12) % 3]}
                    ),
                    "runtime": {
                        **base.runtime,
                        "runtime": runtime,
                        "framework": runtime,
                        "framework_version": RUNTIMES[runtime][(i // 7) % 2],
                    },
                    "hardware": {**base.hardware, "cpu_model": CPUS[(i // 5) % 4]},
                    "dataset": {**base.dataset, "name": DATASETS[(i // 3) % 5]},
                    "kind": "pitfall_variant" if i % 10 == 0 else "evaluation",
                    "claims": [claim],
                }
            )
        )
    return pool


def fill(store: RunStore, n: int, samples_per_run: int, seed: int = 0) -> float:
    """Insert ``n`` records in bulk batches -> seconds taken."""
    rng = random.Random(seed)
    pool = _bases(rng)
    templates = []
    for rec in pool:
        row = _run_row(rec)
        columns = {c.name: getattr(row, c.name) for c in RunRow.__table__.columns}
        samples = [s.model_dump(mode="json") for s in rec.samples][:samples_per_run]
        templates.append((columns, samples))
    start = time.perf_counter()
    span = 365 * 24 * 3600
    with store.engine.begin() as conn:
        for first in range(0, n, BATCH):
            runs, samples = [], []
            for _ in range(first, min(n, first + BATCH)):
                columns, sample_rows = templates[rng.randrange(len(templates))]
                run_id = f"{rng.getrandbits(128):032x}"
                created = (T0 + timedelta(seconds=rng.randrange(span))).replace(tzinfo=None)
                runs.append(
                    {
                        **columns,
                        "run_id": run_id,
                        "created_at": created,
                        "record": {**columns["record"], "run_id": run_id, "created_at": created.isoformat()},
                    }
                )
                samples.extend({"run_id": run_id, "position": p, **s} for p, s in enumerate(sample_rows))
            conn.execute(insert(RunRow), runs)
            if samples:
                conn.execute(insert(SampleRow), samples)
    return time.perf_counter() - start


def measure(store: RunStore) -> dict[str, dict[str, Any]]:
    out = {}
    for name, query in QUERIES.items():
        store.query_runs(query)  # warm the cache
        times = []
        for _ in range(REPEAT):
            t0 = time.perf_counter()
            rows, total = store.query_runs(query, sort="-created_at", page=1, page_size=50)
            times.append((time.perf_counter() - t0) * 1000)
        times.sort()
        out[name] = {
            "total": total,
            "rows": len(rows),
            "p50": statistics.median(times),
            "p95": times[min(len(times) - 1, round(0.95 * len(times)) - 1)],
            "max": times[-1],
        }
    return out


def run(url: str, n: int, samples_per_run: int, label: str) -> float:
    with RunStore(url) as store:
        seconds = fill(store, n, samples_per_run)
        print(f"{label}: {n} records ({samples_per_run} samples each) inserted in {seconds:.1f} s")
        if store.engine.dialect.name == "postgresql":
            # what autovacuum does shortly after a bulk load: planner statistics + the visibility map that
            # index-only counts need (right after the load, before it, the worst p95 was 559 ms)
            with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                conn.exec_driver_sql("VACUUM ANALYZE runs")
            print(f"{label}: VACUUM ANALYZE runs done")
        results = measure(store)
    print(f"{'query':32s} {'matching':>9s} {'p50 ms':>8s} {'p95 ms':>8s} {'max ms':>8s}")
    for name, r in results.items():
        print(f"{name:32s} {r['total']:9d} {r['p50']:8.2f} {r['p95']:8.2f} {r['max']:8.2f}")
    all_p95 = max(r["p95"] for r in results.values())
    print(
        f"{label}: worst p95 over the {len(results)} filtered queries: {all_p95:.2f} ms "
        f"(page of 50 + total count, {REPEAT} runs each)"
    )
    return all_p95


def _wipe(url: str) -> None:
    from sqlalchemy import create_engine

    engine = create_engine(url)
    meta = MetaData()
    meta.reflect(engine)
    meta.drop_all(engine)
    engine.dispose()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--samples-per-run", type=int, default=20)
    ap.add_argument("--db", default=None, help="URL of an empty database (default: a temporary SQLite file)")
    ap.add_argument("--postgres", default=None, help="also run on this PostgreSQL URL (tables dropped)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = args.db or f"sqlite:///{Path(tmp) / 'bench.db'}"
        run(url, args.n, args.samples_per_run, "sqlite" if url.startswith("sqlite") else url.split(":")[0])
    if args.postgres:
        _wipe(args.postgres)
        try:
            run(args.postgres, args.n, args.samples_per_run, "postgresql")
        finally:
            _wipe(args.postgres)


if __name__ == "__main__":
    main()
