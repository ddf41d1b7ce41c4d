"""The one job layer: RunOptions (one typed conversion), run_and_store (check the key, run, save) and the
executor contract the routes call."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from repliscope.errors import RepliscopeError
from repliscope.job_execution import JobOutcome, JobSpec, RunOptions, run_and_store


def _spec(options: Any = None, key: str | None = None) -> JobSpec:
    return JobSpec("job-1", "evaluate", "m@1.0.0", "name: m\n", "torch", "d", "d", options or RunOptions(), key)


class _Store:
    def __init__(self, stored: dict[str, Any] | None = None) -> None:
        self.stored = dict(stored or {})
        self.saved: list[str] = []

    def get_job_result(self, key: str) -> Any:
        return self.stored.get(key)

    def save_outcome(self, outcome: Any, key: str, kind: str = "evaluate") -> Any:
        from repliscope.store.repository import StoredOutcome

        self.saved.append(key)
        self.stored[key] = StoredOutcome(run_ids=["r1"], sweep_ids=[], benchmark_ids=[], duplicate=True)
        return StoredOutcome(run_ids=["r1"], sweep_ids=[], benchmark_ids=[], duplicate=False)


def test_run_and_store_runs_once_per_key() -> None:
    store, ran = _Store(), []

    def run(job: JobSpec) -> JobOutcome:
        ran.append(job.job_id)
        return JobOutcome()

    first = run_and_store(_spec(key="k"), store, run)
    again = run_and_store(_spec(key="k"), store, run)
    assert first.ran and not first.stored.duplicate and first.stored.run_ids == ["r1"]
    assert not again.ran and again.stored.duplicate and ran == ["job-1"] and store.saved == ["k"]


def test_run_and_store_saves_nothing_when_the_run_raises() -> None:
    store = _Store()

    def run(job: JobSpec) -> JobOutcome:
        raise RepliscopeError("no")

    with pytest.raises(RepliscopeError):
        run_and_store(_spec(), store, run)
    assert store.saved == []


def test_run_options_convert_once_and_name_the_option_as_the_caller_does() -> None:
    settings = RunOptions(threads=2, batch_size=4, download=True, evaluated_as="imagenet-1k/val").run_settings(
        "onnxruntime"
    )
    assert (settings.runtime, settings.threads, settings.batch_size, settings.allow_download) == (
        "onnxruntime",
        2,
        4,
        True,
    )
    assert (settings.evaluated_as.name, settings.evaluated_as.split) == ("imagenet-1k", "val")
    with pytest.raises(RepliscopeError, match=r"^option evaluated_as expects NAME/SPLIT"):
        RunOptions(evaluated_as="bad").run_settings("torch")
    with pytest.raises(RepliscopeError, match=r"^--as expects NAME/SPLIT"):
        RunOptions(evaluated_as="bad").run_settings("torch", name=lambda f: "--as")
    assert RunOptions(limit=3)["limit"] == 3
    with pytest.raises(KeyError):
        RunOptions()["nope"]


def test_a_spec_travels_as_json_without_defaults_and_keeps_a_dict_as_given() -> None:
    typed = json.loads(_spec(RunOptions(limit=2, shard="0/2")).to_json())
    assert typed["options"] == {"limit": 2, "shard": "0/2"}
    back = JobSpec.from_json(json.dumps(typed))
    assert back.run_options == RunOptions(limit=2, shard="0/2")
    given = _spec({"limit": "two"})  # validated where the job runs, not here
    assert given.with_options(shard="1/2") == {"limit": "two", "shard": "1/2"}
    with pytest.raises(ValueError):
        given.run_options  # noqa: B018


def test_an_executor_without_check_accepts_every_job() -> None:
    from repliscope.service.executor import AcceptingEveryJob, JobExecutor, ThreadJobExecutor, as_job_executor
    from tests.service.test_web_pages import RecordingExecutor  # the earlier contract: no check

    plain = RecordingExecutor()
    adapted = as_job_executor(plain)
    assert isinstance(adapted, AcceptingEveryJob) and isinstance(adapted, JobExecutor)
    adapted.check(_spec())
    assert adapted.submit(_spec()) == "job-1" and len(plain.jobs) == 1
    assert isinstance(ThreadJobExecutor, type) and issubclass(ThreadJobExecutor, JobExecutor)


@pytest.mark.parametrize("where", [[], ["--scheduler", "local"]])
def test_the_cli_and_its_agent_path_resolve_the_options_once_and_refuse_a_hostile_schedule(
    where: list[str], tmp_path: Path
) -> None:
    """``evaluate`` in this process and ``evaluate --scheduler local`` (a job for an agent) resolve their flags with
    ``resolve_run_config``: a shell command as ``--schedule`` is refused with the flag and the allowed values, exit
    2, before any dataset, agent or store is touched; nothing runs it."""
    from typer.testing import CliRunner

    from repliscope.cli.main import app
    from tests.test_jobs import TINY

    marker = tmp_path / "pwned"
    db = tmp_path / "runs.db"
    args = ["evaluate", str(TINY), "--dataset", str(tmp_path / "missing"), "--db", f"sqlite:///{db}"]
    res = CliRunner().invoke(app, [*args, "--schedule", f"pipelined; touch {marker}", *where])
    assert res.exit_code == 2, res.output
    assert f"error: --schedule 'pipelined; touch {marker}' is not allowed (allowed: pipelined, data_parallel)" in (
        res.output
    )
    assert not marker.exists() and not db.exists()
