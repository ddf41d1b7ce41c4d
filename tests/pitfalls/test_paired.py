"""Tables that cannot contradict themselves: paired statistics over the samples BOTH the reference and a variant
evaluated, with the counts (evaluated, failed, paired n) shown next to them in every table.

The case from the issue: the reference evaluated 17 of 20 samples (10 right: 58.8 %), a variant only 9 (6 right:
66.7 %), with the same predictions on those 9 - so Δ is +0.0 and agreement 100 %, which is right, but only
readable when the table says the Δ is over 9 paired samples.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from repliscope.cli import output
from repliscope.datasets import resolve_dataset
from repliscope.evaluation.record import SamplePrediction
from repliscope.evaluation.run import PreparedRun, RunSettings, prepare
from repliscope.metrics.classification import compute_metrics
from repliscope.ops.pipeline import Pipeline
from repliscope.pitfalls.base import PITFALLS, Derived, Pitfall, PitfallContext, find, rebuild
from repliscope.pitfalls.result import PairedStats, SweepResult, VariantOutcome
from repliscope.pitfalls.stats import paired_predictions
from repliscope.pitfalls.sweep import run_sweep
from repliscope.report import render_sweep_html, render_sweep_markdown
from tests.conftest import LITE0
from tests.report import factories
from tests.report.htmlparse import parse

N = 20
REF_RIGHT = {3, 4, 5, 6, *range(11, 17)}  # 10 of the 17 the reference evaluated


def _pred(i: int, top1: int | None) -> SamplePrediction:
    if top1 is None:
        return SamplePrediction(sample_id=f"s{i:02d}", label=i, error="decode: truncated file")
    return SamplePrediction(
        sample_id=f"s{i:02d}", label=i, topk_indices=[top1, 100, 101, 102, 103], topk_probs=[0.6, 0.1, 0.1, 0.1, 0.1]
    )


def _reference() -> list[SamplePrediction]:
    """Samples 0-2 failed; of the 17 evaluated, 10 are right (58.8 %)."""
    return [_pred(i, None if i < 3 else (i if i in REF_RIGHT else 50)) for i in range(N)]


def _variant() -> list[SamplePrediction]:
    """Samples 0-10 failed (a crop that fails on some images); 11-19 predicted as the reference: 6/9 (66.7 %)."""
    ref = _reference()
    return [_pred(i, None) if i <= 10 else ref[i] for i in range(N)]


def test_the_issue_case_is_paired_on_the_9_samples_both_evaluated() -> None:
    ref, var = _reference(), _variant()
    top1_ref, top1_var = compute_metrics(ref)[0], compute_metrics(var)[0]
    assert (top1_ref.successes, top1_ref.n) == (10, 17) and round(100 * top1_ref.value, 1) == 58.8
    assert (top1_var.successes, top1_var.n) == (6, 9) and round(100 * top1_var.value, 1) == 66.7
    p = paired_predictions(ref, var, [0.0] * 9, 0.0)
    assert p is not None
    assert (p.n, p.n_labelled, p.failed_only_variant, p.failed_only_reference) == (9, 9, 8, 0)
    assert (p.ref_top1, p.var_top1, p.delta_top1) == (6 / 9, 6 / 9, 0.0)
    assert (p.agreement, p.flipped, p.b, p.c, p.mcnemar_p) == (1.0, 0, 0, 0, 1.0)
    assert not p.same_samples
    assert (
        p.pairing_note() == "paired on the 9 samples both evaluated (8 failed only in the variant, 0 only in "
        "the reference)"
    )


def test_failures_on_both_sides_and_discordant_pairs() -> None:
    ref = _reference()
    ref[0] = _pred(0, 0)  # the reference now evaluates sample 0 (right) ...
    var = [_pred(i, None) if i in (4, 5) else _pred(i, i if i % 2 else 77) for i in range(N)]
    var[1] = _pred(1, None)  # ... and sample 1 fails in both
    var[2] = _pred(2, 2)  # sample 2 failed only in the reference
    p = paired_predictions(ref, var, np.full(16, 0.5), 0.25)
    assert p is not None
    # paired: every sample but 1 (failed in both), 2 (only in the reference), 4 and 5 (only in the variant)
    assert (p.n, p.failed_only_reference, p.failed_only_variant) == (16, 1, 2)
    both = [i for i in range(N) if i not in (1, 2, 4, 5)]
    ref_ok = {i for i in both if ref[i].top1 == i}
    var_ok = {i for i in both if var[i].top1 == i}
    assert (p.b, p.c) == (len(ref_ok - var_ok), len(var_ok - ref_ok)) == (5, 4)
    assert (p.ref_top1, p.var_top1) == (9 / 16, 8 / 16) == (len(ref_ok) / 16, len(var_ok) / 16)
    assert p.delta_top1 == pytest.approx(-1 / 16)
    assert p.flipped == sum(ref[i].top1 != var[i].top1 for i in both) and p.mean_kl == 0.5


def test_nothing_in_common_and_misaligned_inputs() -> None:
    ref = _reference()
    var = [_pred(i, None) if i >= 3 else _pred(i, i) for i in range(N)]
    assert paired_predictions(ref, var, [], 0.0) is None
    with pytest.raises(ValueError, match="same samples in the same order"):
        paired_predictions(ref, list(reversed(_variant())), [0.0] * 9, 0.0)
    with pytest.raises(ValueError, match="8 KL values for 9 paired samples"):
        paired_predictions(ref, _variant(), [0.0] * 8, 0.0)


def _issue_sweep() -> SweepResult:
    """The report factory's sweep with the issue's reference and one variant evaluated on fewer samples."""
    ref, var = _reference(), _variant()
    base = factories.sweep()
    reference = base.reference.model_copy(
        update={"metrics": compute_metrics(ref), "evaluated_samples": 17, "failed_samples": 3}
    )
    variant = VariantOutcome(
        name="crop_on_small_images",
        description="Crop that fails on small images",
        change="center_crop 600",
        status="ok",
        metrics=compute_metrics(var),
        paired=paired_predictions(ref, var, [0.0] * 9, 0.0),
        failed_samples=11,
        evaluated_samples=9,
    )
    return base.model_copy(update={"reference": reference, "variants": [variant, *base.variants[3:]]})


def test_html_and_markdown_tables_show_counts_and_paired_n() -> None:
    sweep = _issue_sweep()
    html = render_sweep_html(sweep)
    rows = parse(html).tables["pitfall-table"].rows
    ref, var = rows[0], rows[1]
    assert ref[2:4] == ["17 / 3", "58.82 % (10/17)"] and ref[6] == "—"
    assert var[2:4] == ["9 / 11", "66.67 % (6/9)"]
    assert var[6:11] == ["9", "+0.00 pp", "1", "100.00 %", "0/9"]
    assert var[12] == (
        "ok"
        "11 samples failed; paired on the 9 samples both evaluated (8 failed only in the "
        "variant, 0 only in the reference)"
    )  # status, then the reason in its own <div>
    assert "Δ top-1 (paired)" in html and "paired n" in html
    assert "Everything right of them is paired: over the samples both the reference and the variant evaluated" in html
    md = render_sweep_markdown(sweep)
    line = next(row for row in md.splitlines() if row.startswith("| `crop_on_small_images`"))
    cells = [c.strip() for c in line.split("|")[1:-1]]
    assert cells[2:11] == [
        "9 / 11",
        "66.67 % (6/9)",
        "[35.42, 87.94] %",
        "66.67 % (6/9)",
        "9",
        "+0.00 pp",
        "1",
        "100.00 %",
        "0/9",
    ]
    assert cells[12].endswith(
        "paired on the 9 samples both evaluated (8 failed only in the variant, 0 only in the reference)"
    )


def test_json_carries_the_counts() -> None:
    data = _issue_sweep().model_dump(mode="json")
    variant = data["variants"][0]
    assert (variant["evaluated_samples"], variant["failed_samples"]) == (9, 11)
    assert {
        k: variant["paired"][k]
        for k in ("n", "n_labelled", "failed_only_variant", "failed_only_reference", "delta_top1")
    } == {"n": 9, "n_labelled": 9, "failed_only_variant": 8, "failed_only_reference": 0, "delta_top1": 0.0}
    old = SweepResult.model_validate(factories.sweep().model_dump(mode="json"))  # fields default when absent
    stored_before = old.variants[0].paired.model_dump() if old.variants[0].paired else {}
    for key in ("n_labelled", "ref_top1", "var_top1", "failed_only_reference", "failed_only_variant"):
        stored_before.pop(key)
    assert PairedStats.model_validate(stored_before).failed_only_variant == 0


@pytest.mark.parametrize("width", [80, 160])
def test_cli_sweep_table_shows_counts_and_warns(monkeypatch: pytest.MonkeyPatch, width: int) -> None:
    monkeypatch.setattr(output.console, "_width", width)  # restored to None: the console follows COLUMNS again
    with output.console.capture() as cap:
        output.print_sweep(_issue_sweep())
    text = cap.get()
    assert "…" not in text  # no number is cut, even at 80 columns (a long variant name wraps there)
    lines = [line.split() for line in text.splitlines() if len(line.split()) > 1]
    variants = {"referenc", "crop_on_", "resize_a", "float16_"}  # a name's start: it wraps at 80 columns
    rows = {cells[1]: cells[1:] for cells in lines if cells[0][:8] in variants}  # by n/fail
    # the house's numbers (repliscope.number_text): 66.67 %, [35.42, 87.94] %, +0.00 pp
    crop = ["9/11", "66.67", "%", "[35.42,", "87.94]", "%", "9", "+0.00", "pp", "1", "100.00", "%", "0", "0"]
    assert rows["9/11"] == crop
    assert rows["17/3"] == ["17/3", "58.82", "%", "[36.01,", "78.39]", "%"]
    assert rows["n/a"] == ["n/a"] and rows["failed"] == ["failed"]
    flat = " ".join(text.split())
    assert (
        "warning: crop_on_small_images: paired on the 9 samples both evaluated (8 failed only in the variant, "
        "0 only in the reference); its top-1 and the reference's are over different samples, Δ is not their "
        "difference"
    ) in flat
    assert "Paired against the reference on the samples both evaluated (pairs)" in flat


class _ResizeNoCrop(Pitfall):
    """Shorter side to the model size, no crop: square images fit, the others fail (wrong shape)."""

    name = "test_resize_no_crop"
    description = "Resize the shorter side to the input size and drop the crop"

    def derive(self, base: Pipeline, ctx: PitfallContext) -> Derived:
        i, j = find(base, "resize"), find(base, "center_crop")
        pipe = base.replace_pre(i, rebuild(base.pre_ops[i], size=ctx.input_hw[0])).remove_pre(j)
        return Derived(pipe, "resize shorter side 224, center_crop removed")


@pytest.fixture(scope="module")
def prepared() -> PreparedRun:
    return prepare(LITE0, RunSettings(runtime="onnxruntime", threads=2, batch_size=4))


def test_sweep_with_a_variant_failing_on_some_images(
    prepared: PreparedRun, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """3 square images, 3 cut to 512x400 (the variant cannot make 224x224 of them), 1 corrupt file (fails in
    both): the variant evaluates 3, the reference 6, paired n is 3 and every paired number is over those 3."""
    monkeypatch.setitem(PITFALLS._items, _ResizeNoCrop.name, _ResizeNoCrop)
    folder = tmp_path / "imgs"
    folder.mkdir()
    for k, smp in enumerate(resolve_dataset("foolbox_imagenet", limit=6).samples):
        if k < 3:
            (folder / smp.id).write_bytes(smp.read())
        else:
            buf = io.BytesIO()
            Image.open(io.BytesIO(smp.read())).crop((0, 0, 512, 400)).save(buf, format="PNG")
            (folder / smp.id.replace(".jpg", ".png")).write_bytes(buf.getvalue())
    (folder / "imagenet_99_1.jpg").write_bytes(b"not a jpeg")
    out = run_sweep(prepared, resolve_dataset(str(folder), "filename_index"), [_ResizeNoCrop.name], visual_samples=1)
    ref, var = out.result.reference, out.result.outcome(_ResizeNoCrop.name)
    assert (ref.evaluated_samples, ref.failed_samples) == (6, 1)
    assert (var.evaluated_samples, var.failed_samples) == (3, 4)
    p = var.paired
    assert p is not None and (p.n, p.failed_only_variant, p.failed_only_reference) == (3, 3, 0)
    records = {rec.variant: rec for rec in out.records}
    both = [
        (a, b)
        for a, b in zip(records["reference"].samples, records[_ResizeNoCrop.name].samples, strict=True)
        if a.error is None and b.error is None
    ]
    assert [a.sample_id for a, _ in both] == ["imagenet_00_243.jpg", "imagenet_01_559.jpg", "imagenet_02_438.jpg"]
    ref_right = sum(a.top1 == a.label for a, _ in both)
    var_right = sum(b.top1 == b.label for _, b in both)
    assert p.delta_top1 == pytest.approx((var_right - ref_right) / 3)
    assert p.agreement == sum(a.top1 == b.top1 for a, b in both) / 3
    assert len(out.result.reference.metrics) == 2 and ref.metric("top1") is not None
    assert ref.metric("top1").n == 6 and var.metric("top1").n == 3  # type: ignore[union-attr]
    failed = [s.error for s in records[_ResizeNoCrop.name].samples if s.error]
    assert sum("does not match the model input (3, 224, 224)" in e for e in failed) == 3
