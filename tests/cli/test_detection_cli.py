"""``repliscope evaluate`` / ``runs show`` / ``runs compare`` on the exact rectangle detector."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from repliscope.cli.main import app
from repliscope.store import RunStore

MANIFEST = Path(__file__).parents[1] / "fixtures" / "detection" / "rect-detector.yaml"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_evaluate_show_and_compare_a_detection_run(tmp_path: Path) -> None:
    runner = CliRunner(env={"COLUMNS": "200", "REPLISCOPE_CACHE": str(tmp_path / "cache")})
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    args = ["evaluate", str(MANIFEST), "--dataset", "synthetic_detection", "--db", db]
    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    assert "metrics (95 % bootstrap interval over images)" in first.output
    assert "│ AP     │ 1.0000 │ [1.0000, 1.0000] │ 16 images │" in first.output
    assert "│ 2 green │ 1.0000 │ 1.0000 │ 12      │ 12         │" in first.output
    assert "16 evaluated, 0 failed, 33 ground-truth boxes in 3 categories" in first.output
    assert "batch 1," in first.output  # the model takes one image at a time: never batched
    assert runner.invoke(app, args).exit_code == 0
    with RunStore(db) as store:
        a, b = [r.run_id for r in store.list()]
        assert store.list()[0].ap == 1.0
    listed = runner.invoke(app, ["runs", "list", "--db", db])
    assert listed.exit_code == 0 and listed.output.count(" 1.0000\n") == 2, listed.output  # AP: 0.3741 style
    shown = runner.invoke(app, ["runs", "show", a[:8], "--samples", "--db", db])
    assert "synthetic_000.png  2           1 1.000 [3.0 7.0 26.0 33.0]; 2 1.000 [56.0 62.0 75.0 113.0]" in shown.output
    compared = runner.invoke(app, ["runs", "compare", a[:8], b[:8], "--db", db])
    assert compared.exit_code == 0, compared.output
    assert (
        "paired    B against A's detections: 16 images, matched 100.00 % of the 33 A detections (IoU >= 0.5, "
        "same class), mean IoU 1.0000, 0 images differ"
    ) in compared.output
    refused = runner.invoke(app, [*args, "--batch-size", "4"])
    assert refused.exit_code != 0 and "--batch-size 4 is not possible, use --batch-size 1" in refused.output


def test_every_manifest_framework_has_a_registered_default_runtime() -> None:
    from typing import get_args

    from repliscope.errors import RepliscopeError
    from repliscope.manifest.schema import FrameworkSpec
    from repliscope.runtimes import NATIVE_RUNTIMES, native_runtime
    from repliscope.runtimes.base import RUNTIMES

    frameworks = get_args(FrameworkSpec.model_fields["name"].annotation)
    assert set(frameworks) == set(NATIVE_RUNTIMES)
    assert {f: native_runtime(f) for f in frameworks} == {
        "torch": "torch",
        "onnx": "onnxruntime",
        "tflite": "tflite",
        "tensorflow": "tensorflow",
        "keras": "keras",
        "darknet": "darknet",
    }
    assert all(r in RUNTIMES for r in NATIVE_RUNTIMES.values())
    with pytest.raises(RepliscopeError, match="no default runtime for framework 'jax': pass --runtime"):
        native_runtime("jax")


def test_blazeface_evaluates_on_its_own_runtime_without_runtime_option(tmp_path: Path) -> None:
    """The tflite manifest runs on tflite when --runtime is not given (was KeyError 'tflite')."""
    from tests.runtimes.detection_references import FACES, need

    pytest.importorskip("ai_edge_litert")
    xml = need(FACES) / "testing.xml"
    runner = CliRunner(env={"COLUMNS": "200", "REPLISCOPE_CACHE": str(tmp_path / "cache")})
    got = runner.invoke(
        app,
        [
            "evaluate",
            str(EXAMPLES / "blazeface-full-range.yaml"),
            "--dataset",
            f"dlib_xml:{xml}",
            "--db",
            f"sqlite:///{tmp_path / 'runs.db'}",
        ],
    )
    assert got.exit_code == 0, got.output
    assert "runtime   tflite (ai-edge-litert " in got.output
    assert "│ AP     │ 0.5697 │" in got.output
    with RunStore(f"sqlite:///{tmp_path / 'runs.db'}") as store:
        record = store.get(store.list()[0].run_id)
    from importlib.metadata import version

    # the record carries the runtime's own distributions (was: only torch / onnx ones)
    assert record.software["distributions"]["ai-edge-litert"] == version("ai-edge-litert")


def test_runtime_line_names_a_conversion() -> None:
    """A tflite model run on onnxruntime says it ran tf2onnx's conversion (the record's runtime.conversion)."""
    from repliscope.cli.output import _conversion

    conv = {"converter": "tf2onnx", "converter_version": "1.17.0", "from": "tflite", "cached": True}
    assert _conversion(conv) == ", converted from tflite by tf2onnx 1.17.0 (cached)"
    assert _conversion(None) == "" == _conversion({"opset": 17})


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (
            "    iou_threshold: 0.3\n",
            "    iou_treshold: 0.3\n",
            ":99: field 'postprocess[3].iou_treshold': unknown parameter; did you mean 'iou_threshold'? (allowed: "
            "class_aware, iou_threshold, max_output, method, min_score, sigma, soft_function)",
        ),
        (
            "  - op: to_source\n    undo: geometry\n    clip: false\n",
            "",
            ":68: field 'postprocess': the postprocess leaves boxes as xyxy pixels (input image): add a 'to_source' op",
        ),
        (
            "    boxes: reshaped_regressor_face_4\n",
            "    boxes: regressor\n",
            ":74: field 'postprocess[1].boxes': 'anchor_decode' reads model output 'regressor', which "
            "is not in outputs "
            "(allowed: reshaped_classifier_face_4, reshaped_regressor_face_4)",
        ),
        (
            "    order: pad_then_resize\n",
            "",
            ":35: field 'preprocess[1].order': required parameter missing (allowed: pad_then_resize, resize_then_pad)",
        ),
    ],
)
def test_broken_detection_manifests_name_line_field_and_allowed_values(
    tmp_path: Path, old: str, new: str, expected: str
) -> None:
    text = (EXAMPLES / "blazeface-full-range.yaml").read_text()
    assert text.count(old) == 1
    broken = tmp_path / "broken.yaml"
    broken.write_text(text.replace(old, new))
    (tmp_path / "face-labels.txt").write_text("face\n")
    got = CliRunner(env={"COLUMNS": "400"}).invoke(app, ["manifest", "validate", str(broken)])
    assert got.exit_code == 2 and f"{broken}{expected}" in " ".join(got.output.split()), got.output
