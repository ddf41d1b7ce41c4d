"""Scenario semantics on a virtual clock with deterministic latencies: exact latencies, query counts, order."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import kstest

from repliscope.bench.clock import VirtualClock
from repliscope.bench.scenarios import ScenarioSettings, poisson_schedule, run_scenario
from repliscope.bench.stats import percentile
from repliscope.errors import RepliscopeError
from tests.bench._fakes import UNIT, FakeIssue

CYCLE = [k * UNIT for k in range(1, 11)]  # 1..10 units, 55 units per 10 queries


def settings(scenario: str = "single-stream", **kw: object) -> ScenarioSettings:
    base: dict[str, object] = {"min_duration_s": 0.0, "min_queries": 100, "warmup_queries": 0}
    return ScenarioSettings(scenario=scenario, **{**base, **kw})  # type: ignore[arg-type]


def test_single_stream_exact_percentiles_and_count() -> None:
    clock = VirtualClock()
    issue = FakeIssue(clock, CYCLE)
    run = run_scenario(issue, 20, settings(), clock)
    assert run.queries == 100 and run.samples == 100 and all(len(c) == 1 for c in issue.calls)
    assert run.latencies_s.tolist() == CYCLE * 10
    ms = run.latencies_s / UNIT  # in units
    assert (percentile(ms, 0.5), percentile(ms, 0.9), percentile(ms, 0.99)) == (6.0, 10.0, 10.0)
    assert run.duration_s == 550 * UNIT
    assert run.starts_s[:4].tolist() == [0.0, 1 * UNIT, 3 * UNIT, 6 * UNIT]


def test_min_duration_extends_the_run() -> None:
    """1024 units = 1 s: 18 cycles give 990 units (180 queries), then 1+..+8 = 36 more reach 1026 at query 188."""
    clock = VirtualClock()
    run = run_scenario(FakeIssue(clock, CYCLE), 20, settings(min_queries=10, min_duration_s=1.0), clock)
    assert run.queries == 188 and run.duration_s == 1026 * UNIT


def test_warm_up_is_issued_but_not_measured() -> None:
    clock = VirtualClock()
    issue = FakeIssue(clock, CYCLE)
    run = run_scenario(issue, 20, settings(warmup_queries=5), clock)
    assert len(issue.calls) == 105 and run.queries == 100
    assert run.latencies_s[0] == CYCLE[5]  # the first measured query is the 6th issued


def test_sample_order_is_seeded() -> None:
    def indices(seed: int) -> list[int]:
        clock = VirtualClock()
        issue = FakeIssue(clock, [UNIT])
        run_scenario(issue, 20, settings(seed=seed), clock)
        return [c[0] for c in issue.calls]

    a, b, c = indices(0), indices(0), indices(1)
    assert a == b and a != c and set(a) <= set(range(20)) and len(set(a)) == 20


def test_multi_stream_issues_n_samples_per_query() -> None:
    clock = VirtualClock()
    issue = FakeIssue(clock, [UNIT], per_sample=True)
    run = run_scenario(issue, 20, settings("multi-stream", samples_per_query=8, min_queries=700), clock)
    assert run.queries == 700 and run.samples == 5600 and {len(c) for c in issue.calls} == {8}
    assert percentile(run.latencies_s, 0.99) == 8 * UNIT


def test_server_latency_is_completion_minus_scheduled_arrival() -> None:
    """One worker, FIFO: done_k = max(arrival_k, done_k-1) + service (Lindley), latency = done_k - arrival_k."""
    clock = VirtualClock(start=10.0)
    service = 4 * UNIT
    s = settings("server", target_qps=200.0, min_queries=2000, seed=7)
    run = run_scenario(FakeIssue(clock, [service]), 20, s, clock)
    arrivals = poisson_schedule(200.0, 2000, 0.0, 7)
    done, expected = -math.inf, []
    for a in arrivals:
        done = max(a, done) + service
        expected.append(done - a)
    assert run.queries == 2000 and run.starts_s.tolist() == arrivals.tolist()
    assert run.latencies_s == pytest.approx(np.asarray(expected), abs=1e-9)
    assert run.latencies_s.min() == pytest.approx(service) and run.latencies_s.max() > 3 * service  # queueing


def test_poisson_rate_within_a_statistical_bound() -> None:
    qps, n = 500.0, 20000
    times = poisson_schedule(qps, n, 0.0, seed=3)
    assert len(times) == n and np.all(np.diff(times) > 0)
    # T_n ~ Gamma(n, 1/qps): mean n/qps, sd sqrt(n)/qps; 4 sd
    assert abs(times[-1] - n / qps) < 4 * math.sqrt(n) / qps
    gaps = np.diff(np.concatenate([[0.0], times]))
    assert kstest(gaps, "expon", args=(0, 1 / qps)).pvalue > 1e-3


def test_poisson_schedule_covers_min_duration_minimally() -> None:
    times = poisson_schedule(100.0, 10, 5.0, seed=1)
    assert times[-1] >= 5.0 and times[-2] < 5.0 and len(times) > 400


def test_offline_one_query_in_batches() -> None:
    clock = VirtualClock()
    issue = FakeIssue(clock, [UNIT], per_sample=True)
    run = run_scenario(issue, 20, settings("offline", samples_per_query=10, batch_size=4), clock)
    assert [len(c) for c in issue.calls] == [4, 4, 2] and run.samples == 10
    assert (run.latencies_s / UNIT).tolist() == [4] * 4 + [8] * 4 + [10] * 2
    assert run.duration_s == 10 * UNIT and (run.starts_s / UNIT).tolist() == [0, 4, 8]


def test_settings_are_checked() -> None:
    with pytest.raises(RepliscopeError, match="allowed: single-stream, multi-stream, server, offline"):
        settings("singlestream")
    with pytest.raises(RepliscopeError, match="target-qps"):
        settings("server")
    assert settings("multi-stream", samples_per_query=8).batch_of_query == 8
    assert settings("offline", samples_per_query=16, batch_size=16).batch_of_query == 16
    with pytest.raises(
        RepliscopeError,
        match=r"offline: the batch \(16\) is larger than the one query \(15 "
        r"samples\): lower --batch-size or raise --samples-per-query",
    ):
        settings("offline", samples_per_query=15, batch_size=16)


def test_every_manifest_scenario_has_its_loop_and_no_other() -> None:
    """The manifest's scenario words (``SCENARIOS``, what ``bench --scenario`` help lists) are the registry's keys."""
    from repliscope.bench.scenarios import SCENARIO_LOOPS
    from repliscope.manifest.schema import SCENARIOS

    assert SCENARIO_LOOPS.names() == sorted(SCENARIOS)
