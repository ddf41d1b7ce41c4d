"""Issue 36 item 2: a registered folder dataset's sample images on the run page and the compare page. A run's
thumbnails re-load from the dataset registered under the record's dataset name, and only while that dataset
re-loads with the record's identity: a changed folder, or a name no longer registered, is a 404, never another
image."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from PIL import Image

from repliscope.datasets.resolve import resolve_dataset
from repliscope.evaluation.record import EvaluationRecord
from repliscope.service.web import samples
from repliscope.store.service_tables import register_dataset
from tests.service.test_web_detection import detection_runs  # noqa: F401  (fixture)
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


def test_thumbnails_open_larger_with_labelled_boxes_and_a_score_threshold(
    service_app: Any,
    tokens: dict[str, str],
    detection_runs: list[EvaluationRecord],  # noqa: F811
) -> None:
    """The detection record of the module-scoped ``detection_runs`` fixture (a 16-image synthetic set, ~1 s)."""
    first = detection_runs[0].samples[0]
    scored = [d.model_copy(update={"score": v}) for d, v in zip(first.detections or [], (0.95, 0.4), strict=True)]
    record = detection_runs[0].model_copy(
        update={
            "run_id": "6a" * 16,
            "samples": [first.model_copy(update={"detections": scored}), *detection_runs[0].samples[1:]],
        }
    )
    service_app.state.store.save(record)
    client = logged_in(service_app, tokens["viewer"])
    html = client.get(f"/runs/{record.run_id}").text
    base = f"/runs/{record.run_id}/samples/0/thumbnail.png"
    title = f"Open sample {first.sample_id} larger"
    assert f'<a class="thumb-link" href="{base}?size=large" title="{title}">' in html
    assert '<input type="number" id="min-score" min="0" max="1" step="0.05" value="0.3"' in html
    assert '<script src="/static/samples.js"></script>' in html
    assert "min_score" in client.get("/static/samples.js").text

    def pixels(url: str) -> tuple[tuple[int, int], np.ndarray]:
        got = client.get(url)
        assert got.status_code == 200, got.text
        with Image.open(io.BytesIO(got.content)) as im:
            return im.size, np.asarray(im.convert("RGB")).reshape(-1, 3)

    def count(rgb: np.ndarray, colour: tuple[int, int, int]) -> int:
        return int((rgb == np.asarray(colour)).all(axis=1).sum())

    def labels(rgb: np.ndarray) -> int:  # the labels' white text: the synthetic images hold no near-white
        return int((rgb >= 240).all(axis=1).sum())

    thumb_size, thumb = pixels(base)
    large_size, both = pixels(f"{base}?size=large")
    assert max(thumb_size) <= samples.THUMB_PX and max(large_size) == samples.LARGE_PX
    assert labels(thumb) == 0 and labels(both) > 0  # only the larger view carries class and score
    assert samples.box_label(scored[0]) == f"class {scored[0].class_id} 0.95"
    _, one = pixels(f"{base}?size=large&min_score=0.5")  # the 0.4 detection is left out
    _, none_drawn = pixels(f"{base}?size=large&min_score=0.96")
    assert count(both, samples.PRED_COLOUR) > count(one, samples.PRED_COLOUR) > 0
    assert 0 < labels(one) < labels(both)
    assert count(none_drawn, samples.PRED_COLOUR) == 0 and labels(none_drawn) == 0
    assert count(none_drawn, samples.TRUTH_COLOUR) > 0  # the ground truth is always drawn
    bad = client.get(f"{base}?size=huge")
    assert bad.status_code == 422 and "size" in bad.text and "'thumb' or 'large'" in bad.text
    over = client.get(f"{base}?min_score=2")
    assert over.status_code == 422 and "min_score" in over.text


def test_a_count_of_one_reads_in_the_singular() -> None:
    from repliscope.service.web.metric_format import count_of

    assert [count_of(n, "object") for n in (0, 1, 2)] == ["0 objects", "1 object", "2 objects"]
