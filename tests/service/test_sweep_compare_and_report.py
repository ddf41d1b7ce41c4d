"""Issue 36 item 1 (the sweep): a pitfall sweep of any size is compared from its runs' pages (``/compare?sweep=ID``,
the reference and eleven variants a page, paged), and its HTML report (pitfall table, Δ chart, visual testing) is
served at ``/api/v1/runs/{sweep_id}/report`` and linked from the run page."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.service.test_web_pages import a11y, assert_accessible, logged_in

EXTRA = 12
"""Variant runs added to the factory sweep's four: sixteen runs, the default sweep's size."""


def extra_run_id(i: int) -> str:
    return f"{i:02d}" + "e" * 30


@pytest.fixture
def sweep16(service_app: Any) -> Any:
    """The factory sweep (reference and three variant runs) with twelve more stored variant runs: 16 runs."""
    from tests.report.factories import LITE0_TOP1, SWEEP_ID, record, sweep, sweep_records

    store = service_app.state.store
    store.save_sweep(sweep())
    for r in sweep_records().values():
        store.save(r)
    for i in range(EXTRA):
        store.save(record(LITE0_TOP1, run_id=extra_run_id(i), sweep_id=SWEEP_ID, variant=f"extra_{i:02d}"))
    return store


def compared_ids(html: str) -> list[str]:
    """The full run ids of the compare page's runs table, in its order (A, B, C, ...)."""
    table = html.split('id="compare-runs-table"', 1)[1].split("</table>", 1)[0]
    return re.findall(r'<a href="/runs/([0-9a-f]+)">', table)


def test_a_sweep_of_sixteen_is_compared_page_by_page_from_its_run_page(
    service_app: Any, tokens: dict[str, str], sweep16: Any
) -> None:
    from tests.report.factories import SWEEP_ID, VARIANT_RUN_IDS

    client = logged_in(service_app, tokens["viewer"])
    reference = VARIANT_RUN_IDS["reference"]
    run = client.get(f"/runs/{reference}").text
    link = re.search(r'<a id="compare-sweep" href="([^"]+)">([^<]+)</a>', run)
    assert link is not None, "no compare link on a sweep of 16"
    assert link.group(1) == f"/compare?sweep={SWEEP_ID}"
    assert link.group(2) == "Compare the sweep's 16 runs side by side"
    first = client.get(link.group(1).replace("&amp;", "&"))
    assert first.status_code == 200, first.text[:400]
    ids1 = compared_ids(first.text)
    assert len(ids1) == 12 and ids1[0] == reference
    assert "16 runs; page 1 of 2" in a11y(first.text).text_of("sweep-pager")
    assert_accessible(first.text)
    nxt = re.search(r'<a rel="next" id="sweep-next" href="([^"]+)">', first.text)
    assert nxt is not None
    second = client.get(nxt.group(1).replace("&amp;", "&"))
    assert second.status_code == 200
    ids2 = compared_ids(second.text)
    assert ids2[0] == reference and len(ids2) == 5 and 'id="sweep-next"' not in second.text
    every = {*VARIANT_RUN_IDS.values(), *(extra_run_id(i) for i in range(EXTRA))}
    assert set(ids1) | set(ids2) == every and len(every) == 16
    short = client.get(f"/compare?sweep={SWEEP_ID[:12]}")  # the 12 characters the pages show
    assert short.status_code == 200 and compared_ids(short.text) == ids1


def test_the_sweep_compare_refuses_bad_requests(service_app: Any, tokens: dict[str, str], sweep16: Any) -> None:
    from tests.report.factories import SWEEP_ID, VARIANT_RUN_IDS

    client = logged_in(service_app, tokens["viewer"])
    for params, status, text in (
        ({"sweep": SWEEP_ID, "page": "3"}, 422, f"page must be between 1 and 2 for sweep {SWEEP_ID[:12]}, not 3"),
        ({"sweep": SWEEP_ID, "page": "0"}, 422, "page"),
        ({"sweep": SWEEP_ID, "page": "99999999999999999999"}, 422, "page"),
        ({"page": "2", "run": VARIANT_RUN_IDS["reference"]}, 400, "give it with sweep=SWEEP_ID"),
        ({"sweep": SWEEP_ID, "a": VARIANT_RUN_IDS["reference"]}, 400, "either sweep (and page) or run ids"),
        ({"sweep": "ffffffffffff"}, 404, "sweep ffffffffffff has 0 stored runs: a compare needs two"),
    ):
        r = client.get("/compare", params=params)
        assert r.status_code == status, (params, r.text[:300])
        assert text in a11y(r.text).text_of("main") if 'id="main"' in r.text else text in r.text
    assert TestClient(service_app).get(f"/compare?sweep={SWEEP_ID}", follow_redirects=False).status_code == 303


def test_the_sweep_report_is_served_and_linked(
    service_app: Any, client: TestClient, tokens: dict[str, str], sweep16: Any, headers_for: Callable[[str], Any]
) -> None:
    from tests.report.factories import SWEEP_ID, VARIANT_RUN_IDS

    web = logged_in(service_app, tokens["viewer"])
    run = web.get(f"/runs/{VARIANT_RUN_IDS['data_layout_bug']}").text
    assert f'<a id="sweep-report" href="/api/v1/runs/{SWEEP_ID}/report">' in run
    report = web.get(f"/api/v1/runs/{SWEEP_ID}/report")  # the link, with the page's cookie
    assert report.status_code == 200 and report.headers["content-type"].startswith("text/html")
    assert "pitfall sweep" in report.text and "Visual testing" in report.text
    assert "data_layout_bug" in report.text and "Channels in BGR order instead of RGB" in report.text
    assert SWEEP_ID in report.text
    by_token = client.get(f"/api/v1/runs/{SWEEP_ID[:12]}/report", headers=headers_for("viewer"))
    assert by_token.status_code == 200 and SWEEP_ID in by_token.text
    run_report = client.get(f"/api/v1/runs/{VARIANT_RUN_IDS['reference']}/report", headers=headers_for("viewer"))
    assert run_report.status_code == 200 and "pitfall sweep" not in run_report.text
    assert client.get(f"/api/v1/runs/{SWEEP_ID}/report").status_code == 401
    bad = client.get(f"/api/v1/runs/{SWEEP_ID}/report", headers={"Authorization": "Bearer rs_forged"})
    assert bad.status_code == 401
    unknown = client.get("/api/v1/runs/ffffffffffff/report", headers=headers_for("viewer"))
    assert unknown.status_code == 404 and unknown.json()["error"]["field"] == "run_id"
    assert "ffffffffffff" in unknown.json()["error"]["message"]
