"""``repliscope report DIFF_ID`` of a stored augmentation diff: the per-op table (shared draws) and the KS table (own
draws), in HTML and Markdown."""

from __future__ import annotations

from pathlib import Path

from repliscope.report.diff_report import write_diff_report
from repliscope.store.diffs import get_diff, store_diff
from repliscope.store.repository import RunStore
from tests.diff.augment._results import flip_results


def test_the_report_shows_each_op_and_the_first_divergent_one(tmp_path: Path) -> None:
    shared, own = flip_results()
    with RunStore(f"sqlite:///{tmp_path / 'runs.db'}") as store:
        a = get_diff(store, store_diff(store, shared.model_dump(mode="json"), manifest_name="yolov3-tiny"))
        b = get_diff(store, store_diff(store, own.model_dump(mode="json"), manifest_name="yolov3-tiny"))
    md = write_diff_report(a, None, tmp_path / "a.md", "md").read_text()
    assert "| flip | 4 | 4 | 1 | 4.77e-07 | the output is the original's mirrored left-right |" in md
    assert "| distort | 4 | 0 | 0 |" in md and "First divergent op: **flip**" in md
    html = write_diff_report(a, None, tmp_path / "a.html", "html").read_text()
    assert 'id="augmentation"' in html and "First divergent op: <strong>flip</strong>" in html
    md_own = write_diff_report(b, None, tmp_path / "b.md", "md").read_text()
    assert "| flip | mirrored |" in md_own and "First divergent op: **flip**" in md_own
    assert "own draws" in md_own
