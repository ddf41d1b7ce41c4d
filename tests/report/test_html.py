"""HTML reports, checked by parsing them: sections, embedded images, the pitfall table, escaping, offline."""

from __future__ import annotations

import re

import numpy as np
import pytest

from repliscope.evaluation.record import EvaluationRecord
from repliscope.pitfalls.result import SweepResult
from repliscope.report import render_run_html, render_sweep_html
from repliscope.report.figures import png_data_uri
from tests.report import factories
from tests.report.htmlparse import parse
from tests.report.images import decode_data_uri

RUN_SECTIONS = ["claim", "metrics", "failures", "latency", "provenance"]
SWEEP_SECTIONS = ["claim", "metrics", "pitfalls", "deltas", "visual", "provenance"]


def _png(width: int = 32, height: int = 24) -> bytes:
    from io import BytesIO

    from PIL import Image

    buf = BytesIO()
    Image.fromarray(np.full((height, width, 3), 200, dtype=np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


@pytest.fixture
def sweep_html(sweep_result: SweepResult, sweep_records: dict[str, EvaluationRecord]) -> str:
    return render_sweep_html(sweep_result, sweep_records)


@pytest.fixture
def run_html(run_record: EvaluationRecord) -> str:
    return render_run_html(run_record)


def _assert_offline(html: str) -> None:
    page = parse(html)
    assert page.scripts == [], "a report needs no script"
    assert page.links == [], "no <link> (stylesheets, fonts, icons)"
    assert not re.search(r"""(src|srcset)\s*=\s*["']?\s*(https?:)?//""", html, re.IGNORECASE)
    assert not re.search(r"@import|url\(\s*['\"]?(https?:)?//", html, re.IGNORECASE)
    for img in page.images:
        assert img["src"].startswith("data:image/png;base64,")


def test_sweep_report_has_every_section_in_order(sweep_html: str) -> None:
    page = parse(sweep_html)
    sections = [i for i in page.ids if i in SWEEP_SECTIONS]
    assert sections == SWEEP_SECTIONS
    assert "layer-diff" not in page.ids  # only with extra figures
    assert sweep_html.startswith("<!DOCTYPE html>")


def test_run_report_has_every_section_in_order(run_html: str) -> None:
    page = parse(run_html)
    assert [i for i in page.ids if i in RUN_SECTIONS] == RUN_SECTIONS
    assert not {"pitfalls", "deltas", "visual"} & set(page.ids)


def test_every_image_is_an_embedded_png(sweep_html: str, run_html: str) -> None:
    sweep_page = parse(sweep_html)
    # claim plot + deltas chart + 2 panels x (colour scale + reference input + 3 variant inputs + 2 heatmaps)
    assert len(sweep_page.images) == 1 + 1 + 2 * (1 + 4 + 2)
    assert sweep_page.images_by_section == {"claim": 1, "deltas": 1, "visual": 14}
    for img in sweep_page.images:
        decode_data_uri(img["src"])
        assert img["alt"]
    run_page = parse(run_html)
    assert run_page.images_by_section == {"claim": 1, "latency": 1}
    for img in run_page.images:
        decode_data_uri(img["src"])


def test_visual_panel_images_are_the_sweeps_pngs(sweep_result: SweepResult, sweep_html: str) -> None:
    page = parse(sweep_html)
    srcs = {img["src"] for img in page.images}
    entry = sweep_result.visual[0].entries[1]
    assert f"data:image/png;base64,{entry.image_png}" in srcs
    assert f"data:image/png;base64,{entry.diff_png}" in srcs
    assert decode_data_uri(f"data:image/png;base64,{entry.image_png}").size == (48, 48)


def test_pitfall_table_has_one_row_per_variant_and_the_reference(sweep_result: SweepResult, sweep_html: str) -> None:
    table = parse(sweep_html).tables["pitfall-table"]
    names = [a["data-variant"] for a in table.row_attrs]
    assert names == ["reference"] + [v.name for v in sweep_result.variants]
    assert len(table.rows) == 1 + len(sweep_result.variants) == 6
    assert all(len(row) == 13 for row in table.rows)
    by_name = dict(zip(names, table.rows, strict=True))
    ref = by_name["reference"]
    assert ref[2:6] == ["20 / 0", "90.00 % (18/20)", "[69.90, 97.21] %", "95.00 % (19/20)"]
    assert ref[6:12] == ["—"] * 6
    swapped = by_name["color_layout_swapped"]
    assert swapped[1] == "decode channels RGB -> BGR"
    assert swapped[2:12] == [
        "20 / 0",
        "80.00 % (16/20)",
        "[58.40, 91.93] %",
        "85.00 % (17/20)",
        "20",
        "-10.00 pp",
        "0.625",
        "75.00 %",
        "5/20",
        "0.1843",
    ]
    assert swapped[12] == "ok"
    bug = by_name["data_layout_bug"]
    assert bug[3] == "0.00 % (0/20)" and bug[7] == "-90.00 pp" and bug[8] == "<0.0001 *" and bug[10] == "20/20"
    assert by_name["no_center_crop"][7:9] == ["-5.00 pp", "1"]


def test_not_applicable_and_failed_rows_show_their_reason(sweep_html: str) -> None:
    table = parse(sweep_html).tables["pitfall-table"]
    rows = {a["data-variant"]: (a["class"], row) for a, row in zip(table.row_attrs, table.rows, strict=True)}
    css, row = rows["resize_antialias_off"]
    assert css == "na"
    assert row[12].startswith("not applicable")
    assert "resize uses pillow, which always antialiases when downscaling" in row[12]
    assert row[2:12] == ["—"] * 10
    css, row = rows["float16_inference"]
    assert css == "failed" and "no float16 kernel for Conv" in row[12]
    assert re.search(r"tr\.na td \{ color: #9aa3ab;", sweep_html)  # greyed by the stylesheet


def test_significance_is_marked(sweep_html: str) -> None:
    assert re.search(r'<td class="num sig">&lt;0.0001 \*</td>', sweep_html)
    assert '<td class="num sig">0.625' not in sweep_html


def test_claim_verdict_reason_and_source(sweep_html: str, run_html: str) -> None:
    for html in (sweep_html, run_html):
        text = " ".join(parse(html).text)
        assert "not comparable" in text
        assert "the evaluated data 'foolbox_imagenet' is not declared to be that dataset" in text
        assert 'class="claim-card neutral"' in html
    assert (
        "https://github.com/tensorflow/tpu/tree/master/models/official/efficientnet/lite" in parse(sweep_html).anchors
    )


def test_claim_colours_follow_the_verdict(run_record: EvaluationRecord) -> None:
    narrow = {"ci_low": 0.885, "ci_high": 0.905}  # a "consistent" inside ±2 pt (wider: shown "not comparable")
    claims = [run_record.claims[0].model_copy(update={"verdict": v, **narrow}) for v in ("consistent", "inconsistent")]
    html = render_run_html(run_record.model_copy(update={"claims": claims}))
    assert 'class="claim-card ok"' in html and 'class="claim-card bad"' in html


def test_metrics_with_wilson_intervals(run_html: str) -> None:
    rows = parse(run_html).tables["metrics-table"].rows
    # the run fixture has one failed sample: 17/19 correct
    assert rows[0] == ["top1", "89.47 %", "[68.61, 97.06] %", "17/19"]
    assert rows[1][0] == "top5"


def test_provenance_pipeline_runtime_and_manifest(sweep_html: str, run_html: str) -> None:
    for html in (sweep_html, run_html):
        page = parse(html)
        pipeline = page.tables["pipeline-table"].rows
        assert len(pipeline) == 7 + 3
        assert pipeline[1] == [
            "preprocess",
            "1",
            "resize",
            "size=256, keep_aspect_ratio=true, method=bicubic, antialias=true",
            "pillow",
            "13.0.0",
        ]
        assert "fraction=none" in pipeline[2][3]
        text = " ".join(page.text)
        assert "exported from torch to ONNX with torch.onnx.export(dynamo=True) (opset 18" in text
        assert "3c07c2cd3d2f585a79f3e32b6a53e38efa52802cf1eb2d239996f4872b502161" in text
        assert "99bb2a439b0b352c4bcc7b70e841ca21fb2af45d2dede8b9cd5648b90586ac7d" in text  # dataset identity
        assert "AMD EPYC" in text and "onnxruntime" in text and "libgomp.so.1" in text
        assert "manifest-text" in page.ids
        assert re.search(
            r'<details id="manifest-text"><summary>Manifest text</summary>\s*<pre>name: efficientnet', html
        )


def test_user_strings_are_escaped(sweep_html: str, run_html: str) -> None:
    for html in (sweep_html, run_html):
        assert factories.INJECTION not in html
        assert "<script" not in html.lower()
        assert "onerror=alert(1)>" not in html
        assert "&lt;script&gt;alert(&#39;pwned&#39;)&lt;/script&gt;" in html  # description and manifest text
        assert html.count("&lt;script&gt;") == 2
        page = parse(html)
        assert factories.INJECTION in " ".join(page.text)  # shown as text


def test_variant_strings_are_escaped(sweep_result: SweepResult) -> None:
    evil = sweep_result.variants[0].model_copy(update={"change": "<b onmouseover=x>", "reason": "</td><td>x"})
    html = render_sweep_html(sweep_result.model_copy(update={"variants": [evil, *sweep_result.variants[1:]]}))
    assert "<b onmouseover" not in html and "</td><td>x" not in html
    assert len(parse(html).tables["pitfall-table"].rows[1]) == 13


def test_reports_open_offline(sweep_html: str, run_html: str) -> None:
    _assert_offline(sweep_html)
    _assert_offline(run_html)


def test_run_failures_list(run_html: str) -> None:
    rows = parse(run_html).tables["failures-table"].rows
    assert rows[0][0] == "imagenet_03_990.jpg" and "truncated JPEG" in rows[0][4]
    assert [r[0] for r in rows[1:]] == ["imagenet_06_609.jpg", "imagenet_07_609.jpg"]
    assert rows[1][1:3] == ["609 (jeep)", "436 (beach_wagon)"]
    assert "2 of 19 labelled samples have a wrong top-1 prediction; 1 of 20 samples failed." in run_html


def test_flipped_samples_need_the_records(sweep_result: SweepResult, sweep_html: str) -> None:
    assert "imagenet_00_243.jpg: 243 (bull_mastiff) → 242 (boxer); label 243 (bull_mastiff)" in sweep_html
    assert "… and 10 more" in sweep_html
    assert "samples whose top-1 changed" not in render_sweep_html(sweep_result)


def test_deltas_note_lists_the_variants_that_did_not_run(sweep_html: str) -> None:
    note = re.search(r'<section id="deltas">(.*?)</section>', sweep_html, re.DOTALL)
    assert note is not None
    assert "Not shown (did not run): resize_antialias_off (not applicable" in note.group(1)
    assert "float16_inference (failed" in note.group(1)


def test_unlabelled_sweep_charts_changed_predictions(sweep_result: SweepResult) -> None:
    variants = [
        v.model_copy(
            update={"paired": v.paired.model_copy(update={"delta_top1": None, "mcnemar_p": None, "b": None, "c": None})}
        )
        if v.paired
        else v
        for v in sweep_result.variants
    ]
    html = render_sweep_html(sweep_result.model_copy(update={"variants": variants, "claims": []}))
    page = parse(html)
    assert "Predictions changed per variant (no labels)" in html
    assert page.images_by_section["deltas"] == 1
    assert "The manifest makes no claim." in html


def test_sweep_where_nothing_ran(sweep_result: SweepResult) -> None:
    variants = [v for v in sweep_result.variants if v.status != "ok"]
    html = render_sweep_html(sweep_result.model_copy(update={"variants": variants, "visual": []}))
    page = parse(html)
    assert "deltas" not in page.images_by_section
    assert "This sweep recorded no visual panels." in html
    assert len(page.tables["pitfall-table"].rows) == 3


def test_layer_diff_hook_embeds_extra_figures(run_record: EvaluationRecord, sweep_result: SweepResult) -> None:
    extra = [("Layer-by-layer max |diff|: torch vs onnxruntime", _png()), ("Second <figure>", _png(10, 10))]
    for html in (render_run_html(run_record, extra), render_sweep_html(sweep_result, extra_figures=extra)):
        page = parse(html)
        assert "layer-diff" in page.ids
        assert page.images_by_section["layer-diff"] == 2
        assert png_data_uri(_png()) in {img["src"] for img in page.images}
        assert "Second &lt;figure&gt;" in html


def test_corrupt_visual_png_shows_a_placeholder(sweep_result: SweepResult) -> None:
    panel = sweep_result.visual[0]
    broken = panel.entries[1].model_copy(update={"image_png": "bm90IGEgcG5n"})  # base64 of "not a png"
    visual = [panel.model_copy(update={"entries": [panel.entries[0], broken, *panel.entries[2:]]})]
    html = render_sweep_html(sweep_result.model_copy(update={"visual": visual}))
    assert "input not available" in html
    for img in parse(html).images:
        decode_data_uri(img["src"])


def test_a_variant_run_names_its_sweep(sweep_records: dict[str, EvaluationRecord]) -> None:
    html = render_run_html(sweep_records[factories.VARIANT_RUN_IDS["data_layout_bug"]])
    assert "<h1>efficientnet-lite0 1.0.0 · variant data_layout_bug of sweep 5e2f0c1d9a8b</h1>" in html


def test_a_variant_with_the_reference_input_is_not_pictured_again(sweep_html: str) -> None:
    assert sweep_html.count("input identical to the reference (max |Δ| 0): images not repeated") == 2
    assert sweep_html.count('alt="threads_changed input of') == 0
