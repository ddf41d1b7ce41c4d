"""Shared fixtures: paths to the example manifests and the optional 1000-image ImageNet sample."""

from __future__ import annotations

import os
import re
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
IMAGENET_SAMPLE = REPO.parent / "shared" / "data" / "imagenet-sample"
LITE0 = EXAMPLES / "efficientnet-lite0.yaml"

# The 20 foolbox images in file-name order, their labels, and Lite0's golden top-1 (two misses: 609 -> 436, 511).
FOOLBOX_LABELS = [243, 559, 438, 990, 949, 853, 609, 609, 915, 455, 541, 630, 741, 471, 129, 99, 251, 22, 317, 305]
LITE0_FOOLBOX_TOP1 = [243, 559, 438, 990, 949, 853, 436, 511, 915, 455, 541, 630, 741, 471, 129, 99, 251, 22, 317, 305]


@pytest.fixture
def imagenet_sample() -> Path:
    if not IMAGENET_SAMPLE.is_dir():
        pytest.skip("../shared/data/imagenet-sample is absent")
    return IMAGENET_SAMPLE


@pytest.fixture(autouse=True)
def _isolated_store(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test gets its own database unless it passes --db; the ONNX export cache is shared per session."""
    monkeypatch.setenv("REPLISCOPE_DB", f"sqlite:///{tmp_path_factory.mktemp('db') / 'runs.db'}")
    monkeypatch.setenv("REPLISCOPE_CACHE", str(_session_cache(tmp_path_factory)))


_CACHE: list[Path] = []


def _session_cache(factory: pytest.TempPathFactory) -> Path:
    if not _CACHE:
        _CACHE.append(factory.mktemp("cache"))
    return _CACHE[0]


SLOW_TEST_TIMEOUT_S = 1800
"""pytest-timeout for tests marked ``slow`` (the 1000-image runs, real processes and stacks), which a loaded 2-core CI
machine slows ~3x; every other test has the ini default (``timeout = 600`` in pyproject.toml). A test with its own
``@pytest.mark.timeout(N)`` keeps it."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("slow") is not None and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(SLOW_TEST_TIMEOUT_S))


# --- strict skips: in CI (REPLISCOPE_STRICT_SKIPS=1, set by .ci/run) a skip is a failure unless its reason matches
# tests/allowed-skips.txt, so a broken install fails loudly instead of skipping quietly.

ALLOWED_SKIPS_FILE = Path(__file__).with_name("allowed-skips.txt")
_SKIPS: dict[str, list[str]] = {}
"""Skip reason -> the test ids it skipped (this session), for the summary."""


def _allowed_skip_patterns() -> list[re.Pattern[str]]:
    """The regular expressions of tests/allowed-skips.txt (one a line; ``#`` starts a comment)."""
    lines = (line.split("#", 1)[0].strip() for line in ALLOWED_SKIPS_FILE.read_text(encoding="utf-8").splitlines())
    return [re.compile(line) for line in lines if line]


def _strict_skips() -> bool:
    return os.environ.get("REPLISCOPE_STRICT_SKIPS", "") == "1"


def _skip_reason(longrepr: object) -> str:
    """The reason of a skipped report (pytest stores ``(file, line, "Skipped: reason")``)."""
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def _judge_skip(report: pytest.TestReport | pytest.CollectReport) -> None:
    """Record a skip; in strict mode turn a skip whose reason no allowed pattern matches into a failure."""
    if not report.skipped or hasattr(report, "wasxfail"):
        return
    reason = _skip_reason(report.longrepr)
    _SKIPS.setdefault(reason, []).append(report.nodeid)
    if _strict_skips() and not any(p.search(reason) for p in _allowed_skip_patterns()):
        report.outcome = "failed"
        report.longrepr = (
            f"strict skips (REPLISCOPE_STRICT_SKIPS=1): this test skipped with {reason!r}, a reason "
            f"{ALLOWED_SKIPS_FILE.name} does not allow: what CI installs is broken, or the skip is new "
            "(allow it there with the reason it is legitimate)"
        )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    _judge_skip(report)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    report = yield
    _judge_skip(report)
    return report


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """Every skip reason with its count (what CI's log reports), and whether strict mode judged them."""
    if not _SKIPS:
        return
    mode = "strict: a reason tests/allowed-skips.txt does not match failed" if _strict_skips() else "not strict"
    terminalreporter.section(f"skips by reason ({mode})")
    for reason, ids in sorted(_SKIPS.items(), key=lambda kv: -len(kv[1])):
        terminalreporter.write_line(f"{len(ids):5d}  {reason}")
