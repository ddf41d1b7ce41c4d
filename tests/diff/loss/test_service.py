"""Stored loss diffs through the service: ``/api/v1/diffs?kind=loss_diff`` and ``/api/v1/diffs/{id}`` (the whole
result: components, gradients, matching, diagnosis) and the web page ``/diffs/{id}`` (per-component table,
gradient errors, matching table, the named pitfall)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, get_args

import pytest

pytest.importorskip("fastapi", reason="the 'service' extra is not installed")
pytest.importorskip("httpx", reason="the 'service' extra is not installed")

from fastapi.testclient import TestClient

from repliscope.diff.loss.contract import LOSSES, LossInputs
from repliscope.diff.loss.driver import run_loss_diff
from repliscope.store.diffs import DIFF_KINDS, store_diff
from tests.diff.loss import candidates
from tests.diff.loss.test_darknet_yolo import _tiny
from tests.service import conftest as service_fixtures
from tests.yolo._assets import need_darknet

service_db_url = service_fixtures.service_db_url
service_app = service_fixtures.service_app
tokens = service_fixtures.tokens
client = service_fixtures.client
headers_for = service_fixtures.headers_for

Headers = Callable[[str], dict[str, str]]


def _results() -> tuple[dict[str, Any], dict[str, Any]]:
    need_darknet()
    from repliscope.backends.darknet.loss import darknet_yolo_loss

    inputs: LossInputs = _tiny()
    spec = LOSSES.get("darknet_yolo")
    good = run_loss_diff(inputs, spec, darknet_yolo_loss, "numpy", candidates.yolov3_numpy, source="random seed 3")
    bad = run_loss_diff(
        inputs, spec, darknet_yolo_loss, "softmax", candidates.YoloV3Torch(class_loss="softmax_ce"), source="random"
    )
    return good.model_dump(mode="json"), bad.model_dump(mode="json")


def test_the_api_lists_every_stored_kind() -> None:
    from repliscope.service.routers.diffs import Kind

    assert set(get_args(Kind)) == set(DIFF_KINDS)


def test_loss_diffs_through_the_api_and_the_page(service_app: Any, client: TestClient, headers_for: Headers) -> None:
    good, bad = _results()
    store = service_app.state.store
    gid = store_diff(store, good, manifest_name="tiny-yolo")
    bid = store_diff(store, bad, manifest_name="tiny-yolo")

    page = client.get("/api/v1/diffs?kind=loss_diff", headers=headers_for("viewer")).json()
    assert page["total"] == 2
    assert [(i["diff_id"], i["verdict"], i["a"], i["b"]) for i in page["items"]] == [
        (bid, "failed", "darknet_yolo", "softmax"),
        (gid, "passed", "darknet_yolo", "numpy"),
    ]
    assert page["items"][0]["summary"] == "first divergent: yolo_1/class"
    one = client.get(f"/api/v1/diffs/{bid[:10]}", headers=headers_for("viewer")).json()
    r = one["result"]
    assert r["diagnosis"]["pitfall"] == "class_softmax_ce" and r["first_divergent"] == "yolo_1/class"
    assert [c["name"] for c in r["components"]] == [
        "yolo_1/box",
        "yolo_1/objectness",
        "yolo_1/no_object",
        "yolo_1/class",
    ]
    assert r["gradients"][0]["output"] == "yolo_1" and r["gradients"][0]["passed"] is False
    assert (
        client.get(f"/api/v1/diffs/{gid}", headers=headers_for("viewer")).json()["result"]["matching"][0]["pairs"] == 2
    )

    client.cookies.set("repliscope_token", service_app.state.test_admin_token)
    html = client.get(f"/diffs/{bid}").text
    assert 'id="components-table"' in html and '<th scope="row">yolo_1/class</th>' in html
    assert 'id="gradients-table"' in html and ("class 0, cell" in html or "class 1, cell" in html)
    assert 'id="loss-first-divergent"><strong>yolo_1/class</strong>' in html
    assert "class_softmax_ce" in html and 'id="matching-note"' in html  # torch reports no matching: said
    assert '(over tolerance: <span class="entries-over">class</span>)' in html
    ok = client.get(f"/diffs/{gid}").text
    assert 'id="matching-table"' in ok and "none: every value, gradient and match within tolerance" in ok
    assert "libdarknet forward_yolo_layer" in ok


@pytest.mark.parametrize(
    "body",
    [
        {"kind": "diff", "options": {"loss": "HOSTILE"}},
        {"kind": "loss_diff", "options": {}},
        {"kind": "diff", "options": {"candidate": "HOSTILE"}},
    ],
    ids=["diff-with-loss", "loss-diff-kind", "diff-with-candidate"],
)
def test_the_service_never_loads_a_loss_file(
    client: TestClient, headers_for: Headers, tmp_path: Path, body: dict[str, Any]
) -> None:
    """A loss candidate is the user's own code on their own command line: no job kind or option takes one. A file
    that would write a marker when imported is named; the request is refused and the marker never appears."""
    marker = tmp_path / "imported"
    hostile = tmp_path / "evil_loss.py"
    hostile.write_text(f"open({str(marker)!r}, 'w').write('x')\ndef loss(inputs): return None\n")
    options = {k: (f"{hostile}:loss" if v == "HOSTILE" else v) for k, v in body["options"].items()}
    request = {"manifest": "yolov3-tiny@1.0.0", "runtime": "darknet", "dataset": "coco", **body, "options": options}
    r = client.post("/api/v1/jobs", json=request, headers=headers_for("runner"))
    assert r.status_code == 422, r.text
    field = r.json()["error"]["field"]
    assert field.startswith("body.options") or field == "body.kind"
    assert not marker.exists()
