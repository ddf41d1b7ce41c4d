"""The web page section of stored gradient / training-step diffs (service/web/training_diff_pages.py and the
diff_training.html template) rendered from stored results: tables, the first divergent row, the loss chart's
figure URL; a hostile layer name is escaped."""

from __future__ import annotations

from typing import Any

from repliscope.diff.training.gradients import Determinism, ForwardDiff, GradientDiffResult, ParamDiff
from repliscope.diff.training.steps import DriftRow, StepRow, TrainingStepDiffResult
from repliscope.service.web.training_diff_pages import training_context


def _render(kind: str, result: dict[str, Any]) -> str:
    from repliscope.service.web.diff_pages import _fmt
    from repliscope.service.web.page_kit import environment as _environment

    template = _environment().get_template("diff_training.html")
    return str(template.render(d={"diff_id": "ab" * 16}, fmt=_fmt, **training_context(kind, result)))


def _param(layer: str, rel: float, passed: bool) -> ParamDiff:
    return ParamDiff(
        layer=layer, param="weights", shape=[2, 3, 1, 1], reduction=4, darknet_norm=1.0, port_norm=1.01,
        norm_ratio=1.01, cosine=0.999, rel_l2=rel, max_abs=rel, float32_sensitivity=1e-4, tolerance=1e-3,
        passed=passed,
    )  # fmt: skip


def test_gradient_section_marks_the_first_divergent_and_escapes_names() -> None:
    bad = _param("<script>alert(1)</script>", 0.5, False)
    result = GradientDiffResult(
        manifest="m", candidate="port.keras", dataset="coco", samples=1, batch=1, images=["a.jpg"],
        verdict="failed", summary="s", conventions={"sign": "+dC/dparam"}, port={"port": "port.keras"}, cost=4.25,
        yolo_costs={"yolo_16": 7.2}, k=16.0, params=[_param("convolutional_22", 1e-4, True), bad],
        forward=[ForwardDiff(layer="convolutional_0", max_abs=1e-4, rel=2e-4, kink_crossings=3,
                             rounding_kink_crossings=1)],
        first_divergent="<script>alert(1)</script>.weights", first_divergent_detail=bad,
        determinism=Determinism(darknet_spread=0, port_spread=0, deterministic=True, note="bit-identical"),
        passed=False,
    )  # fmt: skip
    html = _render("gradient_diff", result.model_dump(mode="json"))
    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;.weights" in html
    assert 'id="gradient-first-row"' in html and html.count('class="differs"') == 1
    assert "+dC/dparam" in html and "bit-identical" in html and "4.25" in html
    assert training_context("layer_diff", {}) == {"training": None}


def test_step_section_has_both_losses_the_chart_and_the_last_drift() -> None:
    rows = [
        StepRow(step=1, learning_rate=1e-5, darknet_loss=4.2437, port_loss=4.2439, loss_rel=5e-5,
                loss_tolerance=9e-4),
        StepRow(step=2, learning_rate=1e-4, darknet_loss=4.1, port_loss=4.3, loss_rel=0.05, loss_tolerance=9e-4,
                lr_changed=True),
    ]  # fmt: skip
    drift = [
        DriftRow(step=s, layer="convolutional_22", param="weights", darknet_drift=1e-3, port_drift=1e-3,
                 rel=1e-4 * s, tolerance=1e-2, passed=True)
        for s in (1, 2)
    ]  # fmt: skip
    result = TrainingStepDiffResult(
        manifest="m", candidate="darknet-keras", dataset="coco", samples=1, batch=1, steps=2, images=["a.jpg"],
        verdict="failed", summary="s", solver={"momentum": 0.9}, optimizer={"class": "keras.SGD",
        "config": {"nesterov": False}}, conventions={"update": "u = momentum*u - G"}, port={}, rows=rows,
        drift=drift, first_divergent="step 2: loss", first_loss_separation=rows[1], passed=False,
    )  # fmt: skip
    html = _render("training_step_diff", result.model_dump(mode="json"))
    assert f'src="/diffs/{"ab" * 16}/figure.png"' in html
    assert "step 2: loss" in html and "4.24" in html and "nesterov=False" in html
    assert "After step 2" in html and "0.0002" in html
    assert html.count('class="differs"') == 1  # step 2's loss row
