"""``repliscope report DIFF_ID`` of a stored loss diff: the values and the gradient errors, in HTML and Markdown."""

from __future__ import annotations

from pathlib import Path

from repliscope.diff.loss.contract import LOSSES
from repliscope.diff.loss.driver import run_loss_diff
from repliscope.report.diff_report import write_diff_report
from repliscope.store.diffs import get_diff, store_diff
from repliscope.store.repository import RunStore
from tests.diff.loss import candidates
from tests.diff.loss.test_darknet_yolo import _tiny
from tests.yolo._assets import need_darknet


def test_the_report_of_a_loss_diff_shows_its_values_and_gradients(tmp_path: Path) -> None:
    need_darknet()
    from repliscope.backends.darknet.loss import darknet_yolo_loss

    result = run_loss_diff(
        _tiny(), LOSSES.get("darknet_yolo"), darknet_yolo_loss, "focal", candidates.YoloV3Torch(focal=(0.25, 2.0)),
        source="random seed 3",
    )  # fmt: skip
    with RunStore(f"sqlite:///{tmp_path / 'runs.db'}") as store:
        stored = get_diff(store, store_diff(store, result.model_dump(mode="json"), manifest_name="tiny-yolo"))
    md = write_diff_report(stored, None, tmp_path / "r.md", "md").read_text()
    assert "Loss: focal vs darknet_yolo (libdarknet forward_yolo_layer" in md
    assert "| yolo_1/class | " in md and "| gradient of | max abs error | ulp | tolerance |" in md
    assert "verdict: **failed**: first divergent: yolo_1/class" in md
    html = write_diff_report(stored, None, tmp_path / "r.html", "html").read_text()
    assert 'id="loss"' in html and "First divergent: <strong>yolo_1/class</strong>" in html
    assert "focal_class_loss" in html
