"""The compare page of segmentation runs (issue 24 item 5): mask overlays (prediction, ground truth, disagreement)
of the same images side by side, one per run, the images where the runs' foreground IoU differs most first."""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from repliscope.datasets.resolve import resolve_dataset
from repliscope.evaluation.record import EvaluationRecord
from repliscope.evaluation.run import RunSettings, evaluate, prepare
from repliscope.report.figures import decode_png_b64
from repliscope.tasks.segmentation import VOID, confusion_of, labels_of_rle, rle_of
from tests.segmentation._data import write_voc
from tests.service.test_web_pages import assert_accessible, logged_in, parse

MANIFEST = Path(__file__).parents[1] / "fixtures" / "segmentation" / "colour-segmenter.yaml"


def _erased(record: EvaluationRecord, run_id: str, stem: str, rows: slice) -> EvaluationRecord:
    """``record`` as run ``run_id`` whose prediction of image ``stem`` lost the rows ``rows`` (set to background),
    its confusion counts with it; the result hash is the run id's (another prediction)."""
    samples = []
    for s in record.samples:
        seg = s.segmentation
        if s.sample_id.startswith(stem) and seg is not None and seg.predicted is not None:
            labels = labels_of_rle(seg.predicted, seg.size_hw)
            labels[rows] = 0
            truth = labels_of_rle(seg.truth or {}, seg.size_hw)
            counts = confusion_of(np.where(truth == VOID, -1, truth), labels, seg.num_classes)
            confusion = [[int(t), int(p), int(counts[t, p])] for t, p in np.argwhere(counts > 0)]
            seg = seg.model_copy(update={"predicted": rle_of(labels, range(seg.num_classes)), "confusion": confusion})
            s = s.model_copy(update={"segmentation": seg})
        samples.append(s)
    return record.model_copy(update={"run_id": run_id, "samples": samples, "result_hash": run_id * 2})


def test_compare_shows_the_masks_of_each_run_side_by_side(
    service_app: Any, tokens: dict[str, str], tmp_path: Path
) -> None:
    settings = RunSettings(runtime="onnxruntime", threads=1, batch_size=1, cache_dir=tmp_path / "cache")
    data = resolve_dataset(f"voc_seg:{write_voc(tmp_path / 'voc')}")
    a = evaluate(prepare(MANIFEST, settings), data)
    b = _erased(a, "5b" * 16, "b", slice(10, 30))  # half of image b's red square missed
    c = _erased(a, "6c" * 16, "c", slice(40, 64))  # image c's red box missed
    for r in (a, b, c):
        service_app.state.store.save(r)
    client = logged_in(service_app, tokens["viewer"])
    page = client.get(f"/compare?run={a.run_id}&run={b.run_id}&run={c.run_id}")
    assert page.status_code == 200
    section = page.text[page.text.index('<section id="compare-masks">') :]
    section = section[: section.index("</section>")]
    # the images whose foreground IoU differs most across the runs: c (IoU 0.44), then b (0.5), then a
    stems = [s.split(".")[0] for s in re.findall(r"<h3>([^<]+)</h3>", section)]
    assert stems == ["c", "b", "a"]
    captions = re.findall(r"<figcaption>([^<]+)</figcaption>", section)
    iou_b = 1 - 20 * 40 / (40 * 40)  # rows 10..29 of the 40 x 40 square gone
    # rows 40..63 gone: the 18 x 22 red box and the green column's lower 24 rows (row 0 is void, never scored)
    iou_c = (39 * 16) / (63 * 16 + 18 * 22)
    assert captions[:3] == ["A: foreground IoU 1.0000", "B: foreground IoU 1.0000", f"C: foreground IoU {iou_c:.4f}"]
    assert captions[3:6] == ["A: foreground IoU 1.0000", f"B: foreground IoU {iou_b:.4f}", "C: foreground IoU 1.0000"]
    images = [i for i in parse(section).images if i.get("class") == "overlay"]
    assert len(images) == 9
    with Image.open(io.BytesIO(decode_png_b64(images[2]["src"]))) as sheet:
        assert sheet.size == (64 * 3 + 8, 64)  # prediction | ground truth | disagreement
        disagreement = np.asarray(sheet.convert("RGB"))[:, 2 * 68 :]
    assert (disagreement[40:58, 40:62] != disagreement[20, 30]).all(axis=-1).mean() > 0.99  # the missed box marked
    assert "3 of 3 drawn on the real image" in section
    assert_accessible(page.text)
    plain = client.get(f"/compare?run={a.run_id}&run={b.run_id}")
    assert plain.text.count('class="overlay"') == 6 and 'id="mcnemar"' in plain.text
    twin = a.model_copy(update={"run_id": "7d" * 16})
    service_app.state.store.save(twin)
    equal = client.get(f"/compare?a={a.run_id}&b={twin.run_id}").text
    assert "<li>The result hashes are equal: both runs predicted the same masks on every image.</li>" in equal
