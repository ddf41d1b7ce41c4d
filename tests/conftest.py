"""Shared fixtures: paths to the example manifests and the optional 1000-image ImageNet sample."""

from __future__ import annotations

from pathlib import Path

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
