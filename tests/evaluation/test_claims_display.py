"""A verdict reads the same everywhere (issue 35): the HTML and Markdown reports and the run page's claims table
show the direction and how the samples were chosen, and a record judged before the interval-width rule is never
shown as a green "consistent" above its own "too few samples" warning."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

from repliscope.evaluation.claims import judge_claim, sample_selection
from repliscope.evaluation.record import ClaimVerdict, EvaluationRecord
from repliscope.manifest.schema import ClaimSpec, DatasetRef
from repliscope.metrics.intervals import wilson_interval
from repliscope.records.evaluation import MetricValue
from repliscope.report import render_run_html, render_run_markdown
from repliscope.report.sections import claim_rows, shown_verdict
from tests.report import factories

VAL = DatasetRef(name="imagenet-1k", split="val")
CLAIM = ClaimSpec(metric="top1", value=75.1, dataset=VAL, source="paper")


def _claim_section(html: str) -> str:
    found = re.search(r'<section id="claim">(.*?)</section>', html, re.DOTALL)
    assert found is not None
    return found.group(1)


def _with_claim(claim: ClaimVerdict) -> EvaluationRecord:
    return factories.record().model_copy(update={"claims": [claim]})


def _falls_short_on_a_limit() -> ClaimVerdict:
    """600 of the first 1,000 right (--limit 1000): 60 % [56.9 %, 63.0 %] falls short of 75.1 %."""
    low, high = wilson_interval(600, 1000)
    metric = MetricValue(name="top1", value=0.6, ci_low=low, ci_high=high, n=1000, successes=600)
    return judge_claim(CLAIM, metric, VAL, "val-folder", sampling=sample_selection(1000, VAL, limit=1000))


def test_an_old_wide_consistent_record_is_shown_not_comparable() -> None:
    """The issue's 20-image Lite0 record as stored before the rule: "consistent" inside [69.9 %, 97.2 %]."""
    low, high = wilson_interval(18, 20)
    stored = ClaimVerdict(
        metric="top1",
        claimed=0.751,
        measured=0.9,
        ci_low=low,
        ci_high=high,
        claim_dataset="imagenet-1k/val",
        evaluated_dataset="foolbox_imagenet (as imagenet-1k/val)",
        verdict="consistent",
        reason="claimed 75.10 % is inside the 95 % interval [69.90, 97.21] % of the measured 90.00 % (n=20)",
        source="paper",
    )
    verdict, reason = shown_verdict(stored.model_dump())
    assert verdict == "not comparable"
    assert reason.startswith("too few samples to judge: the interval is ±13.7 pt and a verdict needs ±2 pt")
    assert reason.endswith(
        "(recorded as consistent before that rule: claimed 75.10 % is inside the 95 % interval "
        "[69.90, 97.21] % of the measured 90.00 % (n=20))"
    )
    section = _claim_section(render_run_html(_with_claim(stored)))
    assert 'class="claim-card ok"' not in section and 'class="verdict ok"' not in section
    assert '<span class="verdict neutral">not comparable</span>' in section
    assert "too few samples to judge the claim" in section  # the warning, now under a neutral verdict
    assert "- **NOT COMPARABLE** — top1 75.10 % claimed" in render_run_markdown(_with_claim(stored))
    assert 'class="direction"' not in section  # a direction goes with a judged verdict only


def test_the_report_gives_direction_and_sampling() -> None:
    claim = _falls_short_on_a_limit()
    assert (claim.verdict, claim.direction, claim.sampling) == ("inconsistent", "falls short", "selection")
    section = _claim_section(render_run_html(_with_claim(claim)))
    assert '<span class="verdict bad">inconsistent</span> <span class="direction">falls short of its claim</span>' in (
        section
    )
    assert "(samples: selection; the interval assumes a random sample)." in section
    assert "samples: the first 1,000 samples in sorted order (--limit 1000); the interval assumes a random" in section
    assert '<p class="warning">' not in section  # ±3 pt, but it excludes the claim: a refutation, no warning
    md = render_run_markdown(_with_claim(claim))
    assert "- **INCONSISTENT** (falls short of its claim) — top1 75.10 % claimed on imagenet-1k/val" in md
    assert "(samples: selection; the interval assumes a random sample)." in md


