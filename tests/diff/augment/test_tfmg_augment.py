"""Issue 34 §3 for the Model Garden: ``tfmg_yolo_input``, the real tf-models-official 2.20.0 ``yolo_input`` training
ops in the Model Garden's stack (the tfmg_yolo loss's), as an ORIGINAL of the augmentation diff; its draws recorded
and replayed; Darknet's ops given the Model Garden's draws op by op; both sides' own draws by distribution.

Darknet's dog.jpg (ships with darknet) with three boxes, 60 seeds: ONE crossing to the stack for the whole module
(~35 s on 2 shared cores: TensorFlow's start, 60 augmentations each run twice, recorded then replayed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from repliscope.diff.augment.contract import AUGMENTATIONS, as_candidate
from repliscope.diff.augment.darknet_as_tfmg import YOLOV3_TINY
from repliscope.diff.augment.driver import AugmentDiffResult, Item, run_diff
from repliscope.errors import RepliscopeError
from tests.diff.training._fixtures import DOG_TRUTH
from tests.yolo._assets import DARKNET_DATA, cfg_path, need_darknet

SEEDS = list(range(1, 61))


def _item(pipeline: Any) -> Item:
    need_darknet()
    image = pipeline.decode((DARKNET_DATA / "dog.jpg").read_bytes(), ".jpg")
    return Item("dog.jpg", image, DOG_TRUTH.copy())


@pytest.fixture(scope="module")
def prepared() -> Any:
    from repliscope.stacks.call import run_task

    pipeline = AUGMENTATIONS.get("tfmg_yolo_input").from_model_config(cfg_path())
    pipeline.bind(run_task)
    item = _item(pipeline)
    pipeline.prepare([item], SEEDS)
    yield pipeline, item
    pipeline.close()


@pytest.fixture(scope="module")
def shared(prepared: Any) -> AugmentDiffResult:
    pipeline, item = prepared
    cand = as_candidate("repliscope.diff.augment.darknet_as_tfmg:YOLOV3_TINY", YOLOV3_TINY, pipeline)
    return run_diff(pipeline, cand, [item], SEEDS[:8], draws="shared", manifest="yolov3-tiny", dataset="dog")


@pytest.fixture(scope="module")
def own(prepared: Any) -> AugmentDiffResult:
    pipeline, item = prepared
    cand = as_candidate("repliscope.diff.augment.darknet_as_tfmg:YOLOV3_TINY", YOLOV3_TINY, pipeline)
    return run_diff(pipeline, cand, [item], SEEDS, draws="own", manifest="yolov3-tiny", dataset="dog")


# -- the original, in its stack -----------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.stack
@pytest.mark.network
def test_every_draw_is_explicit_and_replays_the_augmentation_bit_for_bit(prepared: Any) -> None:
    pipeline, item = prepared
    h, w = item.image.shape[:2]
    jobs = [pipeline._job("dog.jpg", s) for s in SEEDS]
    assert all(job["replayed"] for job in jobs)  # recorded draws fed back: the same outputs, every op
    flips = 0
    for job in jobs:
        p = job["params"]
        assert all(abs(p["jitter"][k]) <= 0.3 * w for k in ("pleft", "pright"))
        assert all(abs(p["jitter"][k]) <= 0.3 * h for k in ("ptop", "pbottom"))
        affine = p["affine"]
        assert (affine["angle"], affine["px"], affine["py"], affine["scale"], affine["tx"], affine["ty"]) == (
            0.0, 0.0, 0.0, 1.0, 0.5, 0.5,
        )  # fmt: skip
        assert abs(p["hsv"]["hue"]) <= 0.1
        assert all(1 / 1.5 - 1e-6 <= p["hsv"][k] <= 1.5 for k in ("saturation", "brightness"))
        assert p["boxes"]["flip"] == p["flip"]["flip"] and p["boxes"]["width"] == w
        flips += p["flip"]["flip"]
    assert 18 <= flips <= 42  # u < 0.5 over 60 draws
    assert len({job["params"]["jitter"]["pleft"] for job in jobs}) == 60  # one global seed per augmentation


@pytest.mark.slow
@pytest.mark.stack
@pytest.mark.network
def test_the_recorded_outputs_are_the_model_gardens_ops(prepared: Any) -> None:
    pipeline, item = prepared
    original = np.rint(item.image * 255)
    padded_top = 0
    for seed in SEEDS:
        p = pipeline._job("dog.jpg", seed)["params"]
        flipped = np.rint(pipeline.output("dog.jpg", seed, "flip") * 255)
        np.testing.assert_array_equal(flipped, original[:, ::-1] if p["flip"]["flip"] else original)
        jitter = np.rint(pipeline.output("dog.jpg", seed, "jitter") * 255)
        assert jitter.shape == (416, 416, 3)
        np.testing.assert_array_equal(pipeline.output("dog.jpg", seed, "affine"), jitter / 255)  # degenerate warp
        j = p["jitter"]
        if j["ptop"] < -10:  # padded on top with 114 (113 where its bilinear resize truncates)
            rows = int(-j["ptop"] * 416 / (576 - j["ptop"] - j["pbottom"])) - 1
            assert set(np.unique(jitter[:rows])) <= {113.0, 114.0}
            padded_top += 1
        hsv = pipeline.output("dog.jpg", seed, "hsv")
        assert hsv.dtype == np.float32 and hsv.min() >= 0 and hsv.max() <= 1
        boxes = pipeline.output("dog.jpg", seed, "boxes")
        assert boxes.shape[1] == 5 and len(boxes) <= 3 and set(boxes[:, 4].tolist()) <= {16.0, 1.0, 7.0}
    assert padded_top > 10


@pytest.mark.slow
@pytest.mark.stack
@pytest.mark.network
def test_shared_draws_darknets_ops_op_by_op(shared: AugmentDiffResult) -> None:
    """The Model Garden's draws given to Darknet's own arithmetic: the flip and the (degenerate) warp are
    Darknet's exactly; the jitter is the first op that differs (its crop/pad rectangle placed Darknet's way: a 0.5
    canvas instead of 114, no half-pixel offset, truncated placement); the HSV on the same hue, saturation and
    brightness differs where S x saturation > 1 (TensorFlow's adjust_saturation clips S at 1, Darknet's hsv_to_rgb
    takes S > 1 and clamps the RGB at the end);
    the boxes by the filter: the Model Garden drops a box keeping less than 10 % of its area, Darknet only boxes
    under 0.001 wide or high."""
    r = shared
    by = {o.name: o for o in r.ops}
    assert r.first_divergent == "jitter" and not r.passed
    assert by["flip"].differing == 0 and by["flip"].max_abs_err == 0.0
    assert by["affine"].differing == 0 and by["affine"].max_abs_err == 0.0
    assert by["jitter"].differing == 8 and by["jitter"].max_abs_err > 0.3
    assert by["hsv"].differing >= 1 and 0.01 < by["hsv"].max_abs_err < 0.5
    assert by["boxes"].differing == 8 and "boxes where the original keeps" in (by["boxes"].hint or "")
    assert any("replayed" in n for n in r.notes)


@pytest.mark.slow
@pytest.mark.stack
@pytest.mark.network
def test_own_draws_name_the_jitter_as_the_op_whose_distribution_differs(own: AugmentDiffResult) -> None:
    """Darknet keeps the aspect ratio (jittered by up to 30 %) and letterboxes on a 0.5 canvas; the Model Garden
    crops/pads each side and STRETCHES to 416 x 416 (letter_box=False): its aspect change is the image's own
    (log(1 / (768/576)) = -0.29 on average), its placed rectangle fills the canvas more often; the colour and flip
    draws agree in distribution."""
    r = own
    tests = {(t.op, t.statistic): t for t in r.distribution}
    assert r.first_divergent == "jitter"
    assert tests[("jitter", "aspect_change")].differs and tests[("jitter", "aspect_change")].ks > 0.5
    assert tests[("jitter", "aspect_change")].original_mean < -0.2 < tests[("jitter", "aspect_change")].candidate_mean
    assert not any(t.differs for t in r.distribution if t.op in ("flip", "affine", "hsv"))
    assert r.alpha == 0.001 and r.samples == 1 and len(r.seeds) == 60


# -- bad input, without the stack ---------------------------------------------------------------------------------


def test_unbound_pipeline_names_the_runner() -> None:
    pipeline = AUGMENTATIONS.get("tfmg_yolo_input").from_model_config(cfg_path())
    with pytest.raises(RepliscopeError, match=r"runs in the Model Garden's stack: bind a runner"):
        pipeline.prepare([Item("x", np.zeros((8, 8, 3), np.float32), np.zeros((0, 5), np.float32))], [1])


def test_a_jitter_the_model_garden_refuses_is_named(tmp_path: Path) -> None:
    cfg = tmp_path / "big-jitter.cfg"
    text = cfg_path().read_text().replace("jitter=.3", "jitter=.7")
    assert "jitter=.7" in text
    cfg.write_text(text)
    with pytest.raises(RepliscopeError, match=r"big-jitter.cfg: jitter=0.7: .* allows 0..0.5"):
        AUGMENTATIONS.get("tfmg_yolo_input").from_model_config(cfg)


def test_darknet_has_no_affine_warp_for_other_draws() -> None:
    image = np.zeros((4, 4, 3), np.float32)
    with pytest.raises(RepliscopeError, match=r"Darknet has no affine warp: .* got angle=3.0"):
        YOLOV3_TINY.affine(image, angle=3.0, px=0.0, py=0.0, scale=1.0, tx=0.5, ty=0.5, out_w=4, out_h=4)


@pytest.mark.parametrize("name", ["os:system", "subprocess:run", "builtins:eval", "tfmg_yolo"])
def test_the_child_runs_only_registered_tasks(name: str, tmp_path: Path) -> None:
    sentinel = tmp_path / "pwned"
    proc = subprocess.run(
        [sys.executable, "-m", "repliscope.stacks.call", "task", name, str(tmp_path / "in.npz"), str(sentinel)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: task '{name}' is not registered (allowed: tfmg_yolo_input")
    assert not sentinel.exists()


def test_a_task_input_holding_a_pickled_object_is_refused(tmp_path: Path) -> None:
    from repliscope.diff.augment.tfmg_pipeline import child

    sentinel = tmp_path / "pwned"
    bad = tmp_path / "in.npz"
    np.savez(bad, payload=np.array([{"cmd": f"touch {sentinel}"}], dtype=object))
    with pytest.raises(RepliscopeError, match=r"not a readable \.npz without pickled objects"):
        child(bad, tmp_path / "out.npz")
    assert not sentinel.exists() and not (tmp_path / "out.npz").exists()


def test_the_command_line_binds_the_stack_and_a_failing_stack_is_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``--augment-pipeline tfmg_yolo_input`` hands the task to ``run_task``; a stack that fails is one line naming
    the task and exit 2, nothing stored (no real stack here: the runner is replaced)."""
    from typer.testing import CliRunner

    from repliscope.cli.main import app
    from repliscope.stacks.call import LossCallError
    from tests.yolo._assets import MANIFEST, need_coco, seed_cache

    seen: list[str] = []

    def failing(name: str, into: Path, out: Path, **_: Any) -> None:
        seen.append(name)
        assert into.is_file() and not out.exists()
        raise LossCallError(f"task '{name}' in stack f00: no result after 900 s (the child was stopped)")

    monkeypatch.setattr("repliscope.stacks.call.run_task", failing)
    seed_cache()
    db = tmp_path / "runs.db"
    args = ["diff", str(MANIFEST), "--augment-pipeline", "tfmg_yolo_input", "--augment"]
    args += ["repliscope.diff.augment.darknet_as_tfmg:YOLOV3_TINY", "--dataset", f"coco:{need_coco()}"]
    args += ["--limit", "1", "--seeds", "2", "--db", f"sqlite:///{db}"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2, res.stdout + res.stderr
    assert seen == ["tfmg_yolo_input"]
    assert res.stderr.strip().splitlines() == [
        "error: task 'tfmg_yolo_input' in stack f00: no result after 900 s (the child was stopped)"
    ]
    assert not db.exists()
