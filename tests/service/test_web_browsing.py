"""Browsing as an MLflow / W&B user expects (issue 21 item 7), server side: column sort by header links (stable,
kept across pages, unknown keys refused), the search box, the sample-count / interval / variant columns, the
CSV and JSON downloads of a runs query and of a run's samples, and the compare page across N runs."""

from __future__ import annotations

import csv
import io
import json
import re
from datetime import UTC, datetime, timedelta
from html import unescape
from typing import Any

import pytest

from repliscope.report.figures import decode_png_b64
from tests.service.test_web_pages import assert_accessible, logged_in, parse
from tests.store.records import FOOLBOX_IDENTITY, IDS, LABELS, TOP1_A, TOP1_B, TOP1_PROBS, make_record

T0 = datetime(2026, 11, 21, 10, 0, tzinfo=UTC)
RUN_TINY = "a1" * 16  # 3 images, all right: 100 %
RUN_A = "b2" * 16  # 19 of 20 evaluated, 17 right: 89.5 %
RUN_B = "c3" * 16  # 20 of 20, 19 right: 95.0 %
RUN_REF = "d4" * 16  # a sweep's reference (variant "reference")
RUN_VAR = "e5" * 16  # the sweep's variant "resize_bicubic"
SWEEP = "5e" * 32


def _renamed(record: Any, model: str | None = None, dataset: str | None = None) -> Any:
    update: dict[str, Any] = {}
    if model is not None:
        update["manifest"] = record.manifest.model_copy(update={"name": model})
    if dataset is not None:
        update["dataset"] = {**record.dataset, "name": dataset}
    return record.model_copy(update=update)


@pytest.fixture
def browse(service_app: Any, tokens: dict[str, str]) -> dict[str, Any]:
    store = service_app.state.store
    tiny = make_record(RUN_TINY, list[int | None](LABELS[:3]), TOP1_PROBS[:3], created_at=T0)
    store.save(_renamed(tiny, model="mobilenet-v2", dataset="imagenet-sample-3"))
    store.save(make_record(RUN_A, TOP1_A, created_at=T0 + timedelta(minutes=1)))
    b = make_record(RUN_B, TOP1_B, runtime="torch", created_at=T0 + timedelta(minutes=2))
    b.pipeline["preprocess"][1]["interpolation"] = "bicubic"
    store.save(b)
    ref = make_record(RUN_REF, TOP1_B, created_at=T0 + timedelta(minutes=3), kind="pitfall_variant")
    store.save(ref.model_copy(update={"sweep_id": SWEEP, "variant": "reference"}))
    var = make_record(RUN_VAR, TOP1_A, created_at=T0 + timedelta(minutes=3), kind="pitfall_variant")
    store.save(var.model_copy(update={"sweep_id": SWEEP, "variant": "resize_bicubic"}))
    return {"app": service_app, "store": store, "tokens": tokens}


def _group(pattern: str, text: str) -> str:
    found = re.search(pattern, text)
    assert found is not None, pattern
    return found.group(1)


def _rows(html: str) -> list[list[str]]:
    return parse(html).tables["runs-table"].rows


