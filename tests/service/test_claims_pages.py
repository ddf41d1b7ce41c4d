"""The models pages show, next to a run's verdict badge, the measured value, its 95 % interval, the claimed value
and the direction ("beats its claim" is blue with ▲, "falls short" red with ▼: never the same badge); the datasets
page lists registered datasets with their declaration and who made it (server folders only for admins), and an
admin registers and declares datasets through its forms."""

from __future__ import annotations

import re
import shutil
from html import unescape
from pathlib import Path
from typing import Any

from repliscope.evaluation.record import ClaimVerdict, EvaluationRecord
from repliscope.service.web.claim_cells import claim_cell, direction_of
from tests.service.test_web_pages import assert_accessible, logged_in
from tests.store.records import TOP1_A, make_record

BEATS_RUN = "b1" * 16
SHORT_RUN = "c2" * 16


def judged(run_id: str, claimed: float, runtime: str) -> EvaluationRecord:
    """A stored-record double whose top1 claim (``claimed``, a fraction) was judged on data declared as
    imagenet-1k/val: inconsistent whichever side of the interval it lies."""
    record = make_record(run_id, TOP1_A, runtime=runtime)
    top1 = record.metrics[0]
    claim = ClaimVerdict(
        metric="top1",
        claimed=claimed,
        measured=top1.value,
        ci_low=top1.ci_low,
        ci_high=top1.ci_high,
        claim_dataset="imagenet-1k/val",
        evaluated_dataset="imagenet-sample-1000 (as imagenet-1k/val)",
        verdict="inconsistent",
        reason="outside the interval",
        source="README.md",
    )
    return record.model_copy(update={"claims": [claim]})


def text_of(html: str) -> str:
    return re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", html)))


def test_direction_of_a_claim() -> None:
    base = {"ci_low": 0.70, "ci_high": 0.97, "verdict": "inconsistent"}
    assert direction_of({**base, "claimed": 0.50}) == "beats"
    assert direction_of({**base, "claimed": 0.99}) == "short"
    narrow = {"ci_low": 0.74, "ci_high": 0.77, "verdict": "consistent"}
    assert direction_of({**narrow, "claimed": 0.751}) == "within"
    assert direction_of({**base, "claimed": 0.50, "verdict": "not comparable"}) == "unjudged"
    assert direction_of({"claimed": 0.5, "ci_low": None, "ci_high": None, "verdict": "not comparable"}) == "unjudged"
    cell = claim_cell({**narrow, "claimed": 0.751, "measured": 0.755, "metric": "top1"})
    assert cell.summary == "top1 75.50 % [74.00, 77.00] % vs claimed 75.10 %: within its interval"
    # a record judged before the width rule (issue 35): "consistent" inside ±13.5 pt is shown as not judged
    old = claim_cell({**base, "claimed": 0.751, "measured": 0.9, "metric": "top1", "verdict": "consistent"})
    assert (old.verdict, old.direction, old.text) == ("not comparable", "unjudged", "not judged")
    ap = claim_cell(
        {
            "metric": "AP",
            "claimed": 0.222,
            "measured": 0.181,
            "ci_low": 0.15,
            "ci_high": 0.21,
            "verdict": "inconsistent",
        }
    )
    assert (ap.measured, ap.interval, ap.claimed, ap.text) == (
        "0.1810",
        "[0.1500, 0.2100]",
        "0.2220",
        "falls short of its claim",
    )


def test_models_pages_show_value_interval_and_direction(service_app: Any, tokens: dict[str, str]) -> None:
    store = service_app.state.store
    beats, short = judged(BEATS_RUN, 0.10, "onnxruntime"), judged(SHORT_RUN, 0.99, "torch")
    store.save(beats)
    store.save(short)
    top1 = beats.metrics[0]
    figures = f"top1 {top1.value * 100:.2f} % (95 % interval [{top1.ci_low * 100:.2f}, {top1.ci_high * 100:.2f}] %)"
    web = logged_in(service_app, tokens["viewer"])
    for url in ("/", "/models/efficientnet-lite0"):
        page = web.get(url)
        assert page.status_code == 200, page.text
        assert_accessible(page.text)
        html = page.text
        assert 'class="badge direction-beats" data-direction="beats">▲ beats its claim</span>' in html
        assert 'class="badge direction-short" data-direction="short">▼ falls short of its claim</span>' in html
        # the run's own verdict badge: both inconsistent, but blue ▲ when it beats, red ▼ when it falls short
        assert (
            '<span class="badge inconsistent direction-beats" data-verdict="inconsistent">inconsistent ▲</span>' in html
        )
        assert (
            '<span class="badge inconsistent direction-short" data-verdict="inconsistent">inconsistent ▼</span>' in html
        )
        text = text_of(html)
        assert f"▲ beats its claim {figures} · claimed 10.00 %" in text
        assert f"▼ falls short of its claim {figures} · claimed 99.00 %" in text
        assert "imagenet-sample-1000 (as imagenet-1k/val)" in text
        # the two directions are styled apart: blue for beats, the "bad" red for falls short
        assert (
            ".badge.direction-beats { color: #0b4f8a;" in html and ".badge.direction-short { color: var(--bad);" in html
        )
    assert "top1 99.00 % on imagenet-1k/val" in text_of(web.get("/").text)  # the claims column, in percent
    # the API says the same: each latest run's claims with value, interval and direction
    from fastapi.testclient import TestClient

    with TestClient(service_app) as api:
        model = api.get("/api/v1/models/efficientnet-lite0", headers={"Authorization": f"Bearer {tokens['viewer']}"})
    latest = {x["run_id"]: x["claims"] for x in model.json()["latest"]}
    assert [(c["direction"], c["claimed"], c["ci_low"]) for c in latest[BEATS_RUN]] == [("beats", 0.10, top1.ci_low)]
    assert [(c["direction"], c["claimed"], c["ci_high"]) for c in latest[SHORT_RUN]] == [("short", 0.99, top1.ci_high)]
    # a run's own page: the claims table's verdict cell says the direction too
    for run_id, side, words in (
        (BEATS_RUN, "beats", "▲ beats its claim"),
        (SHORT_RUN, "short", "▼ falls short of its claim"),
    ):
        page = web.get(f"/runs/{run_id}")
        assert page.status_code == 200, page.text
        assert f'<span class="badge direction-{side}" data-direction="{side}">{words}</span>' in page.text


