"""Mask unit evaluation (IoU per image, boundary band vs interior, a k-px displacement diagnosed) and the HTML
report's segmentation section with overlays."""

from __future__ import annotations

import base64
import io
import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from repliscope.datasets.resolve import resolve_dataset
from repliscope.evaluation.record import SamplePrediction, SegmentationSample
from repliscope.evaluation.run import RunSettings, evaluate, prepare
from repliscope.report.build import build_run_view
from repliscope.report.html import render_view_html
from repliscope.tasks.segmentation import confusion_of, rle_of
from repliscope.units.segmentation import best_shift, boundary_band, image_units, mask_units
from tests.segmentation._data import write_voc

FIXTURES = Path(__file__).parents[1] / "fixtures" / "segmentation"


def _square(h: int, w: int, y: int, x: int, size: int) -> np.ndarray:
    out = np.zeros((h, w), np.int32)
    out[y : y + size, x : x + size] = 1
    return out


def test_image_units_by_hand() -> None:
    truth = _square(40, 50, 10, 10, 20)
    truth[0, :] = 255
    pred = _square(40, 50, 12, 13, 20)  # 2 px down, 3 px right
    u = image_units("x", pred, truth, background=0, band=3, max_shift=4)
    assert u.displacement == (2, 3)
    assert u.iou == pytest.approx((18 * 17) / (2 * 400 - 18 * 17))
    assert u.interior_error == 0.0 and u.band_error is not None and u.band_error > 0.2
    band = boundary_band(truth, 1)
    assert band[10, 15] and band[9, 15] and not band[20, 20]
    assert best_shift(truth, truth, 2) == ((0, 0), 0.0)


def _sample(i: int, pred: np.ndarray, truth: np.ndarray) -> SamplePrediction:
    counts = confusion_of(np.where(truth == 255, -1, truth), pred, 2)
    seg = SegmentationSample(
        size_hw=truth.shape,
        num_classes=2,
        confusion=[[int(t), int(p), int(counts[t, p])] for t, p in np.argwhere(counts > 0)],
        predicted=rle_of(pred, range(2)),
        truth=rle_of(truth, range(2)),
    )
    return SamplePrediction(sample_id=f"s{i}", label=None, segmentation=seg)


def test_a_systematic_shift_is_diagnosed() -> None:
    rng = np.random.default_rng(0)
    samples = []
    for i in range(12):
        y, x, size = (int(v) for v in rng.integers(5, 20, 3))
        samples.append(_sample(i, _square(48, 48, y + 1, x - 2, size), _square(48, 48, y, x, size)))
    units = mask_units(samples)
    dy, dx = units.stats[3], units.stats[4]
    assert (dy.median, dy.ci_low, dy.ci_high) == (1.0, 1.0, 1.0) and (dx.median, dx.ci_low, dx.ci_high) == (
        -2.0,
        -2.0,
        -2.0,
    )
    assert units.diagnosis == [
        "masks displaced by dy +1 px, dx -2 px (median over 12 images; intervals dy [+1.0, +1.0], dx [-2.0, -2.0])"
    ]
    same = mask_units(samples, samples)  # against itself: nothing displaced
    assert same.diagnosis == [] and all(u.iou == 1.0 for u in same.images)


def test_report_has_overlays(tmp_path: Path) -> None:
    prepared = prepare(
        FIXTURES / "colour-segmenter.yaml",
        RunSettings(runtime="onnxruntime", threads=1, batch_size=1, cache_dir=tmp_path / "c"),
    )
    record = evaluate(prepared, resolve_dataset(f"voc_seg:{write_voc(tmp_path / 'voc')}"))
    html = render_view_html(build_run_view(record))
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))
    assert "Per class IoU: background 1.0000 [1.0000, 1.0000]; red 1.0000" in text
    assert "Lowest IoU 1: " in text and "Overlays: 3 of 3 on the real image." in text
    assert "0 of 4 samples failed." in text
    pngs = [
        Image.open(io.BytesIO(base64.b64decode(b)))
        for b in re.findall(r"data:image/png;base64,([A-Za-z0-9+/=]+)", html)
    ]
    assert sum(1 for p in pngs if p.size == (3 * 64 + 8, 64)) == 3  # three panels of 64 px
