"""Stored benchmarks through ``repliscope runs``: listed with ``--kind benchmark`` (80 columns, one line each),
counted under the runs list, shown by ``runs show ID``."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from repliscope.bench.scenarios import ScenarioSettings
from repliscope.cli.main import app
from repliscope.store.repository import RunStore
from tests.bench._fakes import Base, run_fake

runner = CliRunner(env={"COLUMNS": "80"})


def test_runs_list_and_show_benchmarks(base: Base) -> None:
    single, _ = run_fake(base, ScenarioSettings("single-stream", min_duration_s=0.0, min_queries=64, warmup_queries=0))
    offline, _ = run_fake(
        base, ScenarioSettings("offline", min_duration_s=0.0, min_queries=16, warmup_queries=0, samples_per_query=16)
    )
    with RunStore(None) as store:
        store.save_benchmark(single)
        store.save_benchmark(offline)
    res = runner.invoke(app, ["runs", "list"])
    assert res.exit_code == 0 and "no stored runs" in res.stdout
    assert "and 2 stored benchmarks: repliscope runs list --kind benchmark" in res.stdout
    res = runner.invoke(app, ["runs", "list", "--kind", "benchmark"])
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[2].startswith("every benchmark: model efficientnet-lite0 1.0.0")  # the scenarios differ
    rows = {line.split()[0]: line for line in lines if line[:8] in (single.benchmark_id[:8], offline.benchmark_id[:8])}
    assert len(rows) == 2 and all(len(line) <= 80 for line in lines)
    p90 = single.latency.percentiles["p90"].value
    assert f"p90 {p90:.2f} ms" in rows[single.benchmark_id[:8]] and "single-stream" in rows[single.benchmark_id[:8]]
    assert f"{offline.throughput_samples_per_second:.1f}/s" in rows[offline.benchmark_id[:8]]
    listed = json.loads(runner.invoke(app, ["runs", "list", "--kind", "benchmark", "--json"]).stdout)
    assert [b["benchmark_id"] for b in listed] == [offline.benchmark_id, single.benchmark_id]
    shown = runner.invoke(app, ["runs", "show", single.benchmark_id[:10]])
    assert shown.exit_code == 0 and "efficientnet-lite0 single-stream on fake" in shown.stdout
    full = json.loads(runner.invoke(app, ["runs", "show", single.benchmark_id, "--json"]).stdout)
    assert full["queries"] == 64 and len(full["latencies_us"]) == 64
    res = runner.invoke(app, ["runs", "list", "--kind", "benchmark", "--sweep", "abcdef"])
    assert res.exit_code == 2 and "benchmarks belong to no sweep" in res.output
