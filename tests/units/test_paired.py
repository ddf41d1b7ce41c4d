import pytest

from repliscope.datasets import resolve_dataset
from repliscope.evaluation.record import Detection, SamplePrediction
from repliscope.metrics.coco import evaluate_coco
from repliscope.units import detection_paired


def _truth_run(ds, drop_first_of: set[str] = frozenset(), dx: float = 0.0) -> list[SamplePrediction]:
    out = []
    for s in ds.samples:
        objs = list(s.objects or ())[1:] if s.id in drop_first_of else list(s.objects or ())
        out.append(
            SamplePrediction(
                sample_id=s.id,
                label=None,
                detections=[
                    Detection(box=[o.box[0] + dx, o.box[1], o.box[2] + dx, o.box[3]], score=0.9, class_id=o.class_id)
                    for o in objs
                ],
            )
        )
    return out


def test_identical_runs() -> None:
    ds = resolve_dataset("synthetic_detection", seed=0, num_images=8)
    run = _truth_run(ds)
    out = detection_paired(run, run, ds, replicates=50)
    assert out is not None
    assert (out["n_samples"], out["matched_fraction"], out["mean_iou"], out["flipped_images"]) == (8, 1.0, 1.0, 0)
    assert (out["ap_reference"], out["ap_variant"], out["delta_ap"]) == (1.0, 1.0, 0.0)
    assert (out["delta_ap_ci_low"], out["delta_ap_ci_high"]) == (0.0, 0.0)


def test_dropped_boxes_flip_images_and_lower_ap() -> None:
    ds = resolve_dataset("synthetic_detection", seed=0, num_images=8)
    dropped = {ds.samples[0].id, ds.samples[3].id}
    reference, variant = _truth_run(ds), _truth_run(ds, dropped)
    out = detection_paired(reference, variant, ds, replicates=100)
    assert out is not None
    n_ref = sum(len(s.objects or ()) for s in ds.samples)
    assert (out["n_reference_detections"], out["n_variant_detections"]) == (n_ref, n_ref - 2)
    assert out["matched_fraction"] == (n_ref - 2) / n_ref
    assert out["flipped_images"] == 2 and out["flipped_ids"] == [ds.samples[0].id, ds.samples[3].id]
    expected = evaluate_coco(variant, ds, bootstrap=5).stats["AP"]
    assert out["ap_variant"] == pytest.approx(expected, abs=1e-12) and out["delta_ap"] == pytest.approx(expected - 1)
    assert out["delta_ap_ci_low"] <= out["delta_ap"] <= out["delta_ap_ci_high"] <= 0


def test_failed_samples_are_left_out_and_none_without_common_samples() -> None:
    ds = resolve_dataset("synthetic_detection", seed=0, num_images=2)
    run = _truth_run(ds)
    failed = [SamplePrediction(sample_id=s.id, label=None, error="decode") for s in ds.samples]
    assert detection_paired(run, failed, ds) is None
    half = [run[0], failed[1]]
    out = detection_paired(run, half, None)
    assert out is not None and out["n_samples"] == 1 and "delta_ap" not in out
