"""Latency and throughput side by side (issue 36 item 8): each compared run's (or stored benchmark's) throughput and
latency percentiles with their units, and the conditions that make those numbers comparable: the hardware, the
threads, the batch size and the stack (runtime and its version), for benchmarks the LoadGen scenario too. When a
condition differs the table says which and how (``not comparable: threads 1 vs 4``): a timing is a property of
the machine and settings it was measured under, not of the model alone. A run's timings also depend on what its
loop covered (the ``timing`` condition, :func:`timing_text`).

- an evaluation run: throughput = evaluated images / the measured loop (``timings.throughput_samples_per_second``,
  img/s); latency = the runtime's time per batch (``timings.batch_latencies_seconds``), p50 / p90 / p99 as
  LoadGen takes them (:func:`repliscope.bench.stats.percentile`, the ``floor(n * p)`` order statistic), in ms;
- a benchmark: its stored LoadGen percentiles (per query) and throughput with its interval, and the queries per
  second it achieved (queries / duration).

The benchmarks' own compare is ``/compare/benchmarks?id=A&id=B`` (this module's router): a benchmark has no
predictions, so nothing of a run compare but the timings and the stacks applies. No store access but the
route's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import quote

import numpy as np
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from repliscope.errors import StoreError
from repliscope.service.web import page_kit as kit
from repliscope.service.web.page_kit import (
    SignedIn,
)

router = APIRouter(include_in_schema=False)

RUN_CONDITIONS = ("hardware", "threads", "batch size", "stack", "timing")
"""What a run's timings depend on, in the order the table shows them (``timing``: what its throughput is over,
:func:`timing_text`)."""
BENCH_CONDITIONS = ("scenario", "load", "hardware", "threads", "batch size", "stack", "timing")
"""What a benchmark's timings depend on: its LoadGen scenario and the load it issued (:func:`load_text`), the
machine and settings, and whether the pre-processing was timed."""
PERCENTILES = ("p50", "p90", "p99")
MAX_ID_CHARS = 100
DASH = "—"


@dataclass(frozen=True)
class PerfRow:
    """One compared run's or benchmark's timings: ``latency`` p50 / p90 / p99 (``12.34 ms``), what one latency
    is (``latency_of``), the throughput (``123.4 img/s``), the queries per second (benchmarks; ``—`` for runs),
    the ``conditions`` in the table's order, and a ``note`` when a figure needs one."""

    letter: str
    object_id: str
    href: str
    throughput: str
    latency: list[str]
    latency_of: str
    qps: str
    conditions: list[str]
    note: str = ""


@dataclass(frozen=True)
class PerfTable:
    """The timings of the compared runs (``kind`` ``runs``) or benchmarks, the ``condition_names`` their rows
    carry, the ``differences`` (``threads 1 vs 4``), and the ``verdict`` the page states."""

    kind: Literal["runs", "benchmarks"]
    condition_names: tuple[str, ...]
    rows: list[PerfRow]
    differences: list[str]

    @property
    def conditions(self) -> list[tuple[str, list[str], bool]]:
        """``(condition, value per row, same)`` in :attr:`condition_names` order (the conditions table)."""
        out = []
        for k, name in enumerate(self.condition_names):
            values = [row.conditions[k] for row in self.rows]
            out.append((name, values, len(set(values)) == 1))
        return out

    @property
    def comparable(self) -> bool:
        return not self.differences

    @property
    def verdict(self) -> str:
        if self.differences:
            return "not comparable: " + "; ".join(self.differences)
        names = list(self.condition_names)
        return f"comparable: same {', '.join(names[:-1])} and {names[-1]}"


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


def _rate(value: float | None, unit: str = "img/s") -> str:
    return DASH if not value else f"{value:,.1f} {unit}"


def hardware_text(hardware: dict[str, Any]) -> str:
    """``AMD EPYC 7B13, 2 cores``: the CPU model and the cores the process could use (a cgroup limit when set)."""
    cores = hardware.get("usable_cores") or hardware.get("logical_cores")
    limit = hardware.get("cgroup_cpu_limit")
    text = f"{hardware.get('cpu_model') or 'CPU not recorded'}, {cores if cores is not None else '?'} cores"
    return text + (f" (cgroup limit {limit})" if limit else "")


