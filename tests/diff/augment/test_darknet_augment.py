"""The augmentation diff against libdarknet itself: glibc's rand() replayed, the four ops in sequence equal to
load_data_detection bit for bit, repliscope's numpy port within tolerance, each one-mistake port named."""

from __future__ import annotations

import ctypes
import json
import re
from pathlib import Path

import numpy as np
import pytest

from repliscope.diff.augment.contract import as_candidate
from repliscope.diff.augment.darknet_draws import GlibcRand, darknet_draws
from repliscope.diff.augment.darknet_pipeline import DarknetDetection, augment_config
from repliscope.diff.augment.driver import Item, run_diff
from repliscope.errors import RepliscopeError
from tests.diff.augment import candidates
from tests.yolo._assets import cfg_path, need_coco, need_darknet


@pytest.mark.parametrize("seed", [0, 1, 42, 2**31 - 1, 2**31 + 5, 2**32 - 1])
def test_glibc_rand_is_the_c_library_stream(seed: int) -> None:
    libc = ctypes.CDLL("libc.so.6")
    libc.srand(ctypes.c_uint(seed))
    mine = GlibcRand(seed)
    assert [libc.rand() for _ in range(500)] == [mine() for _ in range(500)]


def _items(n: int) -> list[Item]:
    from repliscope.backends.darknet.augment import load_image

    root = need_coco()
    ann = json.loads((root / "annotations" / "instances_val2017_mini.json").read_text())
    out = []
    for img in sorted(ann["images"], key=lambda i: i["id"])[:n]:
        image = load_image((root / "images" / img["file_name"]).read_bytes())
        h, w = image.shape[:2]
        rows = [
            [(x + bw / 2) / w, (y + bh / 2) / h, bw / w, bh / h, a["category_id"] - 1]
            for a in ann["annotations"]
            if a["image_id"] == img["id"] and not a["iscrowd"]
            for x, y, bw, bh in [a["bbox"]]
        ]
        out.append(Item(img["file_name"], image, np.asarray(rows, np.float32).reshape(-1, 5)))
    return out


@pytest.fixture(scope="module")
def pipeline() -> DarknetDetection:
    need_darknet()
    return DarknetDetection.from_model_config(cfg_path())


@pytest.fixture(scope="module")
def items() -> list[Item]:
    need_darknet()
    return _items(4)


def test_cfg_settings_are_train_detectors(pipeline: DarknetDetection) -> None:
    assert vars(augment_config(cfg_path())) == {
        "width": 416, "height": 416, "jitter": 0.3, "hue": 0.1, "saturation": 1.5, "exposure": 1.5,
    }  # fmt: skip


def test_ops_in_sequence_are_load_data_detection_bit_for_bit(pipeline: DarknetDetection, items: list[Item]) -> None:
    """srand(seed); libdarknet's load_data_detection == the four original ops on the replayed draws."""
    from repliscope.backends.darknet import augment

    root = need_coco()
    c = pipeline.config
    checked = 0
    for item in items:
        for seed in (1, 7, 123, 2024):
            whole_x, whole_y = augment.load_data_detection(
                root / "images" / item.sample, item.boxes, seed=seed, width=c.width, height=c.height,
                classes=80, jitter=c.jitter, hue=c.hue, saturation=c.saturation, exposure=c.exposure,
            )  # fmt: skip
            drawn = pipeline.draw(item.image, item.boxes, seed, item.sample)
            image = item.image
            for op in ("place", "distort", "flip"):
                image = pipeline.original(op)(image, **drawn.params[op])
            boxes = pipeline.original("truth")(item.boxes, **drawn.params["truth"])
            np.testing.assert_array_equal(image, whole_x)
            np.testing.assert_array_equal(boxes, whole_y)
            checked += 1
    assert checked == 16


def test_draws_follow_the_c_order(pipeline: DarknetDetection) -> None:
    d = darknet_draws(GlibcRand(7), pipeline.config, 640, 480, 2)
    assert (d.nw, d.flip, d.box_order) == (416.0, True, (1, 0))
    assert 1 / 1.5 <= d.saturation <= 1.5 and 1 / 1.5 <= d.exposure <= 1.5 and abs(d.hue) <= 0.1


