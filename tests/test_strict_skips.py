"""The strict-skips rule of tests/conftest.py: in CI a skip whose reason tests/allowed-skips.txt does not allow
fails."""

from __future__ import annotations

import pytest

from tests import conftest


@pytest.fixture(autouse=True)
def _own_summary(monkeypatch: pytest.MonkeyPatch) -> None:
    """These made-up skips stay out of the session's summary."""
    monkeypatch.setattr(conftest, "_SKIPS", {})


def _skipped(reason: str) -> pytest.TestReport:
    return pytest.TestReport(
        "tests/x.py::test_x",
        ("tests/x.py", 1, "test_x"),
        {},
        "skipped",
        ("tests/x.py", 2, f"Skipped: {reason}"),
        "call",
    )


@pytest.mark.parametrize(
    ("reason", "outcome"),
    [
        ("the 'agents' extra (dask, distributed) is not installed", "failed"),
        ("darknet is not installed; install it with: apt-get install darknet (make darknet)", "failed"),
        ("browser tests: chromium is not installed", "failed"),
        ("/work/shared/data/coco-val-mini is absent", "skipped"),
        ("needs ../shared/data/faces-dlib", "skipped"),
        ("OpenCV < 5: classic engine only", "skipped"),
    ],
)
def test_strict_mode_fails_what_the_allow_list_does_not_name(
    monkeypatch: pytest.MonkeyPatch, reason: str, outcome: str
) -> None:
    monkeypatch.setenv("REPLISCOPE_STRICT_SKIPS", "1")
    report = _skipped(reason)
    conftest._judge_skip(report)
    assert report.outcome == outcome
    if outcome == "failed":
        assert reason in str(report.longrepr) and "allowed-skips.txt" in str(report.longrepr)


def test_without_strict_mode_a_skip_stays_a_skip(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REPLISCOPE_STRICT_SKIPS", raising=False)
    report = _skipped("the 'agents' extra (dask, distributed) is not installed")
    conftest._judge_skip(report)
    assert report.outcome == "skipped"


def test_every_allowed_pattern_compiles_and_says_why() -> None:
    lines = [ln for ln in conftest.ALLOWED_SKIPS_FILE.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    assert lines and all("#" in ln for ln in lines), "each allowed skip reason carries its justification"
    assert len(conftest._allowed_skip_patterns()) == len(lines)
