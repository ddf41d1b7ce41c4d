"""The semantic_segmentation task end to end: the exact colour segmenter on a VOC-style folder (onnxruntime), the
record's per-image counts and masks, the store round trip, failed samples, paired statistics."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from repliscope.datasets.resolve import resolve_dataset
from repliscope.errors import DatasetError
from repliscope.evaluation.record import EvaluationRecord
from repliscope.evaluation.run import PreparedRun, RunSettings, evaluate, prepare
from repliscope.store import RunStore
from repliscope.tasks import get_task
from repliscope.tasks.segmentation import dense, labels_of_rle
from tests.segmentation._data import RECTS, label_map, write_voc

MANIFEST = Path(__file__).parents[1] / "fixtures" / "segmentation" / "colour-segmenter.yaml"


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> PreparedRun:
    return prepare(
        MANIFEST,
        RunSettings(runtime="onnxruntime", threads=1, batch_size=1, cache_dir=tmp_path_factory.mktemp("cache")),
    )


@pytest.fixture(scope="module")
def voc(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_voc(tmp_path_factory.mktemp("voc") / "colour-squares")


@pytest.fixture(scope="module")
def record(prepared: PreparedRun, voc: Path) -> EvaluationRecord:
    return evaluate(prepared, resolve_dataset(f"voc_seg:{voc}"))


def test_exact_segmenter_scores_one(record: EvaluationRecord) -> None:
    assert record.task == "semantic_segmentation" and record.counts == {
        "total": 4,
        "evaluated": 4,
        "failed": 0,
        "labelled": 4,  # every sample has its mask (before: 0, counting classification labels)
    }
    values = {m.name: (m.value, m.ci_low, m.ci_high, m.n) for m in record.metrics}
    assert values == {"mIoU": (1.0, 1.0, 1.0, 4), "fwIoU": (1.0, 1.0, 1.0, 4), "pixel_accuracy": (1.0, 1.0, 1.0, 4)}
    truth = {c: sum(int(((label_map(s) == c)[1:]).sum()) for s in RECTS) for c in range(3)}  # row 0 is void
    assert record.per_class is not None
    assert [(r["name"], r["iou"], r["gt_pixels"], r["predicted_pixels"]) for r in record.per_class] == [
        ("background", 1.0, truth[0], truth[0]),
        ("red", 1.0, truth[1], truth[1]),
        ("green", 1.0, truth[2], truth[2]),
    ]
    assert record.dataset["categories_evaluated"] == [[1, "red"], [2, "green"]]
    assert record.claims[0].metric == "mIoU" and record.claims[0].measured == 1.0


def test_per_sample_counts_and_masks(record: EvaluationRecord) -> None:
    for s in record.samples:
        seg = s.segmentation
        assert seg is not None and seg.size_hw == (64, 64) and seg.num_classes == 3 and seg.void_pixels == 64
        expected = label_map(s.sample_id.removesuffix(".jpg"))
        m = dense(seg)
        assert m.sum() == 64 * 63 and np.trace(m[:, :3]) == 64 * 63
        assert seg.predicted is not None and seg.truth is not None
        assert np.array_equal(labels_of_rle(seg.predicted, seg.size_hw), expected)
        truth = labels_of_rle(seg.truth, seg.size_hw)
        assert (truth[0] == 255).all() and np.array_equal(truth[1:], expected[1:])


def test_store_round_trip(record: EvaluationRecord, tmp_path: Path) -> None:
    with RunStore(f"sqlite:///{tmp_path / 'r.db'}") as store:
        store.save(record)
        back = store.get(record.run_id)
    assert [s.segmentation for s in back.samples] == [s.segmentation for s in record.samples]
    assert back.result_hash == record.result_hash and back.per_class == record.per_class


def test_paired_against_itself_and_a_shifted_run(record: EvaluationRecord) -> None:
    task = get_task("semantic_segmentation")
    same = task.paired(record.samples, record.samples, None)
    assert same is not None and same["delta_miou"] == 0.0 and same["pixel_agreement"] == 1.0
    assert same["flipped_images"] == 0 and same["n_samples"] == 4


def test_bad_masks_fail_their_samples(prepared: PreparedRun, tmp_path: Path) -> None:
    root = write_voc(tmp_path / "bad")
    Image.fromarray(np.zeros((32, 48), np.uint8), mode="L").save(root / "SegmentationClass" / "a.png")
    odd = label_map("b")
    odd[5, 5] = 7
    odd[6, 6] = 9
    Image.fromarray(odd, mode="L").save(root / "SegmentationClass" / "b.png")
    rec = evaluate(prepared, resolve_dataset(f"voc_seg:{root}"))
    errors = {s.sample_id: s.error for s in rec.samples}
    assert errors["a.jpg"] == "the ground-truth mask is 48x32 (width x height), the image 64x64"
    assert errors["b.jpg"] is not None and errors["b.jpg"].startswith("the ground-truth mask holds class ids [7, 9]")
    assert errors["c.jpg"] is None and rec.counts["failed"] == 2
    assert rec.metric("mIoU") is not None and rec.metric("mIoU").n == 2  # type: ignore[union-attr]


def test_palette_masks_without_a_class_map(tmp_path: Path) -> None:
    root = write_voc(tmp_path / "nomap", class_map=False)
    with pytest.raises(DatasetError, match=r"palette PNGs, e\.g\. a\.png\) need a class map .*class_map\.txt"):
        resolve_dataset(f"voc_seg:{root}")
    assert len(resolve_dataset(f"voc_seg:{root}", class_map="builtin:voc").samples) == 4


def test_detection_datasets_are_refused(prepared: PreparedRun) -> None:
    with pytest.raises(DatasetError, match="has no segmentation masks"):
        evaluate(prepared, resolve_dataset("synthetic_detection"))


def test_identity_covers_the_masks(tmp_path: Path) -> None:
    root = write_voc(tmp_path / "v")
    before = resolve_dataset(f"voc_seg:{root}").identity
    assert resolve_dataset(f"voc_seg:{root}").identity == before
    Image.fromarray(label_map("d"), mode="L").save(root / "SegmentationClass" / "d.png")  # same ids, no void row
    assert resolve_dataset(f"voc_seg:{root}").identity != before
