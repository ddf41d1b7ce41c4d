"""Issue 32 item 12 and issue 38's date rule: every page / limit / position parameter of every route is bounded
(``page=2**62`` was a 500 on ``/runs``: the offset overflowed SQLite's integer), and the API's date filters take
ISO 8601 dates and datetimes only (``253402300800`` was read as milliseconds and ``20000000000`` as seconds)."""

from __future__ import annotations

from collections.abc import Callable
from html import unescape
from typing import Any

import pytest
from fastapi.testclient import TestClient

from repliscope.service.routers.common import MAX_PAGE
from tests.service.test_web_pages import logged_in
from tests.store.records import TOP1_A, make_record

RUN = "b0" * 16
HUGE = str(2**62)  # 4611686018427387904
HUGER = "9" * 5000  # past Python's int-string conversion limit


@pytest.fixture
def one_run(service_app: Any) -> str:
    service_app.state.store.save(make_record(RUN, TOP1_A))
    return RUN


API_BOUNDED = [
    ("/api/v1/runs?page={n}", "query.page", f"less than or equal to {MAX_PAGE}"),
    ("/api/v1/runs?page_size={n}", "query.page_size", "less than or equal to 500"),
    (f"/api/v1/runs/{RUN}/samples?page={{n}}", "query.page", f"less than or equal to {MAX_PAGE}"),
    (f"/api/v1/runs/{RUN}/samples?page_size={{n}}", "query.page_size", "less than or equal to 500"),
    ("/api/v1/runs/export?limit={n}", "query.limit", "less than or equal to 100000"),
    ("/api/v1/diffs?page={n}", "query.page", f"less than or equal to {MAX_PAGE}"),
    ("/api/v1/diffs?page_size={n}", "query.page_size", "less than or equal to"),
    ("/api/v1/jobs?limit={n}", "query.limit", "less than or equal to 1000"),
    ("/api/v1/stack-matrices?limit={n}", "query.limit", "less than or equal to 500"),
]


@pytest.mark.parametrize(("template", "field", "says"), API_BOUNDED)
def test_every_api_page_and_limit_refuses_a_huge_value_with_422(
    client: TestClient,
    headers_for: Callable[[str], dict[str, str]],
    one_run: str,
    template: str,
    field: str,
    says: str,
) -> None:
    for value in (HUGE, f"-{HUGE}"):
        r = client.get(template.format(n=value), headers=headers_for("viewer"))
        assert r.status_code == 422, (value, r.text)
        error = r.json()["error"]
        assert error["field"] == field and error["code"] == "invalid"
        assert says in error["message"] or "greater than or equal to" in error["message"], error
    r = client.get(template.format(n=HUGER), headers=headers_for("viewer"))
    assert r.status_code == 422 and r.json()["error"]["field"] == field
    r = client.get(template.format(n="2**62"), headers=headers_for("viewer"))
    assert r.status_code == 422 and "valid integer" in r.json()["error"]["message"]


def test_the_token_id_of_a_revoke_is_bounded(client: TestClient, headers_for: Callable[[str], dict[str, str]]) -> None:
    r = client.post(f"/api/v1/tokens/{2**63}/revoke", headers=headers_for("admin"))
    assert r.status_code == 422 and r.json()["error"]["field"] == "path.token_id"


@pytest.mark.parametrize(
    ("url", "field"),
    [
        ("/runs?page={n}", "page"),
        (f"/runs/{RUN}?samples_page={{n}}", "samples_page"),
        ("/diffs?page={n}", "page"),
    ],
)
def test_every_web_page_number_refuses_a_huge_value_with_422(
    service_app: Any, tokens: dict[str, str], one_run: str, url: str, field: str
) -> None:
    web = logged_in(service_app, tokens["viewer"])
    for value in (HUGE, HUGER, "0", "-1", "²", "1e3", str(MAX_PAGE + 1)):
        r = web.get(url.format(n=value))
        assert r.status_code == 422, (value, r.status_code)
        assert r.headers["content-type"].startswith("text/html")
        assert f"{field} must be a whole number from 1 to 1,000,000, not '{value[:40]}'" in unescape(r.text)
    assert web.get(url.format(n=str(MAX_PAGE))).status_code == 200