def test_the_run_page_claims_table_gives_direction_and_sampling() -> None:
    from repliscope.service.web.page_kit import environment as _environment

    template = _environment().get_template("claims.html")
    rows = claim_rows([_falls_short_on_a_limit()])
    view = SimpleNamespace(claims=rows, no_claims="", claim_figure=None)
    html = template.render(view=view, verdict="inconsistent", page=SimpleNamespace())
    assert '<span class="badge direction-short" data-direction="short">▼ falls short of its claim</span>' in html
    assert '<span class="sampling" data-sampling="selection">samples: selection</span>' in html
    assert "the model falls short of its claim: the claimed 75.10 % is above the 95 % interval" in html
    wide = judge_claim(CLAIM, factories.record().metrics[0], VAL, "x", sampling=sample_selection(19, VAL))
    html = template.render(
        view=SimpleNamespace(claims=claim_rows([wide]), no_claims="", claim_figure=None),
        verdict="not comparable",
        page=SimpleNamespace(),
    )
    assert "data-direction" not in html  # "within" a ±14 pt interval is no badge next to "not comparable"
    assert "too few samples to judge: the claimed 75.10 % is inside" in html


def test_the_run_page_headline_verdict_follows_the_rule() -> None:
    from repliscope.service.web.views import verdict_text

    low, high = wilson_interval(18, 20)
    old = {"metric": "top1", "claimed": 0.751, "ci_low": low, "ci_high": high, "verdict": "consistent"}
    assert verdict_text([old]) == "not comparable"  # stored before the width rule: never a green headline
    assert verdict_text([_falls_short_on_a_limit()]) == "inconsistent"
    narrow = {**old, "ci_low": 0.74, "ci_high": 0.76}
    assert verdict_text([narrow, _falls_short_on_a_limit()]) == "top1: consistent; top1: inconsistent"


def test_the_cli_line_shows_an_old_wide_consistent_as_not_comparable(monkeypatch: pytest.MonkeyPatch) -> None:
    from rich.console import Console

    from repliscope.cli import output

    low, high = wilson_interval(18, 20)
    stored = ClaimVerdict(
        metric="top1",
        claimed=0.751,
        measured=0.9,
        ci_low=low,
        ci_high=high,
        claim_dataset="imagenet-1k/val",
        evaluated_dataset="foolbox_imagenet (as imagenet-1k/val)",
        verdict="consistent",
        reason="inside",
        source="paper",
    )
    console = Console(record=True, width=400)
    monkeypatch.setattr(output, "console", console)
    output.print_record(_with_claim(stored))
    [line] = [x for x in console.export_text().splitlines() if x.startswith("claim ")]
    assert line.startswith(
        "claim     top1 75.10 % on imagenet-1k/val, measured 90.00 %: not comparable (too few samples"
    )
    assert line.endswith("(recorded as consistent before that rule: inside))")


def test_the_models_pages_claim_line_says_how_the_samples_were_chosen() -> None:
    from repliscope.service.web.claim_cells import claim_cell
    from repliscope.service.web.page_kit import environment as _environment

    cell = claim_cell(_falls_short_on_a_limit().model_dump())
    assert (cell.verdict, cell.direction, cell.sampling) == ("inconsistent", "short", "selection")
    macro = _environment().from_string('{% from "claim_macros.html" import claim_line %}{{ claim_line(c) }}')
    html = macro.render(c=cell)
    assert '<span class="badge direction-short" data-direction="short">▼ falls short of its claim</span>' in html
    assert '· claimed 75.10 % · <span class="sampling" data-sampling="selection">samples: selection</span>' in html