def post_form(client: Any, url: str, data: dict[str, str], **kwargs: Any) -> Any:
    """Post ``data`` as the page's own form does (with the page's csrf_token)."""
    return client.post(url, data={**data, "csrf_token": client.page_csrf(url)}, **kwargs)


def _folder(tmp_path: Path) -> Path:
    from repliscope.datasets.foolbox_data import load_foolbox_imagenet

    folder = tmp_path / "foolbox-copy"
    folder.mkdir()
    for sample in load_foolbox_imagenet(limit=4).samples:
        shutil.copyfile(sample.location, folder / sample.id)
    return folder


def test_datasets_page_lists_declarations_and_admins_declare(
    service_app: Any, tokens: dict[str, str], tmp_path: Path
) -> None:
    folder = _folder(tmp_path)
    admin = logged_in(service_app, tokens["admin"])
    page = admin.get("/datasets")
    assert page.status_code == 200 and 'id="register-form"' in page.text and 'id="declare-form"' in page.text
    assert_accessible(page.text)
    made = post_form(
        admin,
        "/datasets",
        data={"name": "sample-4", "spec": str(folder), "as": "imagenet-1k/val", "description": "four images"},
        follow_redirects=False,
    )
    assert made.status_code == 303 and made.headers["location"] == "/datasets"
    bad = post_form(admin, "/datasets", data={"name": "other", "spec": str(folder), "as": "imagenet"})
    assert bad.status_code == 422 and "as: as 'imagenet' must be NAME/SPLIT" in unescape(bad.text)
    again = post_form(admin, "/datasets", data={"name": "sample-4", "spec": str(folder)})
    assert again.status_code == 409 and "already registered" in again.text
    withdrawn = post_form(admin, "/datasets/declaration", data={"dataset": "foolbox_imagenet", "as": ""})
    assert withdrawn.status_code == 200  # redirected to the page
    admin_text = text_of(admin.get("/datasets").text)
    assert "sample-4 four images imagenet-1k/val declared by admin on" in admin_text
    assert f"labels {folder}" in admin_text  # an admin sees the folder
    foolbox = re.search(r'<tr data-dataset="foolbox_imagenet">(.*?)</tr>', admin.get("/datasets").text, re.S)
    assert foolbox is not None and '<span class="undeclared">undeclared</span>' in foolbox.group(1)
    assert "declaration withdrawn by admin on " in foolbox.group(1)

    from repliscope.store.service_tables import register_dataset
    from tests.service.test_wizard_fit import face_dataset

    xml = face_dataset(tmp_path)
    register_dataset(service_app.state.store, "faces", f"dlib_xml:{xml}", created_by="admin")
    viewer = logged_in(service_app, tokens["viewer"])
    html = viewer.get("/datasets").text
    assert_accessible(html)
    assert 'id="register-form"' not in html
    assert str(tmp_path) not in html  # no server path for a viewer, a NAME:PATH spec's path neither
    assert "<code>dlib_xml:…/faces/faces.xml</code>" in html and f"dlib_xml:{xml}" in admin.get("/datasets").text
    row = re.search(r'<tr data-dataset="sample-4">(.*?)</tr>', html, re.S)
    assert row is not None and '<span class="declared">imagenet-1k/val</span>' in row.group(1)
    assert '<a href="/runs?dataset=sample-4">0</a>' in row.group(1)
    refused = post_form(viewer, "/datasets/declaration", data={"dataset": "sample-4", "as": "x/y"})
    assert refused.status_code == 403 and "needs the role 'admin'" in unescape(refused.text)
    runner = logged_in(service_app, tokens["runner"])
    assert post_form(runner, "/datasets", data={"name": "n", "spec": str(folder)}).status_code == 403
    from repliscope.store.service_tables import get_dataset

    assert get_dataset(service_app.state.store, "sample-4").declared_as == "imagenet-1k/val"
