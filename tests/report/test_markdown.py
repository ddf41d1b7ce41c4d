"""Markdown reports: headings, anchors, table rows, decodable images (embedded or written beside the file)."""

from __future__ import annotations

import re
from pathlib import Path

from PIL import Image

from repliscope.evaluation.record import EvaluationRecord
from repliscope.pitfalls.result import SweepResult
from repliscope.report import render_run_markdown, render_sweep_markdown
from repliscope.report.markdown import files_sink, squeeze_blank_lines
from repliscope.report.templating import md_fenced
from tests.report import factories
from tests.report.images import decode_data_uri

_IMAGE = re.compile(r"!\[([^\]]*)\]\(([^)\s]+)\)")


def _table_rows(md: str, header_start: str) -> list[list[str]]:
    """Body rows of the Markdown table whose header line starts with ``header_start`` (cells split on unescaped
    pipes)."""
    lines = md.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header_start))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line)[1:-1]])
    return rows


def test_sweep_headings_and_anchors(sweep_result: SweepResult, sweep_records: dict[str, EvaluationRecord]) -> None:
    md = render_sweep_markdown(sweep_result, sweep_records)
    assert md.startswith("# efficientnet-lite0 1.0.0: pitfall sweep\n")
    headings = re.findall(r"^## (.+)$", md, re.MULTILINE)
    assert headings == [
        "Claim",
        "Measured metrics (reference)",
        "Pitfalls",
        "Δ top-1 per variant",
        "Visual testing",
        "Provenance",
    ]
    assert re.findall(r'<a id="([a-z-]+)"></a>', md) == [
        "claim",
        "metrics",
        "pitfalls",
        "deltas",
        "visual",
        "provenance",
    ]
    assert "\n\n\n" not in md.split("```yaml")[0]


def test_run_headings(run_record: EvaluationRecord) -> None:
    md = render_run_markdown(run_record)
    assert re.findall(r"^## (.+)$", md, re.MULTILINE) == [
        "Claim",
        "Measured metrics",
        "Failed and misclassified samples",
        "Latency",
        "Provenance",
    ]
    assert "- **NOT COMPARABLE** — top1 75.10 % claimed on imagenet-1k/val" in md
    assert _table_rows(md, "| metric |")[0] == ["top1", "89.47 %", "[68.61, 97.06] %", "17/19"]
    assert len(_table_rows(md, "| sample |")) == 3


def test_pitfall_table_rows(sweep_result: SweepResult) -> None:
    md = render_sweep_markdown(sweep_result)
    rows = _table_rows(md, "| variant | the one change |")
    assert len(rows) == 1 + len(sweep_result.variants)
    assert rows[0][0] == "**reference**"
    assert rows[1] == [
        "`color_layout_swapped`",
        "decode channels RGB -> BGR",
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
        "ok",
    ]
    assert rows[2][8] == "<0.0001 \\*"
    assert rows[4][12].startswith("*not applicable*: resize uses pillow")
    assert rows[5][12].startswith("*failed*: onnxruntime")


def test_embedded_images_decode(sweep_result: SweepResult, run_record: EvaluationRecord) -> None:
    md = render_sweep_markdown(sweep_result)
    images = _IMAGE.findall(md)
    assert len(images) == 1 + 1 + 2 * (1 + 6)  # claim, deltas, per panel a colour scale and 6 pictures
    assert md.count("| threads_changed | same as reference | — | top-1 243 (bull_mastiff), 70.00 % |") == 1
    for alt, src in images:
        assert alt
        decode_data_uri(src)
    run_images = _IMAGE.findall(render_run_markdown(run_record))
    assert len(run_images) == 2  # claim plot and latency
    for _, src in run_images:
        decode_data_uri(src)


def test_images_as_files_beside_the_markdown(sweep_result: SweepResult, tmp_path: Path) -> None:
    md = render_sweep_markdown(sweep_result, sink=files_sink(tmp_path / "r_files", "r_files"))
    srcs = [src for _, src in _IMAGE.findall(md)]
    assert len(srcs) == 16 and not any(s.startswith("data:") for s in srcs)
    for src in srcs:
        assert src.startswith("r_files/") and src.endswith(".png")
        with Image.open(tmp_path / src) as image:
            assert image.format == "PNG" and image.width > 0


def test_user_strings_cannot_inject_html(sweep_result: SweepResult) -> None:
    md = render_sweep_markdown(sweep_result)
    outside_code = re.sub(r"```yaml\n.*?\n```", "", md, flags=re.DOTALL)
    assert "<script" not in outside_code and "<img" not in outside_code
    assert "&lt;script>alert('pwned')&lt;/script>&lt;img src=x onerror=alert(1)>" in outside_code
    assert f'description: "EfficientNet-Lite0 (ReLU6). {factories.INJECTION}"' in md  # verbatim in the code block


def test_table_cells_escape_pipes(sweep_result: SweepResult) -> None:
    odd = sweep_result.variants[0].model_copy(update={"change": "a | b\nc"})
    md = render_sweep_markdown(sweep_result.model_copy(update={"variants": [odd, *sweep_result.variants[1:]]}))
    assert _table_rows(md, "| variant | the one change |")[1][1] == "a | b c"


def test_fence_is_longer_than_any_backtick_run() -> None:
    block = md_fenced("a ``` b\n````", "yaml")
    assert block.startswith("`````yaml\n") and block.endswith("\n`````")


def test_blank_lines_are_squeezed_outside_code_only() -> None:
    text = "a\n\n\n\nb\n```\nx\n\n\n\ny\n```\n\n\nc\n"
    assert squeeze_blank_lines(text) == "a\n\nb\n```\nx\n\n\n\ny\n```\n\nc\n"
