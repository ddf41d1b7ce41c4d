"""Issue 21 item 6, "nothing leaked, nothing stale": no database URL in error pages or API 404s, no server path on
a non-admin's run page (an admin sees them), ``Cache-Control: no-store`` on signed-in pages and API answers (Back
after logging out shows no models page), and the 12-character sweep id the UI shows as a ``sweep_id`` filter."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from repliscope.service.web.redact import hide_paths, named_roots
from tests.service.test_web_pages import RUN_A, RUN_B, logged_in
from tests.store.records import TOP1_A, TOP1_B, make_record

SWEEP_1 = "5eed" + "a" * 8 + "1" * 20
SWEEP_2 = "5eed" + "a" * 8 + "2" * 20  # the same 12 characters as SWEEP_1
SWEEP_3 = "5eed" + "b" * 28


@pytest.fixture
def leaky(service_app: Any, tokens: dict[str, str]) -> dict[str, Any]:
    """A run whose record names the model cache's ONNX file, the dataset's folder and the interpreter's prefix."""
    store = service_app.state.store
    cache = dict(named_roots(None))["<model cache>"]
    rec = make_record(RUN_A, TOP1_A)
    rec.runtime["model_path"] = f"{cache}/onnx/efficientnet-lite0-1.0.0.onnx"
    rec.dataset["origin"] = "/srv/shared/data/imagenet-sample"
    rec.software["executable"] = f"{sys.prefix}/bin/python3"
    store.save(rec)
    return {"app": service_app, "tokens": tokens, "cache": cache}


def _db_path(app: Any) -> str:
    return str(app.state.config.db_url).removeprefix("sqlite:///")


def test_api_404s_and_error_pages_do_not_show_the_database_url(leaky: dict[str, Any], headers_for: Any) -> None:
    app = leaky["app"]
    db = _db_path(app)
    from fastapi.testclient import TestClient

    api = TestClient(app)
    r = api.get("/api/v1/runs/ffffffffffff", headers=headers_for("viewer"))
    assert r.status_code == 404
    message = r.json()["error"]["message"]
    assert message.startswith("unknown run id 'ffffffffffff' in the run store; most recent: ")
    assert db not in r.text and "sqlite" not in r.text
    assert r.headers["cache-control"] == "no-store"
    page = logged_in(app, leaky["tokens"]["viewer"]).get("/runs/ffffffffffff")
    assert page.status_code == 404
    assert "unknown run id" in page.text and "in the run store" in page.text
    assert db not in page.text and "sqlite:" not in page.text


def test_a_viewer_sees_paths_relative_to_named_roots_and_an_admin_sees_them(leaky: dict[str, Any]) -> None:
    app, cache = leaky["app"], leaky["cache"]
    viewer = logged_in(app, leaky["tokens"]["viewer"]).get(f"/runs/{RUN_A}")
    assert viewer.status_code == 200
    text = viewer.text
    for server_path in (cache, "/srv/shared/data", sys.prefix + "/bin"):
        assert server_path not in text
    for shown in (
        "&lt;model cache&gt;/onnx/efficientnet-lite0-1.0.0.onnx",
        "…/data/imagenet-sample",
        "&lt;python prefix&gt;/bin/python3",
    ):
        assert shown in text
    admin = logged_in(app, leaky["tokens"]["admin"]).get(f"/runs/{RUN_A}").text
    for server_path in (
        f"{cache}/onnx/efficientnet-lite0-1.0.0.onnx",
        "/srv/shared/data/imagenet-sample",
        f"{sys.prefix}/bin/python3",
    ):
        assert server_path in admin
    other = make_record(RUN_B, TOP1_B)
    other.runtime["model_path"] = "/opt/models/lite0/model.onnx"
    app.state.store.save(other)
    compare = logged_in(app, leaky["tokens"]["viewer"]).get(f"/compare?a={RUN_A}&b={RUN_B}")
    assert compare.status_code == 200
    assert cache not in compare.text and "/opt/models" not in compare.text
    assert "&lt;model cache&gt;/onnx/efficientnet-lite0-1.0.0.onnx" in compare.text
    assert "…/lite0/model.onnx" in compare.text
    admin_compare = logged_in(app, leaky["tokens"]["admin"]).get(f"/compare?a={RUN_A}&b={RUN_B}").text
    assert "/opt/models/lite0/model.onnx" in admin_compare


def test_hide_paths_keeps_urls_and_relative_paths() -> None:
    roots = [("<model cache>", "/var/cache/repliscope"), ("~", "/home/ana")]
    text = (
        "export /var/cache/repliscope/onnx/m.onnx from https://example.org/a/b.onnx, labels "
        "examples/labels.txt, data /home/ana/data/x and /opt/models/net/weights.pt; root /var/cache/repliscope"
    )
    assert hide_paths(text, roots) == (
        "export <model cache>/onnx/m.onnx from https://example.org/a/b.onnx, labels examples/labels.txt, data "
        "~/data/x and …/net/weights.pt; root <model cache>"
    )


def test_signed_in_pages_and_api_answers_are_not_stored_by_the_browser(leaky: dict[str, Any], headers_for: Any) -> None:
    web = logged_in(leaky["app"], leaky["tokens"]["viewer"])
    for path in ("/", "/runs", f"/runs/{RUN_A}", "/login"):
        r = web.get(path)
        assert r.status_code == 200 and r.headers["cache-control"] == "no-store", path
    assert web.get("/static/style.css").headers["cache-control"] == "max-age=3600"  # assets may be cached
    assert web.get("/api/v1/runs").headers["cache-control"] == "no-store"
    web.post("/logout", follow_redirects=False)
    back = web.get("/", follow_redirects=False)  # the browser must ask again: it gets the login redirect
    assert back.status_code == 303 and back.headers["location"].startswith("/login")


def test_sweep_id_accepts_the_twelve_characters_the_ui_shows(leaky: dict[str, Any], headers_for: Any) -> None:
    store = leaky["app"].state.store
    for i, (sweep, top1) in enumerate(((SWEEP_1, TOP1_A), (SWEEP_1, TOP1_B), (SWEEP_2, TOP1_A), (SWEEP_3, TOP1_B))):
        store.save(make_record(f"{i:02d}" * 16, top1, kind="pitfall", sweep_id=sweep, variant=f"v{i}"))
    from fastapi.testclient import TestClient

    api = TestClient(leaky["app"])

    def runs(sweep_id: str) -> Any:
        return api.get("/api/v1/runs", params={"sweep_id": sweep_id}, headers=headers_for("viewer"))

    assert runs(SWEEP_1).json()["total"] == 2  # the full id
    shown = SWEEP_3[:12]
    assert {r["run_id"] for r in runs(shown).json()["items"]} == {"03" * 16}
    ambiguous = runs(SWEEP_1[:12])
    assert ambiguous.status_code == 422
    error = ambiguous.json()["error"]
    assert error["field"] == "query.sweep_id" and error["code"] == "ambiguous"
    assert error["message"] == (f"sweep id prefix '{SWEEP_1[:12]}' is ambiguous; candidates: {SWEEP_1}, {SWEEP_2}")
    assert runs(SWEEP_1[:13]).json()["total"] == 2
    assert runs("5eedcc" + "0" * 6).json()["total"] == 0  # no such sweep: no runs
