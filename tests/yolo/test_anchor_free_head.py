"""The anchor-free YOLOv8 head (``[N, 4 + C, A]``, no objectness) against a real export: the YOLOv8n ONNX inside the
``nudenet==3.4.2`` wheel (installed --no-deps by make install; tests only: its 18 classes are not for an example),
decoded by repliscope's ops and by nudenet's own ``_postprocess`` on the same network output."""

from __future__ import annotations

import importlib.metadata as md
from pathlib import Path

import numpy as np
import pytest

from repliscope.ops.base import Geometry, Predictions
from repliscope.ops.darknet.anchor_free import AnchorFreeDecodeParams, YoloAnchorFreeDecode
from repliscope.ops.detection.boxes import BoxFormatOp, BoxFormatParams, ToSource, ToSourceParams
from repliscope.ops.detection.nms import Nms, NmsParams
from tests.yolo._assets import COCO_MINI, DARKNET_DATA


def _model() -> Path:
    try:
        files = md.files("nudenet") or []
    except md.PackageNotFoundError:
        pytest.skip("nudenet 3.4.2 is not installed (make install: pip install --no-deps nudenet==3.4.2)")
    onnx = next(f for f in files if str(f).endswith("320n.onnx"))
    return Path(str(onnx.locate()))


def _images() -> list[Path]:
    """60 coco-val-mini images (the FACE_* / *_COVERED detections the test counts are on them), with darknet's two
    sample images where Debian's darknet is installed."""
    if not COCO_MINI.is_dir():
        pytest.skip(f"{COCO_MINI} is absent (../shared/data)")
    images = [p for p in (DARKNET_DATA / n for n in ("person.jpg", "horses.jpg")) if p.is_file()]
    return images + sorted((COCO_MINI / "images").glob("*.jpg"))[:60]


@pytest.mark.slow
def test_decode_matches_nudenets_postprocess() -> None:
    import onnxruntime as ort

    nudenet = pytest.importorskip("nudenet.nudenet")
    session = ort.InferenceSession(str(_model()), providers=["CPUExecutionProvider"])
    ops = [
        YoloAnchorFreeDecode(
            AnchorFreeDecodeParams(output="output0", classes=18, threshold=0.25, keep="gt", class_selection="max")
        ),
        BoxFormatOp(
            BoxFormatParams.model_validate(
                {  # type: ignore[attr-defined]
                    "from": {"kind": "cxcywh", "normalized": False, "one_based": False, "space": "input"},
                    "to": {"kind": "xyxy", "normalized": False, "one_based": False, "space": "input"},
                    "image_size": None,
                }
            )
        ),
        ToSource(ToSourceParams(undo="geometry", clip=True)),
        Nms(
            NmsParams(
                method="hard",
                iou_threshold=0.45,
                class_aware=False,
                max_output=None,
                soft_function=None,
                sigma=None,
                min_score=None,
            )
        ),
    ]
    compared = 0
    for path in _images():
        blob, x_ratio, y_ratio, x_pad, y_pad, w, h = nudenet._read_image(str(path), 320)
        out = session.run(None, {"images": blob})
        theirs = nudenet._postprocess(out, x_pad, y_pad, x_ratio, y_ratio, w, h, 320, 320)
        side = max(w, h)
        preds = Predictions(
            scores=np.zeros((1, 1), np.float32),
            outputs={"output0": out[0]},
            geometry=[Geometry((h, w), (320 / side, 320 / side))],
        )
        for op in ops:
            preds = op(preds)
        d = preds.detections[0]
        labels = nudenet.__dict__["__labels"]
        mine = sorted(
            zip([labels[c] for c in d.classes], d.scores.tolist(), d.boxes.tolist(), strict=True), key=lambda t: -t[1]
        )
        theirs = sorted(theirs, key=lambda t: -t["score"])
        assert [m[0] for m in mine] == [t["class"] for t in theirs], path.name
        assert np.allclose([m[1] for m in mine], [t["score"] for t in theirs], atol=1e-7, rtol=0)
        for (_, _, (x1, y1, x2, y2)), t in zip(mine, theirs, strict=True):
            if x1 > 0 and y1 > 0:  # nudenet shifts a box crossing the left/top edge instead of clipping it
                tx, ty, tw, th = t["box"]  # int() of x, y, w, h
                assert (tx, ty) == (int(x1), int(y1)) and abs(tw - (x2 - x1)) < 1.0001 and abs(th - (y2 - y1)) < 1.0001
        compared += len(theirs)
    assert compared >= 5, compared  # FACE_* and *_COVERED detections on the 62 images


def test_hand_case_max_and_all() -> None:
    # 3 predictions, 2 classes: rows cx, cy, w, h, score0, score1 (the layout of [N, 4 + C, A])
    out = np.array([[[10, 20, 30], [10, 20, 30], [4, 4, 8], [2, 6, 8], [0.9, 0.3, 0.5], [0.1, 0.3, 0.6]]], np.float32)
    preds = Predictions(scores=np.zeros((1, 1), np.float32), outputs={"head": out})

    def run(selection: str, keep: str) -> tuple[list[int], list[float], list[list[float]]]:
        d = YoloAnchorFreeDecode(
            AnchorFreeDecodeParams(
                output="head",
                classes=2,
                threshold=0.3,
                keep=keep,  # type: ignore[arg-type]
                class_selection=selection,
            )
        )(preds).detections[0]  # type: ignore[arg-type]
        return d.classes.tolist(), [round(v, 6) for v in d.scores.tolist()], d.boxes.tolist()

    assert run("max", "ge") == ([0, 0, 1], [0.9, 0.3, 0.6], [[10, 10, 4, 2], [20, 20, 4, 6], [30, 30, 8, 8]])
    assert run("max", "gt")[0] == [0, 1]  # 0.3 is not > 0.3; ties go to the lower class
    assert run("all", "gt") == ([0, 0, 1], [0.9, 0.5, 0.6], [[10, 10, 4, 2], [30, 30, 8, 8], [30, 30, 8, 8]])