def stack_text(runtime: dict[str, Any]) -> str:
    """``onnxruntime 1.31.1``: the runtime and its framework's version."""
    return f"{runtime.get('runtime', '?')} {runtime.get('framework_version') or 'version not recorded'}"


def timing_text(record: Any) -> str:
    """What a run's throughput is over: the measured loop (``read + pre-process + infer``), a pitfall sweep's
    runs their own model time only (the sweep shares one loop: ``infer only``), records stored before load and
    warm-up were timed apart the whole run."""
    if record.timings.loop_seconds is None:
        return "whole run, model load included"
    return "infer only (a sweep's shared loop)" if record.sweep_id else "read + pre-process + infer"


def bench_timing_text(settings: dict[str, Any]) -> str:
    """What a benchmark's latency covers: the pre-processing when timed, the inference, and in records made
    before its latency ended at the response (no ``latency_ends``) the post-processing too."""
    covered = "pre-process + infer" if settings.get("timed_preprocess") else "infer"
    if settings.get("latency_ends") != "response":
        return covered + " + post-process"
    return covered if settings.get("timed_preprocess") else "infer only"


def load_text(settings: dict[str, Any]) -> str:
    """The load a benchmark issued: server arrivals per second, else the images a query holds."""
    if settings.get("scenario") == "server":
        return f"{_setting(settings.get('target_qps'))} queries/s arriving"
    n = settings.get("samples_per_query") or 1
    return f"{n} image{'' if n == 1 else 's'} a query"


def _setting(value: Any) -> str:
    return DASH if value is None else str(value)


def run_row(letter: str, record: Any) -> PerfRow:
    """The timings of an evaluation record (one read without its samples will do)."""
    from repliscope.bench.stats import percentile

    t = record.timings
    batches = np.asarray(t.batch_latencies_seconds, dtype=np.float64)
    options, runtime = record.options or {}, record.runtime or {}
    batch = options.get("batch_size")
    latency = [_ms(percentile(batches, int(p[1:]) / 100)) for p in PERCENTILES] if batches.size else [DASH] * 3
    of = f"one batch of {_setting(batch)} image{'' if batch == 1 else 's'} ({len(batches)} batches)"
    threads = options.get("threads", runtime.get("threads"))
    return PerfRow(
        letter=letter,
        object_id=record.run_id,
        href=f"/runs/{quote(record.run_id, safe='')}",
        throughput=_rate(t.throughput_samples_per_second),
        latency=latency,
        latency_of=of,
        qps=DASH,
        conditions=[
            hardware_text(record.hardware or {}),
            _setting(threads),
            _setting(batch),
            stack_text(runtime),
            timing_text(record),
        ],
    )


def bench_row(letter: str, record: Any) -> PerfRow:
    """The timings of a :class:`~repliscope.bench.record.BenchmarkRecord`."""
    s = record.settings
    qs = record.latency.percentiles
    latency = [f"{qs[p].value:.2f} ms" if p in qs else DASH for p in PERCENTILES]
    throughput = _rate(record.throughput_samples_per_second)
    if record.throughput_ci is not None and record.throughput_samples_per_second:
        low, high = record.throughput_ci
        throughput += f" [{low:,.1f}, {high:,.1f}]"
    per_query = s.get("samples_per_query") or 1
    of = f"one query of {per_query} image{'' if per_query == 1 else 's'} ({record.queries} queries)"
    qps = _rate(record.queries / record.duration_seconds if record.duration_seconds else None, "queries/s")
    return PerfRow(
        letter=letter,
        object_id=record.benchmark_id,
        href=f"/benchmarks/{quote(record.benchmark_id, safe='')}",
        throughput=throughput,
        latency=latency,
        latency_of=of,
        qps=qps,
        conditions=[
            str(s.get("scenario", DASH)),
            load_text(s),
            hardware_text(record.hardware or {}),
            _setting(s.get("threads")),
            _setting(s.get("batch_size")),
            stack_text(record.runtime or {}),
            bench_timing_text(s),
        ],
        note="" if record.valid else "invalid: " + "; ".join(record.invalid_reasons),
    )