def test_numpy_port_matches_every_op(pipeline: DarknetDetection, items: list[Item]) -> None:
    cand = as_candidate("port", candidates.good, pipeline)
    result = run_diff(pipeline, cand, items, [1, 2, 3], draws="shared", manifest="yolov3-tiny", dataset="coco")
    assert result.passed, result.ops
    by = {op.name: op for op in result.ops}
    assert [op.name for op in result.ops] == ["place", "distort", "flip", "truth"]
    assert all(op.compared == 12 and op.differing == 0 for op in result.ops)
    assert by["distort"].max_abs_err == 0.0 and by["flip"].max_abs_err == 0.0 and by["truth"].max_abs_err == 0.0
    assert 0 < by["place"].max_abs_err < by["place"].tolerance  # -Ofast's coordinate rounding, within one step


@pytest.mark.parametrize(
    ("name", "first", "hint"),
    [
        ("fill_black", "place", "differ by more than 1e-3"),
        ("swapped_scales", "distort", "differ by more than 1e-3"),
        ("flip_always", "flip", "mirrored left-right"),
        ("truth_unordered", "truth", "another order"),
    ],
)
def test_one_mistake_is_named(pipeline: DarknetDetection, items: list[Item], name: str, first: str, hint: str) -> None:
    cand = as_candidate(name, getattr(candidates, name), pipeline)
    result = run_diff(pipeline, cand, items, [1, 2, 3, 4, 5], draws="shared", manifest="m", dataset="coco")
    assert result.first_divergent == first
    by = {op.name: op for op in result.ops}
    assert by[first].differing > 0 and hint in (by[first].hint or "")
    assert all(by[o].differing == 0 for o in by if o != first)  # golden mode: the others still match


def test_own_draws_same_distribution_passes(pipeline: DarknetDetection, items: list[Item]) -> None:
    cand = as_candidate("own_good", candidates.own_good, pipeline)
    result = run_diff(pipeline, cand, items[:2], list(range(1, 41)), draws="own", manifest="m", dataset="coco")
    assert result.first_divergent is None, [t for t in result.distribution if t.p_adjusted < 0.05]
    assert {t.op for t in result.distribution} == {"place", "distort", "flip", "truth"}


@pytest.mark.parametrize(("name", "first", "stat"), [("own_never_flips", "flip", "mirrored"),
                                                     ("own_small_jitter", "place", "aspect_change")])  # fmt: skip
def test_own_draws_wrong_distribution_is_named(
    pipeline: DarknetDetection, items: list[Item], name: str, first: str, stat: str
) -> None:
    cand = as_candidate(name, getattr(candidates, name), pipeline)
    result = run_diff(pipeline, cand, items[:2], list(range(1, 41)), draws="own", manifest="m", dataset="coco")
    assert result.first_divergent == first
    assert any(t.op == first and t.statistic == stat and t.differs for t in result.distribution)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("raises", "op 'distort' raised RuntimeError: boom"),
        ("nan_output", "op 'flip' returned NaN or Inf"),
        ("wrong_shape", "op 'place' returned shape (10, 10, 3), expected (416, 416, 3)"),
    ],
)
def test_bad_candidate_is_one_clear_error(
    pipeline: DarknetDetection, items: list[Item], name: str, message: str
) -> None:
    cand = as_candidate(name, getattr(candidates, name), pipeline)
    with pytest.raises(RepliscopeError, match=re.escape(message)):
        run_diff(pipeline, cand, items[:1], [1], draws="shared", manifest="m", dataset="coco")


def test_missing_op_names_the_ops(pipeline: DarknetDetection) -> None:
    with pytest.raises(RepliscopeError, match=r"no callable for op\(s\) flip, truth of pipeline 'darknet_detection'"):
        as_candidate("missing", candidates.missing_op, pipeline)


def test_place_tolerance_is_one_coordinate_step(pipeline: DarknetDetection) -> None:
    op = pipeline.ops[0]
    assert pipeline.tolerance(op, np.zeros((480, 640, 3), np.float32)) == pytest.approx(2 * 2**-23 * 640)
    assert Path(cfg_path()).is_file()
