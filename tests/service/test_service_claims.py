"""Claims judged through the service: a registered dataset declares what its data is (``as: NAME/SPLIT``, admin
only, who and when recorded); an evaluate job of it passes the declaration to the core the way the CLI's ``--as``
does, so the service's verdict is the CLI's; the run is recorded under the registered name (``GET /runs?dataset=``
finds it) with the declaration."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from tests.conftest import LITE0
from tests.service.test_api_jobs import wait_for

SHARED_IMAGENET = Path(__file__).resolve().parents[3] / "shared" / "data" / "imagenet-sample"


def _foolbox_folder(tmp_path: Path) -> Path:
    """An image folder of foolbox's 20 ImageNet images (``imagenet_07_609.jpg``: labelled by filename_index)."""
    from repliscope.datasets.foolbox_data import load_foolbox_imagenet

    folder = tmp_path / "foolbox-copy"
    folder.mkdir()
    for sample in load_foolbox_imagenet().samples:
        shutil.copyfile(sample.location, folder / sample.id)
    return folder


def _register(client: TestClient, headers: dict[str, str], **body: Any) -> Any:
    return client.post("/api/v1/datasets", json=body, headers=headers)


def test_registration_declares_the_data_and_only_an_admin_may(
    client: TestClient, headers_for: Callable[[str], dict[str, str]], tmp_path: Path
) -> None:
    folder = _foolbox_folder(tmp_path)
    admin, runner, viewer = headers_for("admin"), headers_for("runner"), headers_for("viewer")
    refused = _register(client, runner, name="sample", spec=str(folder), **{"as": "imagenet-1k/val"})
    assert refused.status_code == 403
    bad = _register(client, admin, name="sample", spec=str(folder), **{"as": "imagenet-1k"})
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "as", bad.text
    assert "must be NAME/SPLIT, e.g. imagenet-1k/val" in bad.json()["error"]["message"]
    made = _register(client, admin, name="sample", spec=str(folder), **{"as": "imagenet-1k/val"})
    assert made.status_code == 201, made.text
    out = made.json()
    assert (out["name"], out["as"], out["declared_by"], out["annotates"]) == (
        "sample",
        "imagenet-1k/val",
        "admin",
        ["labels"],
    )
    assert out["declared_at"] == out["created_at"]
    undeclared = _register(client, admin, name="plain", spec=str(folder)).json()
    assert (undeclared["as"], undeclared["declared_by"], undeclared["declared_at"]) == (None, None, None)

    # a change: admin only, recorded
    assert client.put("/api/v1/datasets/plain/declaration", json={"as": "x/y"}, headers=runner).status_code == 403
    changed = client.put("/api/v1/datasets/plain/declaration", json={"as": "imagenet-1k/val"}, headers=admin)
    assert changed.status_code == 200, changed.text
    assert (changed.json()["as"], changed.json()["declared_by"]) == ("imagenet-1k/val", "admin")
    withdrawn = client.put("/api/v1/datasets/plain/declaration", json={"as": None}, headers=admin).json()
    assert (withdrawn["as"], withdrawn["declared_by"]) == (None, "admin")
    missing = client.put("/api/v1/datasets/nope/declaration", json={"as": "a/b"}, headers=admin)
    assert missing.status_code == 404 and "not registered" in missing.json()["error"]["message"]
    extra = client.put("/api/v1/datasets/plain/declaration", json={"declared_as": "a/b"}, headers=admin)
    assert extra.status_code == 422

    from tests.service.test_wizard_fit import face_dataset

    faces = _register(client, admin, name="faces", spec=f"dlib_xml:{face_dataset(tmp_path)}", **{"as": "wider/val"})
    assert faces.status_code == 201, faces.text
    assert (faces.json()["annotates"], faces.json()["as"]) == (["boxes"], "wider/val")
    proc = _register(client, admin, name="proc", spec="dlib_xml:/proc/self/x.xml")
    assert proc.status_code == 422 and "pseudo-filesystem" in proc.json()["error"]["message"]

    listed = {d["name"]: d for d in client.get("/api/v1/datasets", headers=viewer).json()}
    assert set(listed) == {"faces", "foolbox_imagenet", "plain", "sample"}
    assert listed["sample"]["as"] == "imagenet-1k/val" and listed["plain"]["as"] is None
    assert client.get("/api/v1/datasets/sample", headers=viewer).json()["as"] == "imagenet-1k/val"


def _cli_record(spec: str, tmp_path: Path, limit: int | None = None) -> Any:
    from repliscope.cli.main import app

    args = ["evaluate", str(LITE0), "--dataset", spec, "--as", "imagenet-1k/val", "--runtime", "onnxruntime"]
    args += ["--threads", "1", "--batch-size", "8", "--db", f"sqlite:///{tmp_path / 'cli.db'}", "--json"]
    if limit is not None:
        args += ["--limit", str(limit)]
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 0, out.output
    return json.loads(out.stdout)


