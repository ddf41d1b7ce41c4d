"""Stored augmentation and training diffs on the web page ``/diffs/{id}``: the augmentation's op and KS tables,
and the gradient section of a training diff, through the real service."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="the 'service' extra is not installed")
from fastapi.testclient import TestClient

from repliscope.store.diffs import store_diff
from tests.diff.augment._results import flip_results
from tests.service import conftest as service_fixtures

service_db_url = service_fixtures.service_db_url
service_app = service_fixtures.service_app
tokens = service_fixtures.tokens
client = service_fixtures.client
headers_for = service_fixtures.headers_for
Headers = Callable[[str], dict[str, str]]


def test_an_augmentation_diff_page_shows_its_ops_and_distributions(
    service_app: Any, client: TestClient, headers_for: Headers
) -> None:
    shared, own = flip_results()
    store = service_app.state.store
    a = store_diff(store, shared.model_dump(mode="json"), manifest_name="yolov3-tiny")
    b = store_diff(store, own.model_dump(mode="json"), manifest_name="yolov3-tiny")
    listed = client.get("/api/v1/diffs?kind=augmentation_diff", headers=headers_for("viewer")).json()
    assert {i["diff_id"] for i in listed["items"]} == {a, b}
    client.cookies.set("repliscope_token", service_app.state.test_admin_token)
    html = client.get(f"/diffs/{a}").text
    assert 'id="augment-ops-table"' in html and '<th scope="row">flip</th>' in html
    assert 'id="augment-first-divergent"><strong>flip</strong>' in html
    assert "mirrored left-right" in html
    html_own = client.get(f"/diffs/{b}").text
    assert 'id="augment-dist-table"' in html_own and "mirrored" in html_own
    assert "&lt;own_never_flips&gt;" in html_own and "<own_never_flips>" not in html_own  # the name is escaped
