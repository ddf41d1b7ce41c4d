"""The run page's samples (issue 21 item 7): every misclassified sample reachable page by page (no "86 more not
shown"), the samples' downloads linked, lazily loaded thumbnails, and detection thumbnails with the ground-truth
(green) and predicted (red) boxes drawn."""

from __future__ import annotations

import io
import re
from html import unescape
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from repliscope.evaluation.record import EvaluationRecord
from repliscope.service.web import samples
from tests.service.test_web_detection import detection_runs  # noqa: F401  (fixture)
from tests.service.test_web_pages import assert_accessible, logged_in, parse
from tests.store.records import IDS, TOP1_A, make_record

BIG = "9a" * 16


def _big_record() -> EvaluationRecord:
    """140 samples: 7 copies of run A's 20 (each copy: 1 failed, 2 misclassified) -> 7 failed + 14 wrong...
    plus every sample of copies 4..6 predicted wrong: 7 failed and 14 + 3 * 17 = 65 misclassified."""
    base = make_record(BIG, TOP1_A)
    out = []
    for copy in range(7):
        for s in base.samples:
            wrong = copy >= 4 and s.error is None and s.label is not None and s.top1 == s.label
            indices = [(s.top1 or 0) + 1, *s.topk_indices[1:]] if wrong else s.topk_indices
            out.append(s.model_copy(update={"sample_id": f"c{copy}/{s.sample_id}", "topk_indices": indices}))
    return base.model_copy(update={"samples": out, "dataset": {**base.dataset, "num_samples": len(out)}})


@pytest.fixture
def big(service_app: Any, tokens: dict[str, str]) -> TestClient:
    service_app.state.store.save(_big_record())
    service_app.state.store.save(make_record("8b" * 16, TOP1_A))
    return logged_in(service_app, tokens["viewer"])


def test_every_misclassified_sample_is_reachable_page_by_page(big: TestClient) -> None:
    first = big.get(f"/runs/{BIG}")
    assert first.status_code == 200
    assert "more not shown" not in first.text
    note = parse(first.text)
    rows = note.tables["samples-table"].rows
    assert len(rows) == 50
    assert [r[1] for r in rows[:7]] == [f"c{c}/{IDS[19]}" for c in range(7)]  # failed samples first
    assert rows[0][5] == "SampleError: image file is truncated"
    assert "72 samples failed or misclassified; page 1 of 2, 50 a page." in unescape(first.text)
    nxt = unescape(re.search(r'<a rel="next" href="([^"]+)">Next samples</a>', first.text).group(1))  # type: ignore[union-attr]
    assert nxt == "?show=wrong&samples_page=2#samples"
    second = parse(big.get(f"/runs/{BIG}?show=wrong&samples_page=2").text).tables["samples-table"].rows
    assert len(second) == 22 and second[-1][1] == f"c6/{IDS[18]}"
    seen = {r[1] for r in rows} | {r[1] for r in second}
    assert len(seen) == 72  # every one of them, once
    every = big.get(f"/runs/{BIG}?show=all&samples_page=3").text
    assert "140 samples in the record&#39;s order; page 3 of 3" in every
    assert len(parse(every).tables["samples-table"].rows) == 40
    assert_accessible(first.text)
    assert big.get(f"/runs/{BIG}?show=boxes").status_code == 422
    assert big.get(f"/runs/{BIG}?samples_page=0").status_code == 422
    past = big.get(f"/runs/{BIG}?samples_page=9")
    assert past.status_code == 200 and "samples-table" not in past.text


def test_the_samples_link_their_downloads_and_lazy_thumbnails(big: TestClient) -> None:
    run = "8b" * 16
    html = big.get(f"/runs/{run}").text
    assert f'href="/api/v1/runs/{run}/samples/export?format=csv"' in html
    thumbs = [i for i in parse(html).images if i.get("class") == "thumb"]
    assert [t["src"] for t in thumbs] == [f"/runs/{run}/samples/{k}/thumbnail.png" for k in (19, 6, 7)]
    assert all(t.get("loading") == "lazy" for t in thumbs)
    png = big.get(thumbs[1]["src"])  # the foolbox image re-loads with the record's identity
    assert png.status_code == 200 and png.headers["content-type"] == "image/png"
    from PIL import Image

    with Image.open(io.BytesIO(png.content)) as im:
        assert max(im.size) == samples.THUMB_PX
    assert big.get(f"/runs/{run}/samples/20/thumbnail.png").status_code == 404
    assert big.get("/runs/ffffffffff/samples/0/thumbnail.png").status_code == 404
    # the big run's ids are not the dataset's: no thumbnail column, and the page says why
    assert "samples-table" in big.get(f"/runs/{BIG}").text and 'class="thumb"' not in big.get(f"/runs/{BIG}").text


def test_detection_thumbnails_draw_the_truth_and_predicted_boxes(
    service_app: Any,
    tokens: dict[str, str],
    detection_runs: list[EvaluationRecord],  # noqa: F811
) -> None:
    record = detection_runs[0]
    service_app.state.store.save(record)
    client = logged_in(service_app, tokens["viewer"])
    html = client.get(f"/runs/{record.run_id}").text
    assert "<h2>Images</h2>" in html
    thumbs = re.findall(
        r'<img class="thumb" loading="lazy" src="(/runs/[0-9a-f]+/samples/(\d+)/thumbnail.png)" alt="[^"]*" '
        r'data-truth-boxes="(\d+)" data-predicted-boxes="(\d+)">',
        html,
    )
    assert len(thumbs) == len(record.samples) == 16
    assert record.ground_truth is not None
    from PIL import Image

    for src, position, truth, predicted in thumbs:
        k = int(position)
        gt = record.ground_truth.samples[k]
        assert int(truth) == len(gt.boxes) - sum(gt.iscrowd or []) and int(truth) > 0
        assert int(predicted) == sum(1 for d in record.samples[k].detections or [] if d.score >= 0.3)
        png = client.get(src)
        assert png.status_code == 200
        with Image.open(io.BytesIO(png.content)) as im:
            pixels = np.asarray(im.convert("RGB")).reshape(-1, 3)
        colours = {tuple(c) for c in np.unique(pixels, axis=0)}
        assert samples.TRUTH_COLOUR in colours
        assert (samples.PRED_COLOUR in colours) == (int(predicted) > 0)
    rows = parse(html).tables["samples-table"].rows
    objects = int(thumbs[0][2])
    assert rows[0][3] == f"{objects} object{'' if objects == 1 else 's'}" and rows[0][2] == record.samples[0].sample_id
