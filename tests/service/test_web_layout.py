"""Phone-width layout regressions of the web UI: a claim's reason is a prose cell with a minimum width, so at 390 px
it does not wrap one word a line into a tall, blank-looking claims table."""

from __future__ import annotations

import re
from typing import Any

from tests.service.test_web_pages import RUN_A, logged_in, web  # noqa: F401  (fixture)


def test_the_claim_reason_is_a_prose_cell_with_a_minimum_width(web: dict[str, Any]) -> None:  # noqa: F811
    client = logged_in(web["app"], web["tokens"]["viewer"])
    r = client.get(f"/runs/{RUN_A}")
    assert r.status_code == 200
    assert re.search(r'<td class="prose">[^<]*\S', r.text)  # the reason text sits in the prose cell
    css = client.get("/static/style.css")
    assert css.status_code == 200 and re.search(r"td\.prose \{ min-width: 16rem; \}", css.text)


def test_the_run_filters_sit_two_a_row_at_phone_width(web: dict[str, Any]) -> None:  # noqa: F811
    css = logged_in(web["app"], web["tokens"]["viewer"]).get("/static/style.css").text
    phone = css[css.index("@media (max-width: 640px)") :]
    assert ".filters { display: grid; grid-template-columns: repeat(2, minmax(0, 1fr));" in phone
