"""Issue 36 items 8 and 9 without a browser: the runs table's column chooser (``?cols=``, service/web/run_columns.py)
and the folded filters. The browser module (test_browser_runs_table.py) measures the widths and the persistence."""

from __future__ import annotations

import re
from html import unescape
from typing import Any

from repliscope.service.web.run_columns import DEFAULT, KEYS, MAX_NAMES
from tests.service.test_web_pages import RUN_A, RUN_B, assert_accessible, logged_in, parse, web  # noqa: F401


def _hidden_cols(html: str) -> set[str]:
    """The columns whose header the page renders hidden."""
    return set(re.findall(r'<th scope="col" data-col="([a-z]+)"[^>]* hidden>', html))


def _shown_cols(html: str) -> list[str]:
    return re.findall(r'<th scope="col" data-col="([a-z]+)"(?![^>]* hidden)[^>]*>', html)


def test_the_default_columns_and_the_chooser_without_javascript(web: dict[str, Any]) -> None:  # noqa: F811
    client = logged_in(web["app"], web["tokens"]["viewer"])
    html = client.get("/runs").text
    assert _hidden_cols(html) == {"kind", "hardware", "manifest"}
    shown = ["date", "model", "variant", "runtime", "dataset", "samples", "metric", "verdict", "hash", "tags"]
    assert _shown_cols(html) == shown
    assert DEFAULT == (
        "date",
        "model",
        "variant",
        "runtime",
        "dataset",
        "samples",
        "metric",
        "interval",
        "verdict",
        "hash",
        "tags",
    )
    # the chooser is a GET form: one box per column, the defaults ticked, the empty cols so none ticked is a choice
    ticked = re.findall(r'<input type="checkbox" id="col-([a-z]+)" name="cols" value="\1" checked>', html)
    assert tuple(ticked) == DEFAULT
    assert len(re.findall(r'id="col-[a-z]+" name="cols"', html)) == len(KEYS)
    assert '<input type="hidden" name="cols" value="">' in html
    assert "Columns (11 of 14 shown)" in html
    # the interval sits under the metric in the metric's cell; the hash shows 8 characters, the whole in its title
    row = parse(html).tables["runs-table"].rows[0]
    assert row[0] == RUN_B[:12] and row[9] == "top1 95.00 % [76.39, 99.11] %"
    assert re.search(r'<code title="[0-9a-f]{64}">[0-9a-f]{8}</code>', html)
    # the scroll box is a named region the keyboard reaches
    assert '<div class="scroll" tabindex="0" role="region" aria-label="Stored runs">' in html
    assert '<script src="/static/runs.js"></script>' in html
    assert_accessible(html)
    js = client.get("/static/runs.js")
    assert js.status_code == 200 and js.headers["content-type"].startswith("text/javascript")
    assert "localStorage" in js.text and 'getAttribute("data-storage-key")' in js.text
    assert "[hidden] { display: none !important; }" in client.get("/static/style.css").text
    # the model page's newest runs: the same default columns
    model = client.get("/models/efficientnet-lite0").text
    assert _hidden_cols(model) == {"kind", "hardware", "manifest"}


def test_cols_in_the_url_choose_the_columns_and_every_link_keeps_them(web: dict[str, Any]) -> None:  # noqa: F811
    client = logged_in(web["app"], web["tokens"]["viewer"])
    html = client.get("/runs?cols=metric,model,hardware&runtime=onnxruntime").text
    assert _shown_cols(html) == ["model", "hardware", "metric"]  # in table order, whatever the order asked
    assert 'data-col="interval" hidden>' in html  # not asked: the interval under the metric is hidden too
    sort_link = unescape(re.findall(r'<a class="sort none" href="([^"]*)">Model</a>', html)[0])
    assert sort_link == "/runs?runtime=onnxruntime&page_size=50&cols=model%2Chardware%2Cmetric&sort=model"
    assert '<input type="hidden" name="cols" value="model,hardware,metric">' in html  # the filters keep them
    assert "Columns (3 of 14 shown)" in html
    assert_accessible(html)
    # the chooser's form sends cols repeated, with the empty one: the union; the empty one alone: the run id only
    form = client.get("/runs?cols=&cols=verdict&cols=hash").text
    assert _shown_cols(form) == ["verdict", "hash"]
    bare = client.get("/runs?cols=").text
    assert _shown_cols(bare) == [] and parse(bare).tables["runs-table"].rows[0][0] == RUN_B[:12]


def test_an_unknown_column_is_refused_naming_the_allowed_ones(web: dict[str, Any]) -> None:  # noqa: F811
    client = logged_in(web["app"], web["tokens"]["viewer"])
    bad = client.get("/runs", params={"cols": "model,<script>alert(1)</script>"})
    assert bad.status_code == 422
    assert "<script>alert(1)" not in bad.text  # escaped, never markup
    text = unescape(bad.text)
    assert "cols: unknown column '<script>alert(1)</script>'; the columns are " + ", ".join(KEYS) in text
    many = client.get("/runs", params={"cols": ",".join(["model"] * (MAX_NAMES + 1))})
    assert many.status_code == 422 and f"cols: at most {MAX_NAMES} column names, got {MAX_NAMES + 1}" in many.text
    long = client.get("/runs", params={"cols": "x" * 5000})
    assert long.status_code == 422 and "x" * 41 not in long.text  # the name is quoted 40 characters at most


def test_the_filters_fold_away_unless_one_is_active(web: dict[str, Any]) -> None:  # noqa: F811
    client = logged_in(web["app"], web["tokens"]["viewer"])
    closed = client.get("/runs").text
    assert '<details id="filters-box" class="filters-box card">' in closed
    assert "<summary>Filters and sort (none active)</summary>" in closed
    active = client.get("/runs?runtime=onnxruntime&search=lite0").text
    assert '<details id="filters-box" class="filters-box card" open>' in active
    assert "<summary>Filters and sort (2 active)</summary>" in active
    assert [r[0] for r in parse(active).tables["runs-table"].rows] == [RUN_B[:12], RUN_A[:12]]
    css = client.get("/static/style.css").text
    phone = css[css.index("@media (max-width: 640px)") :]
    assert ".filters .field.search { grid-column: 1 / -1; }" in phone  # the search box no longer overlaps a select
    assert ".filters input { width: 100%; min-width: 0; }" in phone
    assert_accessible(active)
