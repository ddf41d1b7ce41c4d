"""``repliscope report DIFF_ID`` of stored gradient and training-step diffs: their tables in Markdown and HTML."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from repliscope.report.diff_report import write_diff_report
from repliscope.store.diffs import get_diff, store_diff
from repliscope.store.repository import RunStore

_COMMON: dict[str, Any] = {"manifest": "yolov3-tiny", "candidate": "darknet-keras", "dataset": "dog.jpg", "batch": 1}


def _gradient() -> dict[str, Any]:
    params = [
        {"layer": "convolutional_22", "param": "weights", "rel_l2": 1.4e-3, "tolerance": 1.0e-3, "cosine": 0.999999,
         "passed": False},
        {"layer": "convolutional_22", "param": "biases", "rel_l2": 5e-7, "tolerance": 1.0e-3, "cosine": 1.0,
         "passed": True},
    ]  # fmt: skip
    return {**_COMMON, "kind": "gradient_diff", "reference": "darknet (libdarknet backward_network)", "samples": 1,
            "params": params, "first_divergent": "convolutional_22.weights", "passed": False,
            "verdict": "failed", "summary": "first divergent: convolutional_22.weights"}  # fmt: skip


def _steps() -> dict[str, Any]:
    rows = [
        {"step": 1, "learning_rate": 0.001, "darknet_loss": 4.2437, "port_loss": 4.2439, "loss_rel": 5.6e-5,
         "loss_tolerance": 1e-3, "lr_changed": False},
        {"step": 2, "learning_rate": 0.0001, "darknet_loss": 4.1626, "port_loss": 4.1628, "loss_rel": 4.6e-5,
         "loss_tolerance": 1e-3, "lr_changed": True},
    ]  # fmt: skip
    sep = {"step": 2, "layer": "convolutional_22", "param": "weights", "rel": 3e-3, "tolerance": 1e-3}
    return {**_COMMON, "kind": "training_step_diff", "reference": "darknet (libdarknet train_network)", "samples": 2,
            "steps": 2, "rows": rows, "first_separation": sep, "first_divergent": "step 2: convolutional_22.weights",
            "passed": False, "verdict": "failed", "summary": "separates at step 2"}  # fmt: skip


def test_gradient_and_step_diffs_have_their_tables(tmp_path: Path) -> None:
    with RunStore(f"sqlite:///{tmp_path / 'runs.db'}") as store:
        g = get_diff(store, store_diff(store, _gradient(), manifest_name="yolov3-tiny"))
        s = get_diff(store, store_diff(store, _steps(), manifest_name="yolov3-tiny"))
    md = write_diff_report(g, None, tmp_path / "g.md", "md").read_text()
    assert "| convolutional_22.weights | 0.0014 | 0.001 | 1 | **no** |" in md
    assert "First divergent: **convolutional_22.weights**" in md
    html = write_diff_report(g, None, tmp_path / "g.html", "html").read_text()
    assert 'id="gradients"' in html and "<strong>convolutional_22.weights</strong>" in html
    md = write_diff_report(s, None, tmp_path / "s.md", "md").read_text()
    assert "| 2 | 0.0001 (changed) | 4.16 | 4.16 | 4.6e-05 | 0.001 |" in md
    assert "First separation: step 2, **convolutional_22.weights**" in md
    html = write_diff_report(s, None, tmp_path / "s.html", "html").read_text()
    assert 'id="steps"' in html and "0.0001 (changed)" in html