def test_headers_sort_the_runs_stably_and_the_sort_survives_paging(browse: dict[str, Any]) -> None:
    client = logged_in(browse["app"], browse["tokens"]["viewer"])
    html = client.get("/runs").text
    # the Samples header's link: descending first (largest first), page 1, the other parameters kept
    link = unescape(_group(r'<a class="sort none" href="([^"]*sort=-samples[^"]*)">Samples</a>', html))
    assert link == "/runs?page_size=50&sort=-samples"
    rows = _rows(client.get(link).text)
    # 20-sample runs first, ties by run id descending (stable: the same order on every request), the 3-image run last
    assert [r[0] for r in rows] == [RUN_VAR[:12], RUN_REF[:12], RUN_B[:12], RUN_A[:12], RUN_TINY[:12]]
    assert [r[8] for r in rows] == ["19 (1 failed)", "20", "20", "19 (1 failed)", "3"]
    sorted_html = client.get(link).text
    assert 'aria-sort="descending"><a class="sort descending" href="/runs?page_size=50&amp;sort=samples"' in sorted_html
    # top-1 ascending, then two a page: page 2 keeps the sort
    asc = _rows(client.get("/runs?sort=top1&page_size=25").text)
    top1 = [r[9].split(" [")[0] for r in asc]  # the metric, its interval under it
    assert top1 == ["top1 89.47 %", "top1 89.47 %", "top1 95.00 %", "top1 95.00 %", "top1 100.00 %"]
    assert [r[0] for r in asc[:2]] == [RUN_A[:12], RUN_VAR[:12]]  # a tie: run id ascending
    # 100 % of 3 carries its wide interval; 95 % of 20 its own
    assert asc[4][9] == "top1 100.00 % [43.85, 100.00] %" and asc[2][9] == "top1 95.00 % [76.39, 99.11] %"
    by_model = _rows(client.get("/runs?sort=-model&search=lite0").text)
    assert [r[3] for r in by_model] == ["efficientnet-lite0 1.0.0"] * 4
    searched = client.get("/runs?sort=-dataset&page_size=25&search=e").text
    model_link = _group(r'<a class="sort none" href="([^"]*)">Model</a>', searched)
    assert unescape(model_link) == "/runs?search=e&page_size=25&sort=model"  # the search kept, page 1
    bad = client.get("/runs?sort=-colour")
    assert bad.status_code == 422 and "sort must be one of" in unescape(bad.text)
    assert "not '-colour'" in unescape(bad.text)
    assert_accessible(html)


def test_pages_keep_the_sort_in_their_links(browse: dict[str, Any]) -> None:
    client = logged_in(browse["app"], browse["tokens"]["viewer"])
    store = browse["store"]
    for k in range(24):  # 29 runs: two pages of 25
        store.save(make_record(f"{k:02d}" * 16, TOP1_A, created_at=T0 - timedelta(hours=k + 1)))
    html = client.get("/runs?sort=runtime&page_size=25").text
    nxt = unescape(_group(r'<a rel="next" href="([^"]+)"', html))
    assert nxt == "/runs?sort=runtime&page_size=25&page=2"
    second = _rows(client.get(nxt).text)
    assert len(second) == 4 and "2 of 2" in client.get(nxt).text
    assert [r[0] for r in second] == [RUN_A[:12], RUN_REF[:12], RUN_VAR[:12], RUN_B[:12]]
    assert [r[5].split()[0] for r in second] == ["onnxruntime"] * 3 + ["torch"]
    everything = _rows(client.get("/runs?sort=runtime&page_size=50").text)
    assert [r[0] for r in everything][25:] == [r[0] for r in second]


def test_the_search_box_finds_model_tag_dataset_and_variant(browse: dict[str, Any]) -> None:
    client = logged_in(browse["app"], browse["tokens"]["viewer"])

    def found(text: str) -> list[str]:
        return sorted(r[0] for r in _rows(client.get("/runs", params={"search": text}).text))

    assert found("MOBILENET") == [RUN_TINY[:12]]  # the model name, case-insensitive
    assert found("sample-3") == [RUN_TINY[:12]]  # the dataset
    assert found("bicubic") == [RUN_VAR[:12]]  # the variant name
    assert found("torch") == [RUN_B[:12]]  # the runtime
    assert found("1.0.0") == sorted(x[:12] for x in (RUN_TINY, RUN_A, RUN_B, RUN_REF, RUN_VAR))  # the version (tag)
    assert found("50%_") == [["No run matches."][0]]  # LIKE wildcards are literal
    html = client.get("/runs", params={"search": "lite0"}).text
    assert 'id="filter-search" name="search" type="search" maxlength="200" value="lite0"' in html
    assert client.get("/runs", params={"search": "x" * 201}).status_code == 422


