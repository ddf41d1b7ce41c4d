"""benchmarks/bench_store_queries.py works end to end on a small store (the figure itself is measured by hand)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from repliscope.store import RunQuery, RunStore

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_store_queries.py"


def test_bench_fills_and_queries(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("bench_store_queries", BENCH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    with RunStore(f"sqlite:///{tmp_path / 'b.db'}") as store:
        bench.fill(store, 300, 5)
        rows, total = store.query_runs(RunQuery(), page_size=10)
        assert total == 300 and len(rows) == 10 and rows[0].created_at >= rows[-1].created_at
        some = store.get(rows[0].run_id)  # a generated row reads back as a full record
        assert some.run_id == rows[0].run_id and len(some.samples) == 5
        results = bench.measure(store)
    assert set(results) == set(bench.QUERIES)
    assert sum(r["total"] for r in results.values()) > 0
    assert all(0 < r["p50"] <= r["p95"] <= r["max"] for r in results.values())
