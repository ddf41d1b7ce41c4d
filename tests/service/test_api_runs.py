"""``/api/v1/runs``, ``/models``, ``/datasets``: queries with filters, paging and sorting (out-of-range values are
422 naming the parameter), unknown ids 404, compare of two runs, dataset registration; CORS off by default;
the request size limit."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.conftest import FOOLBOX_LABELS, LITE0_FOOLBOX_TOP1
from tests.store.records import make_record

T0 = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)


@pytest.fixture
def stored(service_app: Any) -> list[str]:
    """Five runs: three onnxruntime, two torch, an hour apart; the last torch run flips samples 0 and 1."""
    store = service_app.state.store
    ids = []
    for i in range(5):
        top1: list[int | None] = list(LITE0_FOOLBOX_TOP1)
        if i == 4:
            top1[0], top1[1] = 1, 2
        run_id = f"{i:x}" * 32
        store.save(
            make_record(run_id, top1, created_at=T0 + timedelta(hours=i), runtime="onnxruntime" if i < 3 else "torch")
        )
        ids.append(run_id)
    return ids


def test_query_filters_paging_sorting(
    client: TestClient, headers_for: Callable[[str], dict[str, str]], stored: list[str]
) -> None:
    viewer = headers_for("viewer")

    def query(**params: Any) -> Any:
        r = client.get("/api/v1/runs", params=params, headers=viewer)
        assert r.status_code == 200, r.text
        return r.json()

    everything = query()
    assert everything["total"] == 5 and [r["run_id"] for r in everything["items"]] == stored[::-1]
    page = query(page=2, page_size=2, sort="created_at")
    assert (page["total"], page["page"], page["page_size"]) == (5, 2, 2)
    assert [r["run_id"] for r in page["items"]] == stored[2:4]
    torch = query(runtime="torch")
    assert torch["total"] == 2 and {r["runtime"] for r in torch["items"]} == {"torch"}
    assert query(model="efficientnet-lite0")["total"] == 5
    assert query(model="resnet50")["total"] == 0
    late = query(created_from=(T0 + timedelta(hours=2, minutes=30)).isoformat())
    assert [r["run_id"] for r in late["items"]] == stored[3:][::-1]
    assert query(page=9)["items"] == []
    row = everything["items"][0]
    assert row["top1"] == pytest.approx(16 / 20) and row["num_samples"] == 20 and row["manifest_version"] == "1.0.0"


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"page": 0}, "query.page"),
        ({"page": -3}, "query.page"),
        ({"page_size": 0}, "query.page_size"),
        ({"page_size": 501}, "query.page_size"),
        ({"page": "two"}, "query.page"),
        ({"sort": "run_id"}, "query.sort"),
        ({"verdict": "maybe"}, "query.verdict"),
        ({"created_from": "yesterday"}, "query.created_from"),
    ],
)
def test_out_of_range_query_parameters_are_422(
    client: TestClient, headers_for: Callable[[str], dict[str, str]], params: dict[str, Any], field: str
) -> None:
    r = client.get("/api/v1/runs", params=params, headers=headers_for("viewer"))
    assert r.status_code == 422
    assert r.json()["error"]["field"] == field and r.json()["error"]["code"] == "invalid"


def test_misspelt_query_parameter_is_422_not_every_run(
    client: TestClient, headers_for: Callable[[str], dict[str, str]]
) -> None:
    r = client.get("/api/v1/runs", params={"since": "2026-01-01", "model": "m"}, headers=headers_for("viewer"))
    assert r.status_code == 422
    error = r.json()["error"]
    assert error["field"] == "query.since" and error["code"] == "invalid"
    assert error["message"].startswith("unknown query parameter 'since' (allowed: created_from, created_to, ")


def test_one_run_unknown_ids_and_compare(
    client: TestClient, headers_for: Callable[[str], dict[str, str]], stored: list[str]
) -> None:
    viewer = headers_for("viewer")
    for path in (
        "/api/v1/runs/deadbeefdeadbeef",
        "/api/v1/runs/ab",
        "/api/v1/runs/deadbeefdead/samples",
        "/api/v1/runs/deadbeefdead/report",
    ):
        r = client.get(path, headers=viewer)
        assert r.status_code == 404 and r.json()["error"]["field"] == "run_id", path
    r = client.get("/api/v1/runs/compare", params={"a": stored[0], "b": "nope-nope"}, headers=viewer)
    assert r.status_code == 404 and r.json()["error"]["field"] == "b"
    assert client.get("/api/v1/runs/compare", params={"a": stored[0]}, headers=viewer).status_code == 422
    cmp = client.get("/api/v1/runs/compare", params={"a": stored[0], "b": stored[4]}, headers=viewer).json()
    assert cmp["common_evaluated"] == 20
    assert sorted(f["sample_id"] for f in cmp["top1_flips"]) == [
        f"imagenet_00_{FOOLBOX_LABELS[0]}.jpg",
        f"imagenet_01_{FOOLBOX_LABELS[1]}.jpg",
    ]
    top1 = next(d for d in cmp["metric_deltas"] if d["name"] == "top1")
    assert top1["delta"] == pytest.approx(-2 / 20)
    bad = client.get(f"/api/v1/runs/{stored[0]}/samples", params={"page_size": 100000}, headers=viewer)
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "query.page_size"


def test_datasets_registry(client: TestClient, headers_for: Callable[[str], dict[str, str]], tmp_path: Any) -> None:
    admin, viewer = headers_for("admin"), headers_for("viewer")
    listed = client.get("/api/v1/datasets", headers=viewer).json()
    assert [(d["name"], d["spec"], d["created_by"]) for d in listed] == [
        ("foolbox_imagenet", "foolbox_imagenet", "repliscope serve")
    ]
    r = client.post("/api/v1/datasets", json={"name": "foolbox_imagenet", "spec": "foolbox_imagenet"}, headers=admin)
    assert r.status_code == 409 and r.json()["error"]["field"] == "name"
    r = client.post("/api/v1/datasets", json={"name": "nowhere", "spec": str(tmp_path / "absent")}, headers=admin)
    assert r.status_code == 422 and r.json()["error"]["field"] == "spec"
    r = client.post("/api/v1/datasets", json={"name": "a b", "spec": "foolbox_imagenet"}, headers=admin)
    assert r.status_code == 422 and r.json()["error"]["field"] == "body.name"
    r = client.post(
        "/api/v1/datasets", json={"name": "fb2", "spec": "foolbox_imagenet", "description": "again"}, headers=admin
    )
    assert r.status_code == 201 and r.json()["created_by"] == "admin"
    assert [d["name"] for d in client.get("/api/v1/datasets", headers=viewer).json()] == ["fb2", "foolbox_imagenet"]


def test_cors_is_off_by_default_and_on_when_configured(
    client: TestClient, service_db_url: str, headers_for: Callable[[str], dict[str, str]]
) -> None:
    r = client.get("/api/v1/health", headers={"Origin": "https://evil.example"})
    assert r.status_code == 200 and "access-control-allow-origin" not in r.headers
    r = client.options(
        "/api/v1/runs", headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "GET"}
    )
    assert "access-control-allow-origin" not in r.headers
    from repliscope.service.app import create_app
    from repliscope.service.config import ServiceConfig

    app = create_app(ServiceConfig(db_url=service_db_url, cors_origins=["https://ui.example"], mount_web=False))
    with TestClient(app) as other:
        r = other.get("/api/v1/health", headers={"Origin": "https://ui.example"})
        assert r.headers["access-control-allow-origin"] == "https://ui.example"
        r = other.get("/api/v1/health", headers={"Origin": "https://evil.example"})
        assert "access-control-allow-origin" not in r.headers
    app.state.executor.shutdown()


def test_request_size_limit(client: TestClient, headers_for: Callable[[str], dict[str, str]]) -> None:
    r = client.post(
        "/api/v1/datasets",
        content=b"x" * ((1 << 20) + 1),
        headers={**headers_for("admin"), "Content-Type": "application/json"},
    )
    assert r.status_code == 413
    assert r.json() == {
        "error": {"message": "the request body is larger than 1048576 bytes", "field": "body", "code": "too_large"}
    }


def test_openapi_and_docs(client: TestClient) -> None:
    schema = client.get("/openapi.json").json()
    assert {"/api/v1/runs", "/api/v1/jobs", "/api/v1/manifests", "/api/v1/datasets"} <= set(schema["paths"])
    assert "ErrorResponse" in schema["components"]["schemas"]
    assert client.get("/docs").status_code == 200