def test_variant_column_tells_sweep_runs_apart_and_links_the_sweep(browse: dict[str, Any]) -> None:
    client = logged_in(browse["app"], browse["tokens"]["viewer"])
    rows = _rows(client.get("/runs?sort=variant").text)
    assert [r[4] for r in rows] == ["reference", "resize_bicubic", "—", "—", "—"]
    html = client.get("/runs?sort=variant").text
    assert html.count(f'<a href="/runs?sweep_id={SWEEP}" title="sweep {SWEEP[:12]}">') == 2
    sweep = _rows(client.get(f"/runs?sweep_id={SWEEP}&sort=-variant").text)
    assert [(r[0], r[4]) for r in sweep] == [(RUN_VAR[:12], "resize_bicubic"), (RUN_REF[:12], "reference")]
    short = _rows(client.get(f"/runs?sweep_id={SWEEP[:12]}").text)  # the 12 characters the pages show
    assert sorted(r[0] for r in short) == sorted([RUN_VAR[:12], RUN_REF[:12]])


def test_api_sorts_searches_and_refuses_unknown_sorts(client: Any, headers_for: Any, browse: dict[str, Any]) -> None:
    h = headers_for("viewer")
    body = client.get("/api/v1/runs", params={"sort": "-samples", "search": "imagenet"}, headers=h).json()
    assert [r["run_id"] for r in body["items"]] == [RUN_VAR, RUN_REF, RUN_B, RUN_A, RUN_TINY] and body["total"] == 5
    assert [r["run_id"] for r in client.get("/api/v1/runs?search=Sample-3", headers=h).json()["items"]] == [RUN_TINY]
    bad = client.get("/api/v1/runs?sort=colour", headers=h)
    assert bad.status_code == 422
    from typing import get_args

    from repliscope.service.routers.runs import Sort
    from repliscope.store.repository import SORTS

    assert set(get_args(Sort)) == set(SORTS)  # the API documents every sort the store takes


def test_download_a_runs_query_as_csv_and_json(client: Any, headers_for: Any, browse: dict[str, Any]) -> None:
    from repliscope.service.routers.runs import EXPORT_COLUMNS

    h = headers_for("viewer")
    r = client.get("/api/v1/runs/export?format=csv&sort=-top1&model=efficientnet-lite0", headers=h)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/csv")
    assert r.headers["content-disposition"] == 'attachment; filename="runs.csv"' and r.headers["x-total-count"] == "4"
    table = list(csv.reader(io.StringIO(r.text)))
    assert table[0] == list(EXPORT_COLUMNS) and len(table) == 5
    rows = [dict(zip(table[0], row, strict=True)) for row in table[1:]]
    assert [x["run_id"] for x in rows] == [RUN_REF, RUN_B, RUN_VAR, RUN_A]
    stored = browse["store"].get(RUN_A).metric("top1")
    a = rows[3]
    assert (a["num_samples"], a["num_failed"], a["top1"]) == ("20", "1", repr(stored.value))
    assert float(a["top1_ci_low"]) == pytest.approx(stored.ci_low, abs=1e-12)  # the record's own interval
    assert float(a["top1_ci_high"]) == pytest.approx(stored.ci_high, abs=1e-12)
    assert a["created_at"] == "2026-11-21T10:01:00+00:00" and a["variant"] == "" and a["ap"] == ""
    j = client.get("/api/v1/runs/export?format=json&search=bicubic", headers=h)
    assert j.headers["content-type"] == "application/json"
    items = j.json()
    assert [(x["run_id"], x["variant"], x["sweep_id"]) for x in items] == [(RUN_VAR, "resize_bicubic", SWEEP)]
    assert list(items[0]) == list(EXPORT_COLUMNS)
    limited = client.get("/api/v1/runs/export?format=json&limit=2&sort=created_at", headers=h).json()
    assert [x["run_id"] for x in limited] == [RUN_TINY, RUN_A]
    assert client.get("/api/v1/runs/export?format=xml", headers=h).status_code == 422
    assert client.get("/api/v1/runs/export?page=2", headers=h).status_code == 422  # a download has no pages
    assert client.get("/api/v1/runs/export?limit=100001", headers=h).status_code == 422
    assert client.get("/api/v1/runs/export").status_code == 401


