"""A run's options are resolved once (``resolve_run_config``) into a frozen RunSettings that records where each value
came from: a command-line flag, a job spec, the manifest or the default."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from repliscope.errors import RepliscopeError
from repliscope.evaluation.run_config import RunSettings, resolve_run_config
from repliscope.job_execution import JobSpec, RunOptions, execute_job
from repliscope.manifest.loader import load_manifest
from tests.conftest import EXAMPLES

TINY = EXAMPLES / "tiny-resnet.yaml"


def test_flags_the_manifest_and_defaults_each_recorded_as_the_origin() -> None:
    loaded = load_manifest(TINY)
    options = RunOptions(threads=2, batch_size=None, fail_fast=False, evaluated_as="imagenet-1k/val")
    settings = resolve_run_config(options, runtime=None, manifest=loaded, source="cli")
    assert settings.runtime == "torch" and settings.origin("runtime") == "manifest"  # tiny-resnet is a torch model
    assert (settings.threads, settings.origin("threads")) == (2, "cli")
    assert (settings.evaluated_as.name, settings.evaluated_as.split) == ("imagenet-1k", "val")  # type: ignore[union-attr]
    assert settings.origin("evaluated_as") == "cli"
    # given explicitly but at its default (the CLI passes every flag): the default
    assert settings.origin("batch_size") == "default" and settings.origin("fail_fast") == "default"
    assert settings.origin("cache_dir") == "default" and settings.origin("schedule") == "default"
    job = resolve_run_config(RunOptions(schedule="data_parallel"), runtime="onnxruntime", source="job")
    assert (job.runtime, job.origin("runtime"), job.schedule, job.origin("schedule")) == (
        "onnxruntime",
        "job",
        "data_parallel",
        "job",
    )
    assert job.origin("threads") == "default"


def test_settings_are_frozen_and_a_changed_value_is_the_callers() -> None:
    settings = resolve_run_config(RunOptions(), runtime="torch", source="job")
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.threads = 4  # type: ignore[misc]
    changed = dataclasses.replace(settings, threads=4)
    assert (changed.origin("threads"), changed.origin("runtime")) == ("caller", "job")
    assert RunSettings(runtime="torch", batch_size=8).origins == {
        "runtime": "caller",
        "threads": "default",
        "batch_size": "caller",
        "prep_workers": "default",
        "schedule": "default",
        "fail_fast": "default",
        "evaluated_as": "default",
        "sampling": "default",
        "limit": "default",
        "shard": "default",
        "cache_dir": "default",
        "allow_download": "default",
        "allow_outside_paths": "default",
    }
    with pytest.raises(RepliscopeError, match=r"origin 'agent' of threads is not an origin \(allowed: cli, job, "):
        RunSettings(runtime="torch", threads=2, origins={"threads": "agent"})  # type: ignore[dict-item]
    with pytest.raises(KeyError, match="'nope' is not a run setting"):
        settings.origin("nope")


def test_a_hostile_schedule_in_a_job_is_refused_by_name_before_anything_runs(tmp_path: Path) -> None:
    """A job's schedule is one of the SCHEDULES: a shell command there is an error naming the option and the
    allowed values, raised before any runtime is prepared (the cache folder is never created) and never run."""
    marker = tmp_path / "pwned"
    job = JobSpec(
        "job-1",
        "evaluate",
        "tiny-resnet@1.0.0",
        TINY.read_text(encoding="utf-8"),
        "torch",
        "foolbox",
        "foolbox_imagenet",
        {"manifest_path": str(TINY), "limit": 2, "schedule": f"pipelined; touch {marker}"},
    )
    cache = tmp_path / "cache"
    with pytest.raises(RepliscopeError, match=r"^option schedule 'pipelined; touch .*' is not allowed \(allowed: "):
        execute_job(job, cache, lambda n: None, lambda line: None)
    assert not marker.exists() and not cache.exists()


def test_the_cli_names_its_flags_in_errors() -> None:
    with pytest.raises(
        RepliscopeError, match=r"^--schedule 'fast' is not allowed \(allowed: pipelined, data_parallel\)"
    ):
        RunOptions(schedule="fast").run_settings("torch", source="cli", name=lambda f: "--" + f)
    with pytest.raises(RepliscopeError, match=r"^option runtime is needed: no manifest"):
        resolve_run_config(RunOptions(), runtime=None, source="job")
