"""``repliscope stacks`` on the darknet manifest with opencv_dnn in two stacks: ``current`` (OpenCV 5: no Darknet
reader, the ONNX conversion) and a stack built from the package registry with ``opencv-python-headless<5`` (OpenCV 4
reads the ``.cfg`` + ``.weights`` itself: ``cv2.dnn.readNetFromDarknet``). Both give libdarknet's detections on
Darknet's sample images.

The dataset is a COCO folder of Darknet's ``dog.jpg`` and ``kite.jpg`` whose boxes are libdarknet's own demo
detections (``detector test`` at thresh .25, ``do_nms_sort``): a detection manifest is evaluated on boxes, and these
make the AP read as agreement with Darknet's demo output, nothing more. Slow (a cold stack build installs ~50
distributions: 3-4 min on the loaded 2-core machine); skipped when the registry cannot serve the stack."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from tests.yolo._assets import DARKNET_DATA, MANIFEST, cfg_path, need_darknet, seed_cache, weights_path

pytest.importorskip("distributed")
pytestmark = [pytest.mark.slow, pytest.mark.stack, pytest.mark.network, pytest.mark.timeout(2400)]

SPEC = "opencv-python-headless<5"
IMAGES = ("dog.jpg", "kite.jpg")
_UNREACHABLE = (
    "No matching distribution found",
    "Could not find a version",
    "NewConnectionError",
    "Temporary failure in name resolution",
    "Network is unreachable",
)


def _demo_dataset(root: Path) -> Path:
    """A COCO folder of Darknet's sample images with libdarknet's demo detections as boxes."""
    from repliscope.backends.darknet import reference as ref
    from repliscope.backends.darknet.runner import DarknetRunner
    from repliscope.ops.detection.class_map import COCO80_TO_91
    from repliscope.runtimes.base import ModelArtifact

    artifact = ModelArtifact(
        path=weights_path(),
        sha256="",
        format="darknet",
        input_name="data",
        input_shape=(-1, 3, 416, 416),
        input_dtype="float32",
        config_path=cfg_path(),
    )
    runner = DarknetRunner(artifact, threads=1, cache_dir=root)
    (root / "images").mkdir(parents=True)
    (root / "annotations").mkdir()
    images, annotations = [], []
    for image_id, name in enumerate(IMAGES, start=1):
        shutil.copy(DARKNET_DATA / name, root / "images" / name)
        h, w = ref.load_image(DARKNET_DATA / name).shape[1:]
        images.append({"id": image_id, "file_name": name, "width": w, "height": h})
        x = ref.letterbox(DARKNET_DATA / name, 416, 416)
        for d in ref.detect(runner, x, (h, w), thresh=0.25, method="sort"):
            cx, cy, bw, bh = d.box
            x1, y1 = max(cx - bw / 2, 0.0), max(cy - bh / 2, 0.0)
            x2, y2 = min(cx + bw / 2, w - 1.0), min(cy + bh / 2, h - 1.0)
            bbox = [x1, y1, x2 - x1, y2 - y1]
            annotations.append(
                {
                    "id": len(annotations) + 1,
                    "image_id": image_id,
                    "category_id": COCO80_TO_91[d.class_id],
                    "bbox": bbox,
                    "area": bbox[2] * bbox[3],
                    "iscrowd": 0,
                }
            )
    names = (DARKNET_DATA / "coco.names").read_text().splitlines()  # the manifest's labels, Darknet's class order
    categories = [{"id": cid, "name": names[k]} for k, cid in enumerate(COCO80_TO_91)]
    doc = {"images": images, "annotations": annotations, "categories": categories}
    (root / "annotations" / "instances_darknet_demo.json").write_text(json.dumps(doc))
    return root


def _detections(run: Any) -> dict[str, list[tuple[int, float, list[float]]]]:
    return {
        s.sample_id: [(d.class_id, d.score, d.box) for d in (s.detections or [])]
        for s in run.samples
        if s.error is None
    }


def _libdarknet_run(dataset: Path, db: str) -> Any:
    """The same manifest and images on the darknet runtime (libdarknet: its detections are ``detector valid``'s,
    tests/yolo/test_yolo_coco.py) in this process."""
    res = CliRunner().invoke(
        __import__("repliscope.cli.main", fromlist=["app"]).app,
        [
            "evaluate",
            str(MANIFEST),
            "--runtime",
            "darknet",
            "--dataset",
            f"coco:{dataset}",
            "--threads",
            "1",
            "--batch-size",
            "1",
            "--db",
            db,
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout[res.stdout.index("{") :])


def test_stacks_matrix_opencv_5_conversion_and_opencv_4_cfg_reader(tmp_path: Path) -> None:
    from repliscope.cli.main import app
    from repliscope.stacks.spec import StackError
    from repliscope.stacks.store import create_stack
    from repliscope.store.repository import RunStore

    need_darknet()
    seed_cache()
    try:
        stack = create_stack(SPEC)
    except StackError as exc:
        if any(text in str(exc) for text in _UNREACHABLE):
            pytest.skip(f"the package registry cannot serve {SPEC} for this Python: {str(exc).splitlines()[-1]}")
        if "not an editable or source install" in str(exc):
            pytest.skip(str(exc))
        raise
    assert stack.resolved["opencv-python-headless"].startswith("4.")
    dataset = _demo_dataset(tmp_path / "demo")
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    args = ["stacks", str(MANIFEST), "--runtime", "opencv_dnn", "--stack", "current", "--stack", SPEC]
    res = CliRunner().invoke(app, [*args, "--dataset", f"coco:{dataset}", "--db", db, "--json"])
    assert res.exit_code == 0, res.output
    m = json.loads(res.stdout[res.stdout.index("{") :])
    assert [s["key"] for s in m["stacks"]] == ["current", stack.key]
    assert all(s["error"] is None and s["evaluated"] == 2 for s in m["stacks"]), m["stacks"]
    current_cv, stack_cv = (s["versions"]["opencv-python-headless"] for s in m["stacks"])
    assert int(current_cv.split(".")[0]) >= 5 and stack_cv.startswith("4.")
    (pair,) = m["pairs"]
    assert pair["outputs_compared"] == 2 and pair["max_abs_output_diff"] < 1e-4  # the tolerance of the raw heads

    store = RunStore(db)
    runs = [store.get(s["run_id"]) for s in m["stacks"]]
    readers = [r.runtime["darknet_reader"]["reader"] for r in runs]
    assert readers == ["the ONNX conversion (notes.conversion)", "cv2.dnn.readNetFromDarknet"]
    reference = _detections(store.get(_libdarknet_run(dataset, db)["run_id"]))
    assert {k: len(v) for k, v in reference.items()} == {"dog.jpg": 70, "kite.jpg": 34}
    for run in runs:
        got = _detections(run)
        assert sorted(got) == sorted(reference)
        for sample, want in reference.items():
            have = got[sample]
            assert len(have) == len(want), (run.runtime, sample)
            # same detections in the same order; scores and boxes within float rounding of libdarknet's
            assert [c for c, _, _ in have] == [c for c, _, _ in want]
            assert np.abs(np.array([s for _, s, _ in have]) - [s for _, s, _ in want]).max() < 1e-4
            assert np.abs(np.array([b for _, _, b in have]) - [b for _, _, b in want]).max() < 0.05  # pixels
    assert m["stacks"][0]["ap"] == pytest.approx(m["stacks"][1]["ap"], abs=1e-6)
