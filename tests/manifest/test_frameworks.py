"""Framework and package version constraints are checked against what is installed."""

from __future__ import annotations

import pytest

from repliscope.errors import FrameworkError
from repliscope.manifest.frameworks import check_framework, check_requirement


def test_installed_torch_satisfies_example_constraint() -> None:
    assert check_framework("torch", ">=2.1,<3").startswith("2.13.0")


def test_torch_outside_constraint() -> None:
    with pytest.raises(FrameworkError, match=r"needs torch<2\.0, but torch 2\.13\.0"):
        check_framework("torch", "<2.0")


def test_missing_package() -> None:
    with pytest.raises(FrameworkError, match="not installed"):
        check_requirement("no-such-package==1.0", "architecture")


def test_architecture_package_pinned() -> None:
    assert check_requirement("efficientnet-lite-pytorch==0.1.0", "architecture") == "0.1.0"
    with pytest.raises(FrameworkError, match=r"efficientnet-lite-pytorch 0\.1\.0 is installed"):
        check_requirement("efficientnet-lite-pytorch>=0.2", "architecture")