def differences(names: Sequence[str], rows: Sequence[PerfRow]) -> list[str]:
    """``threads 1 vs 4`` for each condition whose values differ; with more than two rows each value names its
    rows (``threads 1 (A, C) vs 4 (B)``)."""
    out = []
    for k, name in enumerate(names):
        by_value: dict[str, list[str]] = {}
        for row in rows:
            by_value.setdefault(row.conditions[k], []).append(row.letter)
        if len(by_value) < 2:
            continue
        if len(rows) == 2:
            out.append(f"{name} {' vs '.join(by_value)}")
        else:
            out.append(f"{name} " + " vs ".join(f"{v} ({', '.join(letters)})" for v, letters in by_value.items()))
    return out


def runs_table(records: Sequence[Any], letters: Sequence[str]) -> PerfTable:
    """The timings of compared evaluation runs (in the compare's order and letters)."""
    rows = [run_row(letter, r) for letter, r in zip(letters, records, strict=True)]
    return PerfTable("runs", RUN_CONDITIONS, rows, differences(RUN_CONDITIONS, rows))


def benchmarks_table(records: Sequence[Any], letters: Sequence[str]) -> PerfTable:
    """The timings of compared benchmarks (in the compare's order and letters)."""
    rows = [bench_row(letter, r) for letter, r in zip(letters, records, strict=True)]
    return PerfTable("benchmarks", BENCH_CONDITIONS, rows, differences(BENCH_CONDITIONS, rows))


@dataclass(frozen=True)
class BenchHead:
    letter: str
    benchmark_id: str
    model: str
    scenario: str
    created: str
    valid: str


@router.get("/compare/benchmarks", response_class=HTMLResponse)
def compare_benchmarks_page(request: Request, principal: SignedIn) -> Response:
    """Two to :data:`~repliscope.service.web.compare_rows.MAX_RUNS` stored benchmarks side by side:
    ``?id=A&id=B...`` (full ids or unique prefixes): their latency percentiles, throughput and queries per second
    with the conditions they were measured under, and their stacks item by item."""
    from repliscope.service.web.compare_rows import MAX_RUNS, RowAcross, letter
    from repliscope.service.web.stack_compare import compared_items

    unknown = sorted(set(request.query_params) - {"id"})
    if unknown:
        return kit.error_page(principal, 400, f"unknown query parameter {unknown[0]!r} (allowed: id)")
    asked = [v.strip() for v in request.query_params.getlist("id") if v.strip()]
    if len(asked) > MAX_RUNS:
        return kit.error_page(principal, 422, f"a compare takes at most {MAX_RUNS} benchmarks, got {len(asked)}")
    if long_ids := [v for v in asked if len(v) > MAX_ID_CHARS]:
        return kit.error_page(
            principal, 422, f"a benchmark id is at most {MAX_ID_CHARS} characters, got {len(long_ids[0])}"
        )
    if len(asked) < 2:
        return kit.error_page(
            principal,
            400,
            f"a compare of benchmarks needs at least two ids, got {len(asked)} (/compare/benchmarks?id=A&id=B)",
        )
    store = kit.store_of(request)
    records: list[Any] = []
    try:
        for benchmark_id in asked:
            record = store.get_benchmark(benchmark_id)
            if all(r.benchmark_id != record.benchmark_id for r in records):
                records.append(record)
    except StoreError as exc:
        return kit.error_page(principal, 404, str(exc))
    if len(records) < 2:
        return kit.error_page(principal, 400, f"a compare needs two different benchmarks; every id given is {asked[0]}")
    letters = [letter(i) for i in range(len(records))]
    heads = [
        BenchHead(
            letter,
            r.benchmark_id,
            f"{r.manifest.name} {r.manifest.version}",
            r.scenario,
            r.created_at.strftime("%Y-%m-%d %H:%M UTC"),
            "valid" if r.valid else "invalid",
        )
        for letter, r in zip(letters, records, strict=True)
    ]
    stack = sorted((RowAcross(w, v, same) for w, v, same in compared_items(records)), key=lambda r: r.same)
    if principal.role != "admin":
        from repliscope.service.web.redact import hide_paths, named_roots

        roots = named_roots(request.app.state.config.cache_dir)
        stack = [RowAcross(r.what, [hide_paths(v, roots) for v in r.values], r.same) for r in stack]
    return kit.page(
        principal,
        "compare_benchmarks.html",
        title="Compare benchmarks",
        heads=heads,
        perf=benchmarks_table(records, letters),
        stack=stack,
    )
