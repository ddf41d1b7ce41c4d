"""Pipeline diff: values in other units (0–255 vs 0–1, [-1, 1], mean/std normalised) are named as a units
difference with the scale found, and what differs once that scale is undone is measured in the manifest's units,
instead of a bare "max |err| 254". The real case: a Model-Garden-style port of the YOLO pre-processing (TensorFlow's
JPEG decode, Darknet's own ``letterbox_image`` from libdarknet) on coco-val-mini images."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

from repliscope.datasets import resolve_dataset
from repliscope.diff.pipeline.candidate import classify
from repliscope.diff.pipeline.driver import PipelineDiffResult, diff_pipeline
from repliscope.diff.pipeline.units import find_units, undo
from repliscope.manifest.loader import load_manifest
from tests.yolo._assets import COCO_MINI, MANIFEST, need_coco, need_darknet, seed_cache


def _image(seed: int, shape: tuple[int, int, int] = (3, 40, 50)) -> np.ndarray:
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0 : shape[1], 0 : shape[2]]
    smooth = np.stack([(x + y) / 90, (x * 0.8) / 50, np.sin(y / 7) * 0.5 + 0.5])[: shape[0]]
    return np.clip(smooth + rng.normal(0, 0.05, shape), 0, 1).astype(np.float32)


def test_the_named_scales_are_recognised_and_undone() -> None:
    ref = _image(0)
    u = find_units(ref, ref * 255, chw=True)
    assert u is not None and u.description.startswith(
        "values in other units: 0–255 where the manifest has 0–1 (yours = 255 x the manifest's)"
    )
    assert u.raw_max_abs_error == pytest.approx(254 * float(ref.max()), rel=1e-6)
    assert u.content_max_abs_error < 1e-4
    # another decoder on top: the scale is still found, the content error is what is left (in 0–1 units)
    noise = np.random.default_rng(1).normal(0, 3, ref.shape)
    v = find_units(ref, ref * 255 + noise, chw=True)
    assert v is not None and "0–255 where the manifest has 0–1" in v.description
    assert v.content_max_abs_error == pytest.approx(float(np.abs(undo(ref * 255 + noise, v, True) - ref).max()))
    assert 0.03 < v.content_max_abs_error < 0.06  # ~ 4 sigma of 3/255
    w = find_units(ref * 255, ref, chw=True)
    assert w is not None and "0–1 where the manifest has 0–255" in w.description
    x = find_units(ref, ref * 2 - 1, chw=True)
    assert x is not None and "[-1, 1] where the manifest has [0, 1]" in x.description
    # HWC arrays: channels last
    hwc = find_units(ref.transpose(1, 2, 0), ref.transpose(1, 2, 0) * 255, chw=False)
    assert hwc is not None and "0–255 where the manifest has 0–1" in hwc.description


def test_mean_std_normalisation_is_named_with_its_constants() -> None:
    ref = _image(2)
    mean, std = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
    u = find_units(ref, (ref - mean[:, None, None]) / std[:, None, None], chw=True)
    assert u is not None and "mean/std normalised" in u.description
    assert "mean [0.485, 0.456, 0.406], std [0.229, 0.224, 0.225]" in u.description
    assert u.content_max_abs_error < 1e-5


@pytest.mark.parametrize(
    "change",
    [
        lambda r: r + 0.2,  # another mean: a content bug, not units
        lambda r: r[::-1].copy(),  # channels swapped
        lambda r: np.roll(r, 3, axis=2),  # shifted
        lambda r: r * 1.03,  # within the margin: not another unit
        lambda r: -r,  # a negative scale is not a unit
    ],
)
def test_what_is_not_a_units_difference(change: Any) -> None:
    ref = _image(3)
    assert find_units(ref, change(ref), chw=True) is None


@pytest.fixture(scope="module")
def coco() -> Any:
    need_coco()
    need_darknet()
    seed_cache()
    return resolve_dataset(f"coco:{COCO_MINI}")


def _tf_decode(path: str) -> np.ndarray:
    from repliscope.ops._common import tensorflow  # TensorFlow with its start-up lines quiet

    tf = tensorflow()
    with open(path, "rb") as f:
        return np.asarray(tf.io.decode_image(f.read(), channels=3, expand_animations=False))


def _darknet_letterbox(hwc01: np.ndarray) -> np.ndarray:
    from repliscope.backends.darknet import reference

    return reference.letterbox_array(np.ascontiguousarray(hwc01.transpose(2, 0, 1)), 416, 416)


def _model_garden_255(path: str) -> np.ndarray:
    """TF's decode, Darknet's letterbox, and the model input left in 0–255."""
    return _darknet_letterbox(_tf_decode(path).astype(np.float32) / 255) * 255


STAGES: list[tuple[str, Any]] = [
    ("decode", _tf_decode),
    ("to_float", lambda im: im.astype(np.float32) / 255),
    ("letterbox", _darknet_letterbox),
]


def _diff(candidate: Any, name: str, coco: Any) -> PipelineDiffResult:
    return diff_pipeline(load_manifest(MANIFEST), classify(f"test:{name}", candidate), coco.samples[:3], coco.name)


def test_model_input_in_0_255_is_named_not_reported_as_254(coco: Any) -> None:
    r = _diff(_model_garden_255, "model_garden_255", coco)
    assert r.verdict == "unexplained" and r.max_abs_error is not None and r.max_abs_error > 200
    assert r.units.startswith("values in other units: 0–255 where the manifest has 0–1 (yours = 255 x the manifest's)")
    assert r.diagnosis.message.startswith("the model input is in other units (values in other units: 0–255")
    hint = r.diagnosis.hints[0]
    assert hint.startswith(r.units) and "after undoing it, max |error| 0.063 in the manifest's units" in hint
    assert not any("sharper" in h or "smoother" in h for h in r.diagnosis.hints)  # read in the manifest's units
    assert "the closest registered variant, `no_normalization`" in r.diagnosis.message
    # what is left is TensorFlow's JPEG decode against OpenCV's (19 grey levels before the letterbox resampling)
    assert r.units_content_max_abs_error == pytest.approx(0.0630, abs=1e-3)  # 16 / 255


def test_a_stage_in_other_units_is_compared_after_undoing_them(coco: Any) -> None:
    r = _diff(STAGES, "STAGES", coco)
    rows = {s.stage: s for s in r.stages}
    assert (r.first_divergent_stage, rows["decode"].compared_with) == ("decode", "preprocess[0] decode")
    assert rows["decode"].max_abs_error == 19.0 and rows["decode"].units == ""  # grey levels: TF vs OpenCV
    tf = rows["to_float"]
    assert tf.compared_with == "preprocess[1] to_float" and tf.within_tolerance is False
    assert tf.units.startswith("values in other units: 0–1 where the manifest has 0–255")
    assert tf.note.endswith("compared after undoing that (errors in the manifest's units), the content differs too")
    assert tf.max_abs_error == pytest.approx(19.0, abs=1e-3)  # in the manifest's 0–255, not "max err 254"
    letterbox = rows["letterbox"]
    assert letterbox.units == "" and letterbox.max_abs_error is not None and letterbox.max_abs_error < 0.1
    assert r.units == ""  # the model input itself is in the manifest's units
    # and the whole port is the manifest with TensorFlow's decoder, exactly
    assert (r.verdict, r.diagnosis.variant, r.diagnosis.residual_max_abs_error) == (
        "explained",
        "decoder_tensorflow",
        0.0,
    )
    assert r.diagnosis.change == "decode.library opencv -> tensorflow"


MEAN, STD = np.array([0.485, 0.456, 0.406], np.float32), np.array([0.229, 0.224, 0.225], np.float32)
NORMALISED: list[tuple[str, Any]] = [
    ("decode", _tf_decode),
    ("to_float", lambda im: (im.astype(np.float32) / 255 - MEAN) / STD),
    ("letterbox", lambda x: _darknet_letterbox((x * STD + MEAN).astype(np.float32))),
]


def test_a_mean_std_normalised_stage_is_named_with_its_constants(coco: Any) -> None:
    r = _diff(NORMALISED, "NORMALISED", coco)
    stage = {s.stage: s for s in r.stages}["to_float"]
    assert stage.compared_with == "preprocess[1] to_float" and "mean/std normalised" in stage.units
    # the manifest's to_float is in 0-255: the constants come back in those units, fitted through TF's decode
    found = re.search(r"mean \[(.*?)\], std \[(.*?)\] in the manifest's units", stage.units)
    assert found is not None
    mean, std = (np.array([float(v) for v in g.split(",")]) for g in found.groups())
    assert np.abs(mean - MEAN * 255).max() < 1.5 and np.abs(std - STD * 255).max() < 0.5
    assert stage.within_tolerance is False and stage.max_abs_error is not None
    assert stage.max_abs_error == pytest.approx(19, abs=0.5)  # the content difference left, in grey levels
