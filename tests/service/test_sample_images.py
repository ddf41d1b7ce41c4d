"""Issue 36 item 2: a registered folder dataset's sample images on the run page and the compare page. A run's
thumbnails re-load from the dataset registered under the record's dataset name, and only while that dataset
re-loads with the record's identity: a changed folder, or a name no longer registered, is a 404, never another
image."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from PIL import Image

from repliscope.datasets.resolve import resolve_dataset
from repliscope.evaluation.record import EvaluationRecord
from repliscope.store.service_tables import register_dataset
from tests.service.test_web_pages import logged_in, parse
from tests.store.records import TOP1_A, TOP1_B, make_record

RUN = "5c" * 16
OTHER = "5d" * 16
CHANGED = "5e" * 16


def _folder(root: Path) -> Path:
    """20 tiny PNGs in two class subfolders, each a distinct solid colour (sample i: red = 10 * i)."""
    for i in range(20):
        sub = root / ("ants" if i < 10 else "bees")
        sub.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (24, 16), (10 * i, 50, 200)).save(sub / f"{i:02d}.png")
    return root


def _on(record: EvaluationRecord, data: Any, name: str = "bugs") -> EvaluationRecord:
    """``record`` re-labelled as a run on ``data`` registered as ``name``: the folder's ids and identity."""
    ids = [s.id for s in data.samples]
    samples = [s.model_copy(update={"sample_id": i}) for s, i in zip(record.samples, ids, strict=True)]
    dataset = {**record.dataset, "name": name, "identity": data.identity, "origin": data.origin}
    dataset |= {"label_rule": data.label_rule, "num_samples": len(ids)}
    return record.model_copy(update={"samples": samples, "dataset": dataset})


@pytest.fixture
def bugs(service_app: Any, tokens: dict[str, str], tmp_path: Path) -> tuple[TestClient, Path]:
    folder = _folder(tmp_path / "bugs")
    store = service_app.state.store
    register_dataset(store, "bugs", str(folder), created_by="test")
    data = resolve_dataset(str(folder))
    store.save(_on(make_record(RUN, TOP1_A), data))
    store.save(_on(make_record(OTHER, TOP1_B), data))
    return logged_in(service_app, tokens["viewer"]), folder


def _colour(png: bytes) -> tuple[int, ...]:
    with Image.open(io.BytesIO(png)) as im:
        pixel = im.convert("RGB").getpixel((im.width // 2, im.height // 2))
    assert isinstance(pixel, tuple)
    return pixel


def test_a_registered_folder_datasets_thumbnails_show_on_the_run_page(bugs: tuple[TestClient, Path]) -> None:
    client, _ = bugs
    html = client.get(f"/runs/{RUN}").text
    thumbs = [i for i in parse(html).images if i.get("class") == "thumb"]
    assert [t["src"] for t in thumbs] == [f"/runs/{RUN}/samples/{k}/thumbnail.png" for k in (19, 6, 7)]
    png = client.get(thumbs[1]["src"])
    assert png.status_code == 200 and png.headers["content-type"] == "image/png"
    assert _colour(png.content)[:3] == (60, 50, 200)  # sample 6's own pixels, from the registered folder


def test_a_changed_folder_or_an_unregistered_name_shows_no_image(
    service_app: Any, bugs: tuple[TestClient, Path]
) -> None:
    client, folder = bugs
    store = service_app.state.store
    data = resolve_dataset(str(folder))
    assert data.identity  # hashed now, before the change
    Image.new("RGB", (24, 16), (0, 0, 0)).save(folder / "ants" / "06.png")  # the folder changed since the run
    store.save(_on(make_record(CHANGED, TOP1_A), data))
    assert client.get(f"/runs/{CHANGED}/samples/6/thumbnail.png").status_code == 404
    assert 'class="thumb"' not in client.get(f"/runs/{CHANGED}").text
    gone = "5f" * 16
    store.save(_on(make_record(gone, TOP1_A), data, name="moths"))  # no dataset registered as "moths"
    missing = client.get(f"/runs/{gone}/samples/6/thumbnail.png")
    assert missing.status_code == 404 and missing.text == "no thumbnail for this sample"


def test_the_compare_pages_flips_show_the_registered_datasets_images(bugs: tuple[TestClient, Path]) -> None:
    client, _ = bugs
    html = client.get(f"/compare?a={RUN}&b={OTHER}").text
    assert "Thumbnails from the run&#39;s dataset (re-loaded with the same identity)." in html
    thumbs = [i for i in parse(html).images if i.get("class") == "thumb"]
    assert [t["alt"] for t in thumbs] == ["sample ants/07.png"]  # the one top-1 flip: sample 7
    assert all(t["src"].startswith("data:image/png;base64,") for t in thumbs)
