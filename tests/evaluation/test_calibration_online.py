"""A calibration that cannot lose: A/B/A/B trials, the noise rule, the in-run calibration whose trials are real
work, and the online check that switches plan and invalidates the cache entry. Fake trial functions and fake
rates: nothing here asserts on real timings."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest

from repliscope.datasets import resolve_dataset
from repliscope.datasets.base import Dataset
from repliscope.evaluation import adaptive, calibration
from repliscope.evaluation.adaptive import SegmentedRun, run_adaptive
from repliscope.evaluation.calibration import Plan, Planning, candidates, clearly_below, interleaved_trials, pick
from repliscope.evaluation.engine import LoopOptions, run_loop
from repliscope.evaluation.record import result_hash
from repliscope.evaluation.run import PreparedRun, RunSettings, evaluate, prepare
from tests.conftest import LITE0
from tests.evaluation.test_calibration import CountingRunner, _many

SHAPE = (3, 224, 224)
DP, PL = "data_parallel threads=1", "pipelined threads=2"


@pytest.fixture(scope="module")
def lite0() -> PreparedRun:
    return prepare(LITE0, RunSettings(runtime="onnxruntime", threads=1, batch_size=4))


@pytest.fixture(scope="module")
def foolbox() -> Dataset:
    return resolve_dataset("foolbox_imagenet")


def test_candidates_put_the_documented_default_first_and_keep_given_values() -> None:
    cands = candidates(2, None, None, None)
    assert [(c.schedule, c.batch_size, c.workers, c.threads) for c in cands] == [
        ("data_parallel", 2, 2, 1),
        ("pipelined", 2, 2, 2),
    ]
    assert [c.key for c in candidates(4, 16, 2, None)] == ["data_parallel threads=2", "pipelined threads=2"]
    assert [c.batch_size for c in candidates(4, 16, 2, None)] == [16, 16]
    assert [c.key for c in candidates(2, None, None, "pipelined")] == [PL]


def test_trials_run_a_b_a_b() -> None:
    calls: list[tuple[str, int]] = []

    def trial(plan: Plan, round_: int) -> float:
        calls.append((plan.key, round_))
        return 10.0 * (len(calls))

    rates = interleaved_trials(candidates(2, None, None, None), trial, rounds=3)
    assert calls == [(DP, 0), (PL, 0), (DP, 1), (PL, 1), (DP, 2), (PL, 2)]
    assert rates == {DP: [10.0, 30.0, 50.0], PL: [20.0, 40.0, 60.0]}


def test_an_alternative_far_below_the_default_runs_no_further_trials() -> None:
    calls: list[tuple[str, int]] = []

    def trial(plan: Plan, round_: int) -> float:
        calls.append((plan.key, round_))
        return 100.0 if plan.key == DP else 30.0

    cands = candidates(2, None, None, None)
    rates = interleaved_trials(cands, trial, rounds=3)
    assert calls == [(DP, 0), (PL, 0), (DP, 1), (DP, 2)]
    plan, measured = pick(cands, rates)
    assert plan.key == DP and measured["noise"][PL] is None
    assert measured["gain_over_default"][PL] == pytest.approx(-0.7)
    # an alternative dropped after a round is never picked, whatever its first rate said
    plan, _ = pick(cands, {DP: [100.0, 100.0, 100.0], PL: [300.0]})
    assert plan.key == DP


def _rates(dp: list[float], pl: list[float]) -> dict[str, list[float]]:
    return {DP: dp, PL: pl}


def test_a_candidate_better_only_within_the_noise_is_not_picked() -> None:
    cands = candidates(2, None, None, None)
    # +2 % on average, well inside the round-to-round noise: the default stays
    plan, measured = pick(cands, _rates([100.0, 104.0, 98.0], [103.0, 105.0, 99.0]))
    assert plan.key == DP
    assert measured["gain_over_default"][PL] == pytest.approx(0.0166, abs=1e-3)
    assert measured["noise"][PL] > measured["gain_over_default"][PL]
    # +7 % on average but one round says -20 %: the noise (t * standard error) is larger than the gain
    plan, measured = pick(cands, _rates([100.0, 100.0, 100.0], [150.0, 80.0, 100.0]))
    assert plan.key == DP and measured["gain_over_default"][PL] > 0.03
    assert measured["noise"][PL] > measured["gain_over_default"][PL]
    # a steady +2 %: above the noise, but under the 3 % minimum gain
    plan, _ = pick(cands, _rates([100.0, 100.0, 100.0], [102.0, 102.0, 102.0]))
    assert plan.key == DP


def test_a_clearly_better_candidate_is_picked_with_its_gain_and_prediction() -> None:
    cands = candidates(2, None, None, None)
    plan, measured = pick(cands, _rates([100.0, 90.0, 110.0], [130.0, 118.0, 141.0]))
    assert plan.key == PL and plan.source == "candidate"
    logs = [math.log(130 / 100), math.log(118 / 90), math.log(141 / 110)]
    assert measured["gain_over_default"][PL] == pytest.approx(math.expm1(sum(logs) / 3), abs=1e-4)
    assert measured["predicted_samples_per_second"] == {DP: 100.0, PL: 130.0}
    assert measured["trials_samples_per_second"] == {DP: [100.0, 90.0, 110.0], PL: [130.0, 118.0, 141.0]}
    assert measured["default"] == DP and measured["rounds"] == 3


def test_clearly_below_compares_with_the_best_alternative_beyond_the_margin() -> None:
    dp = candidates(2, None, None, None)[0]
    cal = {"predicted_samples_per_second": {DP: 100.0, PL: 90.0}, "noise": {PL: 0.05}}
    plan = replace(dp, calibration=cal)
    assert clearly_below(plan, 85.0) is None  # 85 * 1.10 > 90: not clearly below
    why = clearly_below(plan, 80.0)
    assert why == (
        "data_parallel threads=1 ran 80.0 samples/s, clearly below the 90.0 predicted for pipelined threads=2 "
        "(margin 10 %)"
    )
    noisy = replace(dp, calibration={**cal, "noise": {PL: 0.25}})
    assert clearly_below(noisy, 80.0) is None  # the calibration's own noise widens the margin
    assert clearly_below(replace(dp, calibration={}), 1.0) is None


def test_online_check_switches_plan_and_invalidates_the_cache_entry(
    lite0: PreparedRun, foolbox: Dataset, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(calibration, "MIN_TRIAL_SAMPLES", 16)
    monkeypatch.setattr(calibration.os, "getloadavg", lambda: (3.5, 2.0, 1.0))
    cands = candidates(2, 2, None, None)  # batch 2: a trial is 16 samples, the check 32
    cached = replace(
        cands[0],
        source="calibrated (cached)",
        calibration={"predicted_samples_per_second": {DP: 100.0, PL: 90.0}, "noise": {PL: 0.05}},
    )
    path = tmp_path / "calibration" / "entry.json"
    calibration.write_cached(path, cached)
    invalidated: list[Path | None] = []

    def spy(p: Path | None) -> None:
        invalidated.append(p)
        calibration.invalidate(p)

    monkeypatch.setattr(adaptive, "invalidate", spy)
    real_run = SegmentedRun.run
    fake = {DP: 20.0, PL: 80.0}  # the cached pick now runs far below its prediction; the alternative does not

    def run(self: SegmentedRun, plan: Plan, n: int | None = None, role: str = "run") -> float:
        real_run(self, plan, n, role)
        return fake[plan.key]

    monkeypatch.setattr(SegmentedRun, "run", run)
    samples = _many(foolbox, 240)
    counting = CountingRunner(lite0.artifact, threads=1, cache_dir=tmp_path)
    loop, plan = run_adaptive(
        Planning(cached, cands, path), lite0.pipeline, counting, samples, LoopOptions(1, 1), SHAPE
    )
    assert invalidated == [path]
    assert plan.key == PL
    assert plan.source == (
        "re-calibrated in the run (data_parallel threads=1 ran 20.0 samples/s, clearly below the 90.0 predicted "
        "for pipelined threads=2 (margin 10 %); switched from data_parallel threads=1 to pipelined threads=2)"
    )
    roles = [(s["role"], s["plan"], s["samples"]) for s in plan.calibration["segments"]]
    assert roles == [
        ("check", DP, 32),
        *[("trial", key, 16) for _ in range(3) for key in (DP, PL)],
        ("run", PL, 240 - 32 - 96),
    ]
    entry = json.loads(path.read_text())  # the new calibration replaced the invalidated entry
    assert (entry["schedule"], entry["threads"]) == ("pipelined", 2)
    assert entry["calibration"]["load_average"] == [3.5, 2.0, 1.0]
    assert entry["calibration"]["predicted_samples_per_second"] == {DP: 20.0, PL: 80.0}
    # every sample evaluated once, in order, exactly as one loop of either plan gives it
    single = run_loop(lite0.pipeline, counting.replica(), samples, LoopOptions(3, 1), SHAPE)
    assert [p.sample_id for p in loop.predictions] == [s.id for s in samples]
    assert result_hash(loop.predictions) == result_hash(single.predictions)
    assert loop.fingerprints == single.fingerprints and len(loop.batch_latencies) == 120


def test_online_check_without_room_to_recalibrate_switches_to_the_predicted_alternative(
    lite0: PreparedRun, foolbox: Dataset, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(calibration, "MIN_TRIAL_SAMPLES", 16)
    cands = candidates(2, 2, None, None)
    cached = replace(
        cands[0], source="calibrated (cached)", calibration={"predicted_samples_per_second": {DP: 100.0, PL: 90.0}}
    )
    path = tmp_path / "entry.json"
    calibration.write_cached(path, cached)
    real_run = SegmentedRun.run

    def slow(self: SegmentedRun, plan: Plan, n: int | None = None, role: str = "run") -> float:
        real_run(self, plan, n, role)
        return 5.0  # every plan far below the prediction

    monkeypatch.setattr(SegmentedRun, "run", slow)
    samples = _many(foolbox, 100)  # 68 left after the check: too few for 96 samples of trials
    counting = CountingRunner(lite0.artifact, threads=1, cache_dir=tmp_path)
    loop, plan = run_adaptive(
        Planning(cached, cands, path), lite0.pipeline, counting, samples, LoopOptions(1, 1), SHAPE
    )
    assert not path.exists()  # invalidated, nothing new cached: the next run calibrates
    assert plan.key == PL and plan.source.startswith("switched in the run (data_parallel threads=1 ran 5.0")
    assert [s["role"] for s in plan.calibration["segments"]] == ["check", "run"]
    assert len(loop.predictions) == 100


def test_evaluate_calibrates_on_its_own_samples_and_gives_the_same_result(
    lite0: PreparedRun, foolbox: Dataset, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(calibration, "MIN_TRIAL_SAMPLES", 16)
    monkeypatch.setattr(calibration, "FALLBACK_BATCH", 2)
    monkeypatch.setattr(calibration, "usable_cores", lambda: 2)
    monkeypatch.setattr(calibration.os, "getloadavg", lambda: (0.5, 0.25, 0.75))
    data = replace(foolbox, samples=_many(foolbox, 260))
    counting = CountingRunner(lite0.artifact, threads=1, cache_dir=tmp_path)
    auto = replace(lite0, runner=counting, settings=RunSettings(runtime="onnxruntime", cache_dir=tmp_path))
    rec = evaluate(auto, data)
    plan = rec.options["plan"]
    # on a busy machine the online check may find the pick clearly below the alternative and switch
    assert plan["source"].startswith(("calibrated in the run", "re-calibrated in the run", "switched in the run"))
    segments = plan["calibration"]["segments"]
    trials = [s["plan"] for s in segments if s["role"] == "trial"]
    k = trials.count(PL)  # pipelined may be dropped after a round far below the default
    assert 1 <= k <= 3 and trials[: 2 * k + (3 - k)] == [DP, PL] * k + [DP] * (3 - k)
    first = len([DP, PL] * k + [DP] * (3 - k))
    assert all(s["samples"] == 16 for s in segments[:first])
    assert segments[first]["role"] == "check" and segments[first]["samples"] == 32
    assert sum(s["samples"] for s in segments) == 260 and rec.counts["total"] == 260
    entries = list((tmp_path / "calibration").glob("*.json"))
    switched = plan["source"].startswith("switched")  # then the entry was invalidated, nothing new cached
    assert len(entries) == (0 if switched else 1)
    if entries:
        assert json.loads(entries[0].read_text())["calibration"]["load_average"] == [0.5, 0.25, 0.75]
    given = replace(
        lite0,
        runner=CountingRunner(lite0.artifact, threads=1, cache_dir=tmp_path),
        settings=RunSettings(runtime="onnxruntime", threads=1, batch_size=3, cache_dir=tmp_path),
    )
    ref = evaluate(given, data)
    assert ref.options["plan"]["source"].startswith("given")
    assert rec.result_hash == ref.result_hash
    assert [s.sample_id for s in rec.samples] == [s.sample_id for s in ref.samples]
    assert rec.timings.loop_seconds == pytest.approx(
        sum(s["samples"] / s["samples_per_second"] for s in segments), rel=0.05
    )
    # the second run finds the cached calibration and only checks it on its first samples
    again = evaluate(replace(auto, runner=CountingRunner(lite0.artifact, threads=1, cache_dir=tmp_path)), data)
    roles = [s["role"] for s in again.options["plan"]["calibration"]["segments"]]
    assert roles[0] == ("trial" if switched else "check")
    assert again.options["plan"]["source"] != "calibrated (cached)" or roles == ["check", "run"]
    assert again.result_hash == ref.result_hash


@pytest.mark.slow
def test_in_run_calibration_gives_the_result_hash_of_one_loop_on_onnxruntime(
    foolbox: Dataset, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(calibration, "MIN_TRIAL_SAMPLES", 16)
    monkeypatch.setattr(calibration, "FALLBACK_BATCH", 2)
    data = replace(foolbox, samples=_many(foolbox, 256))
    auto = evaluate(prepare(LITE0, RunSettings(runtime="onnxruntime", cache_dir=tmp_path)), data)
    roles = {s["role"] for s in auto.options["plan"]["calibration"]["segments"]}
    assert {"trial", "check"} <= roles
    given = prepare(LITE0, RunSettings(runtime="onnxruntime", threads=1, batch_size=2, cache_dir=tmp_path))
    assert auto.result_hash == evaluate(given, data).result_hash
