"""The web pages' chart cache (:mod:`repliscope.service.web.chart_cache`): a run page's charts are drawn once
for any number of views, keyed by run id + renderer version (+ the run's trace), in a bounded LRU."""

from __future__ import annotations

import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from repliscope.report import figures
from repliscope.report.view import FigureView, Image
from repliscope.service.web import chart_cache
from repliscope.service.web.chart_cache import ChartCache, image_bytes, renderer_version
from tests.report.htmlparse import ReportParser
from tests.service.conftest import WebClient
from tests.store.records import TOP1_A, make_record

RUN_A = "c0" * 16

V1 = "1.0+mpl3.10+aaaaaaaaaaaa"


def _figure(n: int) -> FigureView:
    return FigureView("t", Image("x" * n, "alt"))


# --- the cache itself -------------------------------------------------------------------------------------------


def test_a_key_is_rendered_once_then_served() -> None:
    cache = ChartCache()
    calls: list[int] = []

    def render() -> FigureView:
        calls.append(1)
        return _figure(10)

    first = cache.get(("run", "db", "r1", V1), render)
    assert cache.get(("run", "db", "r1", V1), render) is first
    assert calls == [1]
    stats = cache.stats
    assert (stats.renders, stats.hits, stats.entries, stats.bytes) == (1, 1, 1, 10)


def test_a_new_renderer_version_drops_everything_drawn_before() -> None:
    cache = ChartCache()
    cache.get(("run", "db", "r1", V1), lambda: _figure(10))
    cache.get(("run", "db", "r2", V1), lambda: _figure(10))
    redrawn = cache.get(("run", "db", "r1", "1.1+mpl3.10+bbbbbbbbbbbb"), lambda: _figure(7))
    assert image_bytes(redrawn) == 7
    stats = cache.stats
    assert (stats.renders, stats.hits, stats.entries, stats.bytes) == (3, 0, 1, 7)


def test_the_least_recently_used_go_first_by_count_and_by_bytes() -> None:
    cache = ChartCache(max_entries=2, max_bytes=100)
    for name in ("a", "b"):
        cache.get(("run", "db", name, V1), lambda: _figure(30))
    cache.get(("run", "db", "a", V1), lambda: _figure(30))  # a is now the most recent
    cache.get(("run", "db", "c", V1), lambda: _figure(30))  # evicts b (count)
    assert cache.stats.entries == 2
    drawn: list[str] = []

    def draw_b() -> FigureView:
        drawn.append("b")
        return _figure(30)

    cache.get(("run", "db", "b", V1), draw_b)
    assert drawn == ["b"]  # b had gone; coming back it evicts a
    assert cache.stats.evictions == 2
    cache.get(("run", "db", "big", V1), lambda: _figure(90))  # 90 + 30 > 100: both others go
    assert (cache.stats.entries, cache.stats.bytes, cache.stats.evictions) == (1, 90, 4)
    cache.get(("run", "db", "huge", V1), lambda: _figure(101))  # larger than the cache: returned, not kept
    assert (cache.stats.entries, cache.stats.bytes) == (1, 90)


