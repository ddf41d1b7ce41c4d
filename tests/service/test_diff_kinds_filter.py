"""The training diffs (augmentation, loss, gradient, training step) are stored diffs like the others: the web list
and the API filter by their kind; an unknown kind is refused naming every allowed one."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi.testclient import TestClient

from repliscope.store.diffs import DIFF_KINDS, store_diff
from tests.store.test_diff_kinds import TRAINING_KINDS, _augmentation, _training


def test_the_web_list_and_the_api_filter_the_training_kinds(
    service_app: Any, client: TestClient, headers_for: Callable[[str], dict[str, str]]
) -> None:
    store = service_app.state.store
    ids = {kind: store_diff(store, _training(kind)) for kind in TRAINING_KINDS}
    ids["augmentation_diff"] = store_diff(store, _augmentation())
    viewer = headers_for("viewer")
    client.cookies.set("repliscope_token", service_app.state.test_admin_token)
    everything = client.get("/diffs")
    assert everything.status_code == 200 and everything.text.count('<a href="/diffs/') == 4
    for kind in (*TRAINING_KINDS, "augmentation_diff"):
        page = client.get("/diffs", params={"kind": kind})
        assert page.status_code == 200 and page.text.count('<a href="/diffs/') == 1
        assert f'<a href="/diffs/{ids[kind]}' in page.text
        assert f'<a href="/diffs?kind={kind}">{kind}</a>' in everything.text  # the filter offers the kind
        api = client.get("/api/v1/diffs", params={"kind": kind}, headers=viewer).json()
        assert [i["diff_id"] for i in api["items"]] == [ids[kind]]
    unknown = client.get("/diffs", params={"kind": "weights_diff"})
    assert unknown.status_code == 400
    assert f"unknown diff kind &#39;weights_diff&#39; (allowed: {', '.join(DIFF_KINDS)})" in unknown.text
