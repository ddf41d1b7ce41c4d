"""Fixtures: a realistic single run and a realistic sweep (see factories.py)."""

from __future__ import annotations

import pytest

from repliscope.evaluation.record import EvaluationRecord
from repliscope.pitfalls.result import SweepResult
from tests.report import factories


@pytest.fixture
def run_record() -> EvaluationRecord:
    return factories.record(error_at=3)


@pytest.fixture
def sweep_result() -> SweepResult:
    return factories.sweep()


@pytest.fixture
def sweep_records() -> dict[str, EvaluationRecord]:
    return factories.sweep_records()
