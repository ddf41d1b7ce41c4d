"""The "416 vs 608 input" pitfall: the same size-agnostic Darknet cfg and weights run at 608 x 608.

A variant changes the model input size through ``Derived.settings["input_shape"]``: the sweep gives it a runner on
an artifact of that shape (:func:`repliscope.pitfalls.runners.runner_for`), which the Darknet -> ONNX conversion
builds at that size and libdarknet reaches with ``resize_network``."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from repliscope.convert.darknet_cfg import load_network_cfg
from repliscope.ops.pipeline import Pipeline, decode_input
from repliscope.pitfalls.base import PITFALLS, NotApplicable, PitfallContext
from repliscope.pitfalls.runners import check_resizable, runner_for
from repliscope.pitfalls.sweep import task_pitfalls
from tests.yolo._assets import COCO_MINI, DARKNET_DATA, MANIFEST, cfg_path, need_coco, need_darknet, seed_cache

CTX = PitfallContext(input_shape=(-1, 3, 416, 416), input_layout="NCHW", runtime="onnxruntime", batch_size=1, threads=1)


@pytest.fixture(scope="module")
def prepared():
    from repliscope.evaluation.run import RunSettings, prepare

    seed_cache()
    task_pitfalls("object_detection")  # registers the YOLO variants
    return prepare(MANIFEST, RunSettings(runtime="onnxruntime", threads=1, batch_size=1))


def _params(pipeline: Pipeline, name: str) -> dict:
    op = next(o for o in (*pipeline.pre_ops, *pipeline.post_ops) if o.name == name)
    return op.params.model_dump()


def test_derived_pipeline_and_model_shape(prepared) -> None:
    derived = PITFALLS.get("yolo_input_608")().derive(prepared.pipeline, CTX)
    assert derived.settings == {"input_shape": [3, 608, 608]}
    assert derived.change == (
        "input 416x416 -> 608x608 (darknet_letterbox size, yolo_decode and "
        "darknet_correct_boxes input_size, model input [3, 608, 608])"
    )
    assert _params(derived.pipeline, "darknet_letterbox")["size"] == [608, 608]
    assert _params(derived.pipeline, "yolo_decode")["input_size"] == [608, 608]
    assert _params(derived.pipeline, "darknet_correct_boxes")["input_size"] == [608, 608]
    # one change only: everything else as the manifest says
    assert _params(derived.pipeline, "darknet_letterbox")["fill"] == 0.5
    assert _params(derived.pipeline, "yolo_decode")["threshold"] == 0.005
    assert [o.name for o in derived.pipeline.pre_ops] == [o.name for o in prepared.pipeline.pre_ops]
    assert [o.name for o in derived.pipeline.post_ops] == [o.name for o in prepared.pipeline.post_ops]
    with pytest.raises(NotApplicable, match="already 608"):
        PITFALLS.get("yolo_input_608")().derive(
            derived.pipeline, dataclasses.replace(CTX, input_shape=(-1, 3, 608, 608))
        )
    with pytest.raises(NotApplicable, match="darknet_letterbox"):
        PITFALLS.get("yolo_input_608")().derive(Pipeline((), ()), CTX)


def test_cfg_planned_at_another_size() -> None:
    net = load_network_cfg(cfg_path(), (608, 608))
    yolo = [lay.out_shape for lay in net.layers if lay.type == "yolo"]
    assert (net.height, net.width) == (608, 608) and yolo == [(255, 19, 19), (255, 38, 38)]
    assert [lay.out_shape for lay in load_network_cfg(cfg_path()).layers if lay.type == "yolo"] == [
        (255, 13, 13),
        (255, 26, 26),
    ]


def test_onnx_runner_at_608_on_dog(prepared, tmp_path: Path) -> None:
    from repliscope.runtimes import create_runner

    derived = PITFALLS.get("yolo_input_608")().derive(prepared.pipeline, CTX)
    base = create_runner("onnxruntime", prepared.artifact, 1, tmp_path)
    runner = runner_for(base, 1, "float32", tuple(derived.settings["input_shape"]))
    assert runner.artifact.input_shape == (-1, 3, 608, 608) and base.artifact.input_shape == (-1, 3, 416, 416)
    item = derived.pipeline.preprocess(decode_input((DARKNET_DATA / "dog.jpg").read_bytes()))
    assert item.data.shape == (3, 608, 608)
    out = runner.infer_outputs(item.data[None])
    assert {k: v.shape for k, v in out.items()} == {"yolo_16": (1, 255, 19, 19), "yolo_23": (1, 255, 38, 38)}
    conversion = runner.notes["conversion"]
    assert conversion["input_size"] == [608, 608] and conversion["parameters"] == 8849210
    assert runner.notes["input_shape"] == [-1, 3, 608, 608]
    dets = derived.pipeline.postprocess(out, geometry=[item.geometry]).detections[0]  # type: ignore[index]
    top = [int(c) for c in dets.classes[np.argsort(-dets.scores, kind="stable")][:4]]
    assert len(dets.scores) == 78 and top == [8, 18, 2, 3]  # 70 at 416; truck, dog, bicycle, car
    # the size-416 conversion is a different cached file, untouched
    assert create_runner("onnxruntime", prepared.artifact, 1, tmp_path).infer_outputs(
        prepared.pipeline.preprocess(decode_input((DARKNET_DATA / "dog.jpg").read_bytes())).data[None]
    )["yolo_16"].shape == (1, 255, 13, 13)


def test_libdarknet_resized_to_608_agrees(prepared, tmp_path: Path) -> None:
    """libdarknet's resize_network at 608: its input tensor equals the pipeline's bit for bit, its yolo outputs
    the 608 conversion's to float rounding."""
    from repliscope.backends.darknet.reference import letterbox
    from repliscope.runtimes import create_runner

    need_darknet()
    derived = PITFALLS.get("yolo_input_608")().derive(prepared.pipeline, CTX)
    image = DARKNET_DATA / "dog.jpg"
    item = derived.pipeline.preprocess(decode_input(image.read_bytes()))
    assert np.array_equal(item.data, letterbox(image, 608, 608))
    dark = runner_for(create_runner("darknet", prepared.artifact, 1, tmp_path), 1, "float32", (3, 608, 608))
    onnx = runner_for(create_runner("onnxruntime", prepared.artifact, 1, tmp_path), 1, "float32", (3, 608, 608))
    got, want = dark.infer_outputs(item.data[None]), onnx.infer_outputs(item.data[None])
    assert dark.notes["darknet"]["resize_network"]["to"] == [608, 608]
    for name in ("yolo_16", "yolo_23"):
        assert got[name].shape == want[name].shape
        assert float(np.abs(got[name] - want[name]).max()) < 2e-5
    dets = derived.pipeline.postprocess(got, geometry=[item.geometry]).detections[0]  # type: ignore[index]
    assert len(dets.scores) == 78


