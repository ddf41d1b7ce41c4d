"""Issue 32 item 11: `repliscope runs import FILE` validates a record file like a manifest before storing it:
NaN or infinite numbers, negative counts, metrics that are not what the samples give, samples edited under a stale
``result_hash`` and run ids outside the id alphabet (``../../../../tmp/x``) are each refused naming the field, and
nothing is stored."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from repliscope.cli.main import app
from repliscope.evaluation.record import EvaluationRecord, ImportedRecord, SamplePrediction
from repliscope.store.repository import RunStore, keep_unsaved
from tests.cli._records import record

runner = CliRunner(env={"COLUMNS": "200"})


def _samples() -> list[SamplePrediction]:
    return [
        SamplePrediction(sample_id=f"s{i}", label=i % 3, topk_indices=[i % 3 if i != 3 else 2], topk_probs=[0.9])
        for i in range(5)
    ]


def _good() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(record(_samples(), run_id="0123456789abcdef0123456789abcdef").model_dump_json())
    return data


def _import(tmp_path: Path, data: dict[str, Any]) -> tuple[int, str, list[str]]:
    file = tmp_path / "run.json"
    file.write_text(json.dumps(data))  # json.dumps writes NaN / Infinity as the hostile files do
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    res = runner.invoke(app, ["runs", "import", str(file), "--db", url])
    assert "Traceback" not in res.output
    with RunStore(url) as store:
        stored = [r.run_id for r in store.list()]
    return res.exit_code, res.stderr, stored


def test_a_consistent_record_imports(tmp_path: Path) -> None:
    code, err, stored = _import(tmp_path, _good())
    assert (code, err, stored) == (0, "", ["0123456789abcdef0123456789abcdef"])


def _set(data: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    *parents, last = path.split(".")
    node: Any = data
    for p in parents:
        node = node[int(p)] if p.isdigit() else node[p]
    node[int(last) if last.isdigit() else last] = value
    return data


HOSTILE = [
    ("metrics.0.value", float("nan"), "record.metrics[0].value is not a finite number"),
    ("metrics.0.ci_high", float("inf"), "record.metrics[0].ci_high is not a finite number"),
    ("samples.0.topk_probs", [float("nan")], "record.samples[0].topk_probs[0] is not a finite number"),
    ("options", {"threshold": float("-inf")}, "record.options.threshold is not a finite number"),
    ("timings.total_seconds", float("nan"), "record.timings.total_seconds is not a finite number"),
    ("counts.failed", -1, "counts.failed: Input should be greater than or equal to 0"),
    ("metrics.0.n", -5, "metrics[0] (top1): n -5 and successes 4 must satisfy 0 <= successes <= n"),
    ("metrics.0.successes", 9, "n 5 and successes 9 must satisfy 0 <= successes <= n"),
    ("timings.inference_seconds", -0.5, "timings.inference_seconds is negative"),
    ("metrics.0.value", 0.5, "metrics[0] (top1): value 0.5 is not successes / n = 4 / 5"),
    ("run_id", "../../../../tmp/x", "run_id: String should match pattern"),
    ("run_id", "a/b", "run_id: String should match pattern"),
    ("run_id", "..", "run_id: String should match pattern"),
    ("run_id", "", "run_id: String should match pattern"),
    ("run_id", "x" * 65, "run_id: String should match pattern"),
    ("run_id", "run id", "run_id: String should match pattern"),
]


@pytest.mark.parametrize(("path", "value", "says"), HOSTILE, ids=[f"{h[0]}={str(h[1])[:20]}" for h in HOSTILE])
def test_hostile_record_is_refused_and_nothing_is_stored(tmp_path: Path, path: str, value: Any, says: str) -> None:
    before = {p: p.exists() for p in (Path("/tmp/x.json"), Path("/tmp/x"))}  # another program may have made them
    code, err, stored = _import(tmp_path, _set(_good(), path, value))
    assert code == 2 and stored == []
    assert err.startswith(f"error: {tmp_path / 'run.json'}: not an evaluation record (") and says in err, err
    assert "nothing was stored" in err
    assert {p: p.exists() for p in before} == before  # the hostile run id wrote nothing there


def test_forged_metrics_with_consistent_counts_differ_from_the_samples(tmp_path: Path) -> None:
    data = _set(_good(), "metrics.0.value", 1.0)
    _set(data, "metrics.0.successes", 5)
    code, err, stored = _import(tmp_path, data)
    assert code == 2 and stored == []
    assert "metric top1: 1.0 (5 of 5) differs from its samples' 0.8 (4 of 5)" in err


def test_samples_edited_under_a_stale_result_hash_are_refused(tmp_path: Path) -> None:
    data = _set(_good(), "samples.3.topk_indices", [0])  # the wrong answer made right
    _set(data, "metrics.0.value", 1.0)
    _set(data, "metrics.0.successes", 5)
    code, err, stored = _import(tmp_path, data)
    assert code == 2 and stored == []
    assert "result_hash" in err and "is not the hash of the record's samples" in err


def test_keep_unsaved_never_writes_outside_its_folder(tmp_path: Path) -> None:
    escaped = EvaluationRecord.model_validate({**_good(), "run_id": "../../escape"})
    (tmp_path / "store").mkdir()
    kept, problems = keep_unsaved(escaped, f"sqlite:///{tmp_path / 'store' / 'runs.db'}")
    assert kept is None and "not of the id alphabet" in problems[0]
    assert not (tmp_path / "escape.json").exists() and not list(tmp_path.rglob("*.json"))


def test_imported_record_model_is_what_the_cli_uses() -> None:
    good = _good()
    assert ImportedRecord.model_validate(good).run_id == good["run_id"]
