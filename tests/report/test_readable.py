"""Reports a person can read (issue 7, item 9): a colour scale on the heatmaps, each variant's prediction under
its card, the claim against the measured interval with a warning when the interval is wide, a pitfall table that
fits its column, sweep Markdown with images as files, and honest timings (load and warm-up apart)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from repliscope.evaluation.record import EvaluationRecord, Timings
from repliscope.pitfalls.result import SweepResult
from repliscope.report import render_run_html, render_run_markdown, render_sweep_html, write_report
from repliscope.report.sections import interval_warning
from repliscope.store.repository import RunStore
from tests.report import factories
from tests.report.htmlparse import parse
from tests.report.images import decode_data_uri
from tests.report.test_write_and_cli import _app

WIDE = "n = 20 gives ±14 pt: too few samples to judge the claim"


def _section(html: str, name: str) -> str:
    found = re.search(rf'<section id="{name}">(.*?)</section>', html, re.DOTALL)
    assert found is not None
    return found.group(1)


def test_each_panel_has_a_colour_scale_for_its_heatmaps(sweep_result: SweepResult) -> None:
    html = render_sweep_html(sweep_result)
    visual = _section(html, "visual")
    scales = re.findall(r'<div class="colorbar"><img src="([^"]+)" alt="([^"]+)"></div>', visual)
    assert len(scales) == 2
    for src, alt in scales:
        assert alt == "colour scale of the difference heatmaps: black 0, yellow ≥ 63.8"
        width, height = decode_data_uri(src).size
        assert width > 3 * height  # a horizontal bar
    # a sweep stored before the scale was recorded has no colour scale, and still renders
    old_panels = [
        p.model_copy(update={"entries": [e.model_copy(update={"diff_scale": None}) for e in p.entries]})
        for p in sweep_result.visual
    ]
    old = render_sweep_html(sweep_result.model_copy(update={"visual": old_panels}))
    assert 'class="colorbar"' not in old


def test_each_card_shows_the_variants_prediction(sweep_result: SweepResult) -> None:
    html = render_sweep_html(sweep_result)
    panels = re.findall(r'<div class="panel">(.*?)</div>\n</div>\n</div>', html, re.DOTALL)
    assert len(panels) == 2
    first = re.findall(r'<div class="name">([^<]+)</div>.*?<p class="prediction">([^<]+)</p>', panels[0], re.DOTALL)
    assert first == [
        ("reference", "top-1 243 (bull_mastiff), 70.00 %"),
        ("color_layout_swapped", "top-1 242 (boxer), 42.00 %"),
        ("data_layout_bug", "top-1 111 (nematode), 42.00 %"),
        ("threads_changed", "top-1 243 (bull_mastiff), 70.00 %"),
        ("no_center_crop", "top-1 243 (bull_mastiff), 55.00 %"),
    ]
    second = re.findall(r'<p class="prediction">([^<]+)</p>', panels[1])
    assert second[0] == "top-1 436 (beach_wagon), 70.00 %"  # the reference's miss on imagenet_06_609
    assert second[1] == "top-1 609 (jeep), 42.00 %"  # the swapped variant gets it right


def test_failed_sample_says_so_under_its_card(sweep_result: SweepResult) -> None:
    panel = sweep_result.visual[0]
    failed = panel.entries[1].model_copy(
        update={"top1": None, "top1_prob": None, "note": "sample failed: decode: truncated"}
    )
    visual = [panel.model_copy(update={"entries": [panel.entries[0], failed, *panel.entries[2:]]})]
    html = render_sweep_html(sweep_result.model_copy(update={"visual": visual}))
    assert '<p class="prediction">no prediction (the sample failed)</p>' in html


def test_claim_plot_and_wide_interval_warning(run_record: EvaluationRecord, sweep_result: SweepResult) -> None:
    for html in (render_run_html(factories.record()), render_sweep_html(sweep_result)):
        claim = _section(html, "claim")
        assert f'<p class="warning">⚠ {WIDE}</p>' in claim
        figure = re.search(r'<figure class="claim-figure">\s*<img src="([^"]+)" alt="([^"]+)">', claim)
        assert figure is not None and figure.group(2) == "Claim against the measured interval"
        decode_data_uri(figure.group(1))
        assert "Diamond: the claimed value; dot and bar: the measured value and its 95 % Wilson interval" in claim
    md = render_run_markdown(run_record)  # 19 evaluated: [68.6 %, 97.1 %]
    assert "  - **Warning:** n = 19 gives ±14 pt: too few samples to judge the claim" in md
    assert "![Claim against the measured interval](data:image/png;base64," in md


def test_interval_warning_threshold() -> None:
    assert interval_warning(0.70, 0.74, 1800) is None  # ±2.0 pt: narrow enough
    assert interval_warning(0.70, 0.7402, 1790) == "n = 1790 gives ±2 pt: too few samples to judge the claim"
    assert interval_warning(0.55, 0.75, None) == "the 95 % interval is ±10 pt: too few samples to judge the claim"
    assert interval_warning(None, 0.75, 50) is None


def test_no_claim_no_plot(run_record: EvaluationRecord) -> None:
    html = render_run_html(run_record.model_copy(update={"claims": []}))
    assert "claim-figure" not in html and "The manifest makes no claim." in html


def test_pitfall_table_fits_its_column(sweep_result: SweepResult) -> None:
    long_name = sweep_result.variants[0].model_copy(
        update={"name": "a_very_long_variant_name_" * 4, "change": "x" * 120}
    )
    html = render_sweep_html(sweep_result.model_copy(update={"variants": [long_name, *sweep_result.variants[1:]]}))
    # the table sits in a wrapper that scrolls inside the page instead of widening it
    assert re.search(r'<div class="table-wrap">\s*<table id="pitfall-table" class="pitfalls">', html)
    assert ".table-wrap { max-width: 100%; overflow-x: auto; }" in html
    assert "table.pitfalls { width: 100%; font-size: 12.5px; }" in html
    assert "table.pitfalls th { white-space: normal; vertical-align: bottom; }" in html
    assert (
        "table.pitfalls td.name, table.pitfalls td.change, table.pitfalls td.status-cell { overflow-wrap: anywhere; }"
    ) in html
    body = _section(html, "pitfalls")
    rows = re.findall(
        r"<tr class=\"[a-z]+\" data-variant=\"[^\"]+\">\n<td class=\"name\">.*?\n<td class=\"change\">", body
    )
    assert len(rows) == 1 + len(sweep_result.variants)  # every name and change cell may wrap
    assert "a_very_long_variant_name_" * 4 in body


def test_sweep_markdown_writes_images_as_files_by_default(sweep_result: SweepResult, tmp_path: Path) -> None:
    md = write_report(sweep_result, "md", tmp_path / "sweep.md")
    text = md.read_text(encoding="utf-8")
    files = sorted((tmp_path / "sweep_files").glob("*.png"))
    assert len(files) == 16 and "data:image" not in text
    png_bytes = sum(f.stat().st_size for f in files)
    embedded = write_report(sweep_result, "md", tmp_path / "embedded.md", images="embed")
    assert not (tmp_path / "embedded_files").exists()
    # base64 is 4/3 of the bytes: the embedded file carries every PNG, the default one only links them
    assert embedded.stat().st_size > 4 * png_bytes // 3 > 10 * md.stat().st_size
    assert md.stat().st_size < 20_000
    run = write_report(factories.record(), "md", tmp_path / "run.md")  # a run's 2 charts stay embedded
    assert run.read_text(encoding="utf-8").count("](data:image/png;base64,") == 2
    assert not (tmp_path / "run_files").exists()


def test_cli_sweep_markdown_default_is_files(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/r.db"
    store = RunStore(url)
    sweep = factories.sweep()
    store.save_sweep(sweep)
    out = tmp_path / "s.md"
    result = CliRunner().invoke(_app(), ["report", sweep.sweep_id, "-f", "md", "-o", str(out), "--db", url])
    assert result.exit_code == 0, result.output
    assert len(list((tmp_path / "s_files").glob("*.png"))) == 16
    bad = CliRunner().invoke(_app(), ["report", sweep.sweep_id, "--images", "inline", "--db", url])
    assert bad.exit_code == 2 and "unknown --images 'inline' (allowed: auto, embed, files)" in bad.output


def _latency_stats(html: str) -> dict[str, str]:
    latency = _section(html, "latency")
    return dict(re.findall(r"<tr><th>([^<]+)</th><td[^>]*>([^<]+)</td></tr>", latency))


def test_run_report_separates_load_and_warmup() -> None:
    record = factories.record()
    timings = Timings(
        total_seconds=17.0,
        inference_seconds=0.64,
        batch_latencies_seconds=[0.29, 0.18, 0.17],
        throughput_samples_per_second=20 / 1.93,
        load_seconds=14.9,
        warmup_seconds=0.17,
        loop_seconds=1.93,
    )
    stats = _latency_stats(render_run_html(record.model_copy(update={"timings": timings})))
    assert stats["total"] == "17 s"
    assert stats["model load (build, conversion, session)"] == "14.9 s"
    assert stats["warm-up (one batch, not measured)"] == "0.17 s"
    assert stats["measured loop"] == "1.93 s"
    assert stats["throughput (measured loop)"] == "10.4 samples/s"
    old = _latency_stats(render_run_html(record))  # stored before the split: loop_seconds is None
    assert old["total (model load included)"] == "1.93 s" and "measured loop" not in old
    assert stats["inference (in the measured loop)"] == "0.64 s"
    # data_parallel workers each time their runtime: the sum can exceed the loop's wall time, and says so
    parallel = record.model_copy(
        update={
            "timings": timings,
            "options": {
                **record.options,
                "schedule": "data_parallel",
                "plan": {"schedule": "data_parallel", "workers": 2},
            },
        }
    )
    assert (
        _latency_stats(render_run_html(parallel))["inference (in the measured loop summed over 2 workers)"] == "0.64 s"
    )


@pytest.mark.parametrize("key", ["load_seconds", "warmup_seconds", "loop_seconds"])
def test_sweep_provenance_lists_the_timings(sweep_result: SweepResult, key: str) -> None:
    timings = {**sweep_result.timings, "load_seconds": 5.0, "warmup_seconds": 0.4, "loop_seconds": 2.1}
    html = render_sweep_html(sweep_result.model_copy(update={"timings": timings}))
    assert key in " ".join(parse(html).text)
