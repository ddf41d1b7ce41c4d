"""The web UI's run page of a segmentation run: the masks section (per-class IoU, unit table, overlays)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from repliscope.datasets.resolve import resolve_dataset
from repliscope.evaluation.run import RunSettings, evaluate, prepare
from tests.segmentation._data import write_voc
from tests.service.conftest import WebClient, service_app, service_db_url, tokens  # noqa: F401  (fixtures)

MANIFEST = Path(__file__).parents[1] / "fixtures" / "segmentation" / "colour-segmenter.yaml"


def test_run_page_shows_the_masks(service_app: Any, tokens: dict[str, str], tmp_path: Path) -> None:  # noqa: F811
    prepared = prepare(
        MANIFEST, RunSettings(runtime="onnxruntime", threads=1, batch_size=1, cache_dir=tmp_path / "cache")
    )
    record = evaluate(prepared, resolve_dataset(f"voc_seg:{write_voc(tmp_path / 'voc')}"))
    service_app.state.store.save(record)
    client = WebClient(service_app)
    login = client.post("/login", data={"token": tokens["admin"], "next": "/runs"}, follow_redirects=False)
    assert login.status_code == 303
    page = client.get(f"/runs/{record.run_id}")
    assert page.status_code == 200
    masks = page.text[page.text.index('<section id="masks">') :]
    masks = masks[: masks.index("</section>")]
    text = " ".join(re.sub(r"<[^>]+>", " ", masks).split())
    assert "Per class IoU: background 1.0000 [1.0000, 1.0000]; red 1.0000 [1.0000, 1.0000]" in text
    assert "foreground IoU per image" in text and "error rate in the boundary band" in text
    assert masks.count("data:image/png;base64,") == 3 and "Lowest IoU 1:" in text
    assert "Per-class AP" not in page.text


def test_compare_page_gives_the_paired_delta_miou(
    service_app: Any,  # noqa: F811
    tokens: dict[str, str],  # noqa: F811
    tmp_path: Path,
) -> None:
    prepared = prepare(
        MANIFEST, RunSettings(runtime="onnxruntime", threads=1, batch_size=1, cache_dir=tmp_path / "cache")
    )
    data = resolve_dataset(f"voc_seg:{write_voc(tmp_path / 'voc')}")
    a, b = evaluate(prepared, data), evaluate(prepared, data)
    for r in (a, b):
        service_app.state.store.save(r)
    client = WebClient(service_app)
    client.post("/login", data={"token": tokens["admin"], "next": "/runs"}, follow_redirects=False)
    page = client.get(f"/compare?a={a.run_id}&b={b.run_id}")
    assert page.status_code == 200
    found = re.search(r'<p id="mcnemar">([^<]*)</p>', page.text)
    assert found is not None
    assert found.group(1) == (
        "Paired on the 4 images both evaluated: mIoU 1.0000 -&gt; 1.0000, delta +0.0000 (95 % "
        "paired bootstrap [+0.0000, +0.0000]); pixels with the same label 100.00 %; 0 images "
        "whose masks differ."
    )