def test_a_thumbnail_position_is_bounded(service_app: Any, tokens: dict[str, str], one_run: str) -> None:
    web = logged_in(service_app, tokens["viewer"])
    assert web.get(f"/runs/{RUN}/samples/{HUGE}/thumbnail.png").status_code == 422
    assert web.get(f"/runs/{RUN}/samples/-1/thumbnail.png").status_code == 422
    assert web.get(f"/runs/{RUN}/samples/{2**31 - 1}/thumbnail.png").status_code == 404  # in range, no such sample


# --- the date rule -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("param", ["created_from", "created_to"])
@pytest.mark.parametrize("number", ["253402300800", "20000000000", "0", "1732000000", "1732000000.5", "-1"])
def test_a_number_is_never_read_as_a_timestamp(
    client: TestClient, headers_for: Callable[[str], dict[str, str]], one_run: str, param: str, number: str
) -> None:
    r = client.get(f"/api/v1/runs?{param}={number}", headers=headers_for("viewer"))
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert error["field"] == f"query.{param}"
    assert error["message"] == (
        f"'{number}' is not a date: the filter takes an ISO 8601 date (YYYY-MM-DD: midnight UTC) or date and time "
        "(YYYY-MM-DDTHH:MM[:SS[.ffffff]] with Z or +HH:MM, UTC without one); numbers such as Unix timestamps are "
        "refused"
    )
    export = client.get(f"/api/v1/runs/export?{param}={number}", headers=headers_for("viewer"))
    assert export.status_code == 422 and export.json()["error"]["field"] == f"query.{param}"


@pytest.mark.parametrize(
    ("created_from", "total"),
    [
        ("2026-11-21", 1),  # the run: 2026-11-21T23:30:05.123456Z
        ("2026-11-22", 0),
        ("2026-11-21T23:30:05Z", 1),
        ("2026-11-21T23:30:06Z", 0),
        ("2026-11-21T23:30:05.123456", 1),  # no offset: UTC
        ("2026-11-22T00:30:05+01:00", 1),  # = 23:30:05Z
        ("2026-11-21 23:30:05.123457+00:00", 0),
    ],
)
def test_iso_dates_and_datetimes_filter_in_utc(
    client: TestClient, headers_for: Callable[[str], dict[str, str]], one_run: str, created_from: str, total: int
) -> None:
    r = client.get("/api/v1/runs", params={"created_from": created_from}, headers=headers_for("viewer"))
    assert r.status_code == 200, r.text
    assert r.json()["total"] == total


@pytest.mark.parametrize("bad", ["2026-13-01", "2026-11-21T25:00", "2026-W47", "20261121", "2026-11-21T12:00+0100"])
def test_other_date_spellings_are_422_naming_the_rule(
    client: TestClient, headers_for: Callable[[str], dict[str, str]], bad: str
) -> None:
    r = client.get("/api/v1/runs", params={"created_to": bad}, headers=headers_for("viewer"))
    assert r.status_code == 422 and r.json()["error"]["field"] == "query.created_to"
    assert "ISO 8601 date (YYYY-MM-DD: midnight UTC)" in r.json()["error"]["message"]


def test_the_rule_is_in_the_api_reference(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    params = {p["name"]: p for p in spec["paths"]["/api/v1/runs"]["get"]["parameters"]}
    assert "numbers such as Unix timestamps are refused" in params["created_from"]["description"]
    assert "ISO 8601 date" in params["created_to"]["description"]


def test_the_web_page_reads_numbers_as_no_date(service_app: Any, tokens: dict[str, str], one_run: str) -> None:
    web = logged_in(service_app, tokens["viewer"])
    r = web.get("/runs?created_from=253402300800")
    assert r.status_code == 422
    assert "created_from must be a date YYYY-MM-DD, not '253402300800'" in unescape(r.text)