def test_the_runs_page_links_its_query_as_downloads(browse: dict[str, Any]) -> None:
    client = logged_in(browse["app"], browse["tokens"]["viewer"])
    html = client.get("/runs?sort=-top1&runtime=onnxruntime&created_from=2026-11-21&created_to=2026-11-21").text
    href = unescape(_group(r'<a id="export-csv" href="([^"]+)"', html))
    assert href == (
        "/api/v1/runs/export?format=csv&runtime=onnxruntime&created_from=2026-11-21T00%3A00%3A00Z"
        "&created_to=2026-11-22T00%3A00%3A00Z&sort=-top1"
    )
    r = client.get(href)  # the page's cookie is enough
    assert r.status_code == 200 and len(r.text.strip().splitlines()) == 1 + 4


def test_download_a_runs_samples(client: Any, headers_for: Any, browse: dict[str, Any]) -> None:
    from repliscope.service.routers.runs import SAMPLE_COLUMNS

    h = headers_for("viewer")
    r = client.get(f"/api/v1/runs/{RUN_A[:10]}/samples/export", headers=h)
    assert (
        r.status_code == 200 and r.headers["content-disposition"] == f'attachment; filename="samples-{RUN_A[:12]}.csv"'
    )
    table = list(csv.reader(io.StringIO(r.text)))
    assert table[0] == list(SAMPLE_COLUMNS) and len(table) == 21
    row7 = dict(zip(table[0], table[8], strict=True))
    assert (row7["sample_id"], row7["label"], row7["top1"], row7["correct"]) == (IDS[7], str(LABELS[7]), "511", "0")
    assert json.loads(row7["topk_indices"])[0] == 511
    last = dict(zip(table[0], table[20], strict=True))
    assert last["error"] == "SampleError: image file is truncated" and last["correct"] == "" and last["top1"] == ""
    assert sum(1 for row in table[1:] if row[5] == "1") == 17
    j = client.get(f"/api/v1/runs/{RUN_A}/samples/export?format=json", headers=h).json()
    assert len(j) == 20 and j[7]["topk_indices"][0] == 511 and j[19]["error"].startswith("SampleError")
    assert client.get("/api/v1/runs/ffffffffff/samples/export", headers=h).status_code == 404
    assert client.get(f"/api/v1/runs/{RUN_A}/samples/export?fmt=csv", headers=h).status_code == 422


def test_compare_three_runs_metrics_table_chart_and_pipelines(browse: dict[str, Any]) -> None:
    client = logged_in(browse["app"], browse["tokens"]["viewer"])
    r = client.get(f"/compare?run={RUN_TINY}&run={RUN_A[:10]}&run={RUN_B}")
    assert r.status_code == 200
    p = parse(r.text)
    runs = p.tables["compare-runs-table"].rows
    assert [(x[0], x[1], x[5]) for x in runs] == [
        ("A", RUN_TINY[:12], "3"),
        ("B", RUN_A[:12], "19 (1 failed)"),
        ("C", RUN_B[:12], "20"),
    ]
    metrics = p.tables["compare-metrics"].rows
    assert metrics[0][:4] == ["A", "100.00 %", "[43.85, 100.00] %", "3"]
    assert metrics[1][:4] == ["B", "89.47 %", "[68.61, 97.06] %", "19"]
    assert metrics[2][:4] == ["C", "95.00 %", "[76.39, 99.11] %", "20"]
    charts = [img for img in p.images if "chart" in img.get("class", "").split()]
    assert len(charts) == 1 and decode_png_b64(charts[0]["src"]).startswith(b"\x89PNG")
    pipe = p.tables["pipeline-across"]
    differs = [row for row, attrs in zip(pipe.rows, pipe.row_attrs, strict=True) if attrs.get("class") == "differs"]
    assert differs == [
        [
            "preprocess 2",
            "resize(size=256, interpolation=bilinear, antialias=True)",
            "resize(size=256, interpolation=bilinear, antialias=True)",
            "resize(size=256, interpolation=bicubic, antialias=True)",
            "differs",
        ]
    ]
    stack = p.tables["stack-across"].rows
    assert stack[0][:4] == ["runtime.runtime", "onnxruntime", "onnxruntime", "torch"]
    assert "compare-table" not in p.tables  # the paired table is for exactly two runs
    assert_accessible(r.text)
    two = parse(client.get(f"/compare?run={RUN_A}&run={RUN_B}").text)
    assert "compare-table" in two.tables and len(two.tables["compare-metrics"].rows) == 2
    assert client.get(f"/compare?run={RUN_A}").status_code == 400
    assert client.get(f"/compare?run={RUN_A}&run={RUN_A[:8]}").status_code == 400  # the same run twice
    assert client.get(f"/compare?run={RUN_A}&run=ffffffffff").status_code == 404
    assert client.get(f"/compare?run={RUN_A}&runs={RUN_B}").status_code == 400
    many = "&".join(f"run={RUN_A}" for _ in range(13))
    assert "at most 12 runs" in client.get(f"/compare?{many}").text