def _service_run(
    client: TestClient, headers_for: Callable[[str], dict[str, str]], name: str, spec: str, limit: int | None = None
) -> Any:
    admin, runner, viewer = headers_for("admin"), headers_for("runner"), headers_for("viewer")
    made = _register(client, admin, name=name, spec=spec, **{"as": "imagenet-1k/val"})
    assert made.status_code == 201, made.text
    uploaded = client.post(
        "/api/v1/manifests", content=LITE0.read_bytes(), headers={**runner, "Content-Type": "text/yaml"}
    )
    options: dict[str, Any] = {"threads": 1, "batch_size": 8}
    if limit is not None:
        options["limit"] = limit
    r = client.post(
        "/api/v1/jobs",
        json={
            "kind": "evaluate",
            "manifest": uploaded.json()["ref"],
            "runtime": "onnxruntime",
            "dataset": name,
            "options": options,
        },
        headers=runner,
    )
    assert r.status_code == 202, r.text
    assert r.json()["options"]["evaluated_as"] == "imagenet-1k/val"
    job = wait_for(client, r.json()["id"], viewer)
    assert job["status"] == "succeeded", client.get(f"/api/v1/jobs/{job['id']}/log", headers=viewer).text
    [run_id] = job["result_ids"]
    return client.get(f"/api/v1/runs/{run_id}", headers=viewer).json()


def _same_verdict(service: Any, cli: Any, registered: str, folder_name: str) -> None:
    keys = ("metric", "claimed", "claim_dataset", "measured", "ci_low", "ci_high", "verdict")
    assert [{k: c[k] for k in keys} for c in service["claims"]] == [{k: c[k] for k in keys} for c in cli["claims"]]
    [s], [c] = service["claims"], cli["claims"]
    assert s["evaluated_dataset"] == f"{registered} (as imagenet-1k/val)"
    assert c["evaluated_dataset"] == f"{folder_name} (as imagenet-1k/val)"
    assert s["reason"].replace(registered, folder_name) == c["reason"]
    assert (
        service["dataset"]["evaluated_as"] == cli["dataset"]["evaluated_as"] == {"name": "imagenet-1k", "split": "val"}
    )
    assert service["dataset"]["name"] == registered and cli["dataset"]["name"] == folder_name
    assert service["dataset"]["identity"] == cli["dataset"]["identity"]


@pytest.mark.slow  # two evaluations of 20 images (the service's job, the CLI): ~20 s, ~60 s with a cold cache
def test_a_service_run_of_a_declared_dataset_is_judged_as_the_cli_judges_it(
    client: TestClient, headers_for: Callable[[str], dict[str, str]], tmp_path: Path
) -> None:
    folder = _foolbox_folder(tmp_path)
    run = _service_run(client, headers_for, "imagenet-sample-20", str(folder))
    cli = _cli_record(str(folder), tmp_path)
    _same_verdict(run, cli, "imagenet-sample-20", folder.name)
    [claim] = run["claims"]
    # 18 of 20 right: the claimed 75.1 % is inside the Wilson interval [0.699, 0.972], too wide to judge (issue 35)
    assert (claim["verdict"], claim["measured"], round(claim["ci_low"], 3), round(claim["ci_high"], 3)) == (
        "not comparable",
        0.9,
        0.699,
        0.972,
    )
    viewer = headers_for("viewer")
    found = client.get("/api/v1/runs", params={"dataset": "imagenet-sample-20"}, headers=viewer).json()
    assert found["total"] == 1 and found["items"][0]["run_id"] == run["run_id"]
    assert client.get("/api/v1/runs", params={"dataset": folder.name}, headers=viewer).json()["total"] == 0
    [lite0] = [m for m in client.get("/api/v1/models", headers=viewer).json() if m["name"] == "efficientnet-lite0"]
    assert [(x["run_id"], x["verdict"]) for x in lite0["latest"]] == [(run["run_id"], "not comparable")]
    [judged] = lite0["latest"][0]["claims"]
    assert (judged["metric"], judged["claimed"], judged["measured"], judged["direction"]) == (
        "top1",
        0.751,
        0.9,
        "unjudged",
    )
    assert judged["evaluated_dataset"] == "imagenet-sample-20 (as imagenet-1k/val)"


@pytest.mark.slow
@pytest.mark.skipif(not SHARED_IMAGENET.is_dir(), reason=f"{SHARED_IMAGENET} is not here")
def test_the_imagenet_sample_registered_as_imagenet_val_is_judged_as_the_cli_judges_it(
    client: TestClient, headers_for: Callable[[str], dict[str, str]], tmp_path: Path
) -> None:
    """The issue's case: imagenet-sample registered as imagenet-1k/val, an evaluate job, the CLI's ``--as``."""
    limit = 300
    run = _service_run(client, headers_for, "imagenet-sample-1000", str(SHARED_IMAGENET), limit=limit)
    cli = _cli_record(str(SHARED_IMAGENET), tmp_path, limit=limit)
    _same_verdict(run, cli, "imagenet-sample-1000", SHARED_IMAGENET.name)
    # 300 images: too few to confirm a claim (±2 pt needs ~1,800), a selection (issue 35) the reason names
    [claim] = run["claims"]
    assert claim["verdict"] in ("not comparable", "inconsistent") and claim["sampling"] == "selection"
    assert "samples: the first 300 samples in sorted order (--limit 300)" in claim["reason"]
    found = client.get("/api/v1/runs", params={"dataset": "imagenet-sample-1000"}, headers=headers_for("viewer"))
    assert [r["run_id"] for r in found.json()["items"]] == [run["run_id"]]