@pytest.mark.slow
def test_sweep_delta_ap_at_608() -> None:
    """The sweep on the first 12 coco-val-mini images (onnxruntime): AP 416 vs 608 with the paired interval."""
    from repliscope.datasets import resolve_dataset
    from repliscope.evaluation.run import RunSettings, prepare
    from repliscope.pitfalls.sweep import run_sweep

    need_coco()
    seed_cache()
    ds = resolve_dataset(f"coco:{COCO_MINI}")
    ds = dataclasses.replace(ds, samples=ds.samples[:12])
    p = prepare(MANIFEST, RunSettings(runtime="onnxruntime", threads=1, batch_size=1))
    result = run_sweep(p, ds, ["yolo_input_608"], visual_samples=0).result
    variant = result.variants[0]
    assert variant.status == "ok" and variant.settings == {"input_shape": [3, 608, 608]}
    paired = variant.paired_task or {}
    assert result.reference.metric("AP").value == pytest.approx(0.134210, abs=2e-6)  # type: ignore[union-attr]
    assert variant.metric("AP").value == pytest.approx(0.152427, abs=2e-6)  # type: ignore[union-attr]
    assert (paired["n_samples"], paired["n_reference_detections"], paired["n_variant_detections"]) == (12, 1807, 1922)
    assert paired["delta_ap"] == pytest.approx(0.018217, abs=2e-6)
    assert (paired["delta_ap_ci_low"], paired["delta_ap_ci_high"]) == (
        pytest.approx(-0.021645, abs=2e-6),
        pytest.approx(0.062712, abs=2e-6),
    )
    assert paired["matched_fraction"] == pytest.approx(0.25235, abs=1e-4)


def test_other_shape_refused_where_the_model_cannot_run_it(prepared, tmp_path: Path) -> None:
    """The general mechanism on models that cannot change size: NotApplicable with the reason (the sweep reports
    the variant "not applicable"), never a runner that fails inside the runtime."""
    from repliscope.evaluation.run import RunSettings, prepare
    from repliscope.runtimes import create_runner

    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "segmentation" / "colour-segmenter.yaml"
    seg = prepare(fixture, RunSettings(runtime="onnxruntime", threads=1, batch_size=1))
    assert seg.artifact.input_shape == (1, 32, 32, 3)
    with pytest.raises(
        NotApplicable,
        match=r"declares input 'image' as \['N', 32, 32, 3\]; it cannot run at "
        r"\[48, 48, 3\]",
    ):
        runner_for(seg.runner, 1, "float32", (48, 48, 3))
    assert runner_for(seg.runner, 1, "float32", (32, 32, 3)).artifact.input_shape == (1, 32, 32, 3)
    with pytest.raises(NotApplicable, match="keras runtime builds a darknet source at the cfg's size only"):
        check_resizable("keras", prepared.artifact, (3, 608, 608))  # the Keras port is built at the cfg's size
    check_resizable("darknet", prepared.artifact, (3, 608, 608))
    assert create_runner("onnxruntime", prepared.artifact, 1, tmp_path).artifact.input_shape == (-1, 3, 416, 416)