def test_the_runs_page_picks_runs_for_the_compare_form(browse: dict[str, Any]) -> None:
    html = logged_in(browse["app"], browse["tokens"]["viewer"]).get("/runs").text
    assert '<form id="compare-form" class="compare-pick" method="get" action="/compare"' in html
    boxes = re.findall(r'<input type="checkbox" form="compare-form" name="run" value="([0-9a-f]{32})"', html)
    assert sorted(boxes) == sorted([RUN_TINY, RUN_A, RUN_B, RUN_REF, RUN_VAR])
    assert FOOLBOX_IDENTITY not in html


def test_the_sweep_table_links_each_variants_run(service_app: Any, tokens: dict[str, str]) -> None:
    from tests.report.factories import SWEEP_ID, VARIANT_RUN_IDS, sweep, sweep_records

    store = service_app.state.store
    store.save_sweep(sweep())
    for record in sweep_records().values():
        store.save(record)
    html = logged_in(service_app, tokens["viewer"]).get(f"/runs/{VARIANT_RUN_IDS['no_center_crop']}").text
    table = html[html.index('<table id="pitfalls-table">') :]
    table = table[: table.index("</table>")]
    links = re.findall(r'<td><a href="/runs/([0-9a-f]+)">([^<]+)</a></td>', table)
    assert links == [(VARIANT_RUN_IDS[n], n) for n in ("reference", "color_layout_swapped", "data_layout_bug")]
    assert '<td><strong aria-current="page">no_center_crop</strong></td>' in table  # this run, not a link
    href = unescape(_group(r'<a id="compare-sweep" href="([^"]+)">', html))
    names = ("reference", "color_layout_swapped", "data_layout_bug", "no_center_crop")  # the reference is A
    assert href == f"/compare?sweep={SWEEP_ID}"  # any sweep size: paged (test_sweep_compare_and_report.py)
    rows = parse(logged_in(service_app, tokens["viewer"]).get(href).text).tables["compare-runs-table"].rows
    assert [r[4] for r in rows] == list(names)


def test_compare_of_n_runs_shows_server_paths_to_admins_only(browse: dict[str, Any]) -> None:
    store = browse["store"]
    odd = make_record("7e" * 16, TOP1_B, created_at=T0)
    odd.runtime["onnx_path"] = "/srv/secret-host/models/lite0.onnx"
    store.save(odd)
    ids = "&".join(f"run={r}" for r in (RUN_A, RUN_B, "7e" * 16))
    viewer = logged_in(browse["app"], browse["tokens"]["viewer"]).get(f"/compare?{ids}").text
    admin = logged_in(browse["app"], browse["tokens"]["admin"]).get(f"/compare?{ids}").text
    assert "/srv/secret-host" not in viewer and "…/models/lite0.onnx" in viewer
    assert "/srv/secret-host/models/lite0.onnx" in admin
    row = next(r for r in parse(viewer).tables["stack-across"].rows if r[0] == "runtime.onnx_path")
    assert row == ["runtime.onnx_path", "—", "—", "…/models/lite0.onnx", "differs"]