def test_concurrent_first_views_draw_once() -> None:
    cache = ChartCache()
    calls: list[int] = []

    def slow() -> FigureView:
        calls.append(1)
        time.sleep(0.2)
        return _figure(5)

    results: list[Any] = []
    threads = [
        threading.Thread(target=lambda: results.append(cache.get(("run", "db", "r", V1), slow))) for _ in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert calls == [1]
    assert len(results) == 8 and all(r is results[0] for r in results)


def test_image_bytes_counts_the_embedded_images_of_a_view() -> None:
    @dataclass
    class View:
        figure: FigureView | None
        figures: list[FigureView]
        rows: list[tuple[str, str]]

    assert image_bytes(View(_figure(3), [_figure(4), _figure(5)], [("a", "b")])) == 12
    assert image_bytes(View(None, [], [])) == 0


def test_the_renderer_version_changes_with_the_report_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import repliscope.report

    source = Path(repliscope.report.__file__).parent
    copy = tmp_path / "report"
    shutil.copytree(source, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(repliscope.report, "__file__", str(copy / "__init__.py"))
    compute = renderer_version.__wrapped__
    before = compute()
    assert before == renderer_version()  # the same code as the installed package
    (copy / "figures.py").write_text((copy / "figures.py").read_text() + "\n# a changed chart\n")
    after = compute()
    assert after != before and after.split("+")[:2] == before.split("+")[:2]


# --- the pages --------------------------------------------------------------------------------------------------


@pytest.fixture
def web(service_app: Any, tokens: dict[str, str]) -> dict[str, Any]:
    service_app.state.store.save(make_record(RUN_A, TOP1_A))
    return {"app": service_app, "store": service_app.state.store, "tokens": tokens}


def logged_in(app: Any, token: str) -> WebClient:
    client = WebClient(app)
    assert client.post("/login", data={"token": token, "next": "/runs"}, follow_redirects=False).status_code == 303
    return client


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """A fresh process cache, and the number of latency and claim charts drawn."""
    monkeypatch.setattr(chart_cache, "CHARTS", ChartCache())
    counts = {"latency": 0, "claim": 0}
    latency, claim = figures.latency_chart, figures.claim_chart

    def counted_latency(*args: Any, **kwargs: Any) -> Any:
        counts["latency"] += 1
        return latency(*args, **kwargs)

    def counted_claim(*args: Any, **kwargs: Any) -> Any:
        counts["claim"] += 1
        return claim(*args, **kwargs)

    monkeypatch.setattr(figures, "latency_chart", counted_latency)
    monkeypatch.setattr(figures, "claim_chart", counted_claim)
    return counts


def _charts(html: str) -> list[str]:
    parser = ReportParser()
    parser.feed(html)
    return [img["src"] for img in parser.images if "chart" in img.get("class", "").split()]


def test_two_views_of_a_run_page_draw_its_charts_once(
    web: dict[str, Any],
    counted: dict[str, int],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client = logged_in(web["app"], web["tokens"]["viewer"])
    first = client.get(f"/runs/{RUN_A}")
    second = client.get(f"/runs/{RUN_A[:8]}")  # a prefix is the same run: the same entry
    assert first.status_code == second.status_code == 200
    assert counted == {"latency": 1, "claim": 1}
    assert len(_charts(first.text)) == 2 and _charts(first.text) == _charts(second.text)
    stats = chart_cache.CHARTS.stats
    assert (stats.renders, stats.hits, stats.entries) == (1, 1, 1)
    # the key holds the renderer version: another version draws again
    monkeypatch.setattr(chart_cache, "renderer_version", lambda: "9.9+mpl0+000000000000")
    assert client.get(f"/runs/{RUN_A}").status_code == 200
    assert counted == {"latency": 2, "claim": 2}
    assert client.get(f"/runs/{RUN_A}").status_code == 200
    assert counted == {"latency": 2, "claim": 2}


def test_a_trace_stored_after_a_view_is_drawn_at_the_next(web: dict[str, Any], counted: dict[str, int]) -> None:
    from repliscope.tracing.chrome import to_chrome
    from tests.tracing.test_summary_compare import _ort

    client = logged_in(web["app"], web["tokens"]["viewer"])
    assert len(_charts(client.get(f"/runs/{RUN_A}").text)) == 2
    doc = to_chrome(_ort(), 0, thread_names={}, metadata={"repliscope_trace_level": "framework"}, pid=1)
    web["store"].save_trace(RUN_A, "framework", doc)
    for _ in range(2):
        r = client.get(f"/runs/{RUN_A}")
        assert "<h2>Per-layer time</h2>" in r.text and len(_charts(r.text)) == 3
    assert counted == {"latency": 2, "claim": 2}
    assert chart_cache.CHARTS.stats.renders == 2


def test_the_cached_view_is_not_changed_by_a_viewers_redaction(web: dict[str, Any], counted: dict[str, int]) -> None:
    """An admin and a viewer get their pages from one cached view (the provenance names the manifest's file, never
    a server path, for both)."""
    path = web["store"].get(RUN_A).manifest.path
    viewer = logged_in(web["app"], web["tokens"]["viewer"]).get(f"/runs/{RUN_A}").text
    admin = logged_in(web["app"], web["tokens"]["admin"]).get(f"/runs/{RUN_A}").text
    assert Path(path).name in admin and Path(path).name in viewer
    assert chart_cache.CHARTS.stats.renders == 1
    assert _charts(viewer) == _charts(admin)


def test_a_benchmark_view_is_built_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import repliscope.report.build as build

    @dataclass
    class View:
        latency: FigureView

    built: list[Any] = []

    def fake_build(records: list[Any]) -> View:
        built.append(records)
        return View(_figure(12))

    monkeypatch.setattr(build, "build_benchmark_view", fake_build)

    @dataclass
    class Store:
        url: str

    @dataclass
    class Record:
        benchmark_id: str

    cache = ChartCache()
    store, rec = Store("sqlite:///x.db"), Record("bench-1")
    first = chart_cache.bench_view(store, rec, cache)  # type: ignore[arg-type]
    second = chart_cache.bench_view(store, rec, cache)  # type: ignore[arg-type]
    assert len(built) == 1 and first == second and first is not second  # a copy per caller
    assert chart_cache.bench_view(Store("sqlite:///other.db"), rec, cache) is not None  # type: ignore[arg-type]
    assert len(built) == 2  # another store: another entry
