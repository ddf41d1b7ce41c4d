"""``repliscope agents`` and ``repliscope evaluate --scheduler local`` (an in-process scheduler and agent)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from repliscope.cli.main import app
from tests.test_jobs import TINY, foolbox_folder

pytest.importorskip("distributed", reason="the 'agents' extra (dask, distributed) is not installed")

TINY_ARGS = [
    "evaluate",
    str(TINY),
    "--dataset",
    foolbox_folder(),
    "--label-rule",
    "none",
    "--limit",
    "6",
    "--threads",
    "1",
    "--batch-size",
    "4",
]


def test_cli_start_up_imports_no_dask() -> None:
    code = (
        "import repliscope, repliscope.cli.main, repliscope.cli.agent_cmd, repliscope.agents.placement, "
        "repliscope.agents.cluster, repliscope.agents.submit, repliscope.job_execution, sys; "
        "assert 'distributed' not in sys.modules and 'dask' not in sys.modules, 'dask imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_agents_lists_the_in_process_agent() -> None:
    from repliscope.agents.capabilities import default_agent_id

    res = CliRunner().invoke(app, ["agents", "--json"])
    assert res.exit_code == 0, res.output
    [agent] = json.loads(res.stdout)
    assert agent["alive"] and agent["capabilities"]["agent_id"] == default_agent_id()
    assert agent["executing"] == 0 and agent["address"].startswith("tls://127.0.0.1:")


def test_evaluate_on_the_local_scheduler_equals_the_in_process_evaluate_and_stores_once_per_key() -> None:
    from repliscope.agents.capabilities import default_agent_id
    from repliscope.store.repository import RunStore

    here = CliRunner().invoke(app, [*TINY_ARGS, "--json"])
    assert here.exit_code == 0, here.output
    first = CliRunner().invoke(app, [*TINY_ARGS, "--scheduler", "local", "--idempotency-key", "k-1"])
    assert first.exit_code == 0, first.output
    text = " ".join(first.stdout.split())
    assert f"ran on agent {default_agent_id()} in " in text and "(idempotency key k-1)" in text
    store = RunStore()
    stored = store.get_job_result("k-1")
    assert stored is not None and len(stored.run_ids) == 1
    record = store.get(stored.run_ids[0])
    assert record.result_hash == json.loads(here.stdout)["result_hash"]
    assert record.hardware["agent_id"] == default_agent_id()
    again = CliRunner().invoke(app, [*TINY_ARGS, "--scheduler", "local", "--idempotency-key", "k-1"])
    assert again.exit_code == 0, again.output
    assert "idempotency key k-1 is already stored" in " ".join(again.stdout.split())
    assert store.count_job_results() == 1 and len(store.list()) == 2  # the in-process run + the agent's


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            ["--requires", "torch<2"],
            "error: --requires, --hardware and --idempotency-key place a job on agents: add --scheduler",
        ),
        (
            ["--scheduler", "local", "--hardware", "gpu=1"],
            "error: hardware selector 'gpu=1': unknown key 'gpu' "
            "(allowed: agent_id, cores, cpu_flags, cpu_model, gpus, "
            "hostname, memory_gib)",
        ),
        (["--scheduler", "127.0.0.1:8786"], "error: --scheduler '127.0.0.1:8786': give tcp://HOST:PORT"),
        (  # issue 38: an internal error before
            ["--scheduler", "inproc://x"],
            "error: --scheduler 'inproc://x': give tcp://HOST:PORT, e.g. tcp://127.0.0.1:8786 (or 'local' for an "
            "in-process scheduler); the allowed schemes are tcp, ws, tls, wss\n",
        ),
        (["--scheduler", "local", "--hardware", "gpus>=1"], "error: no live agent meets the job's constraints ("),
        (["--scheduler", "local", "--schedule", "fastest"], "error: --schedule 'fastest' is not allowed (allowed: "),
        (
            ["--scheduler", "local", "--trace-level", "layer"],
            "error: --trace-level and --labels-csv run in this process only",
        ),
    ],
)
def test_bad_agent_options_exit_2(extra: list[str], message: str) -> None:
    res = CliRunner().invoke(app, [*TINY_ARGS, *extra])
    assert res.exit_code == 2, res.output
    assert res.stderr.startswith(message), res.stderr


def test_evaluate_with_stack_current_runs_on_the_in_process_agent_of_this_environment() -> None:
    from repliscope.store.repository import RunStore

    res = CliRunner().invoke(app, [*TINY_ARGS, "--stack", "current", "--json"])
    assert res.exit_code == 0, res.output
    record = json.loads(res.stdout)
    assert record["software"]["stack"]["key"] == "current"
    assert RunStore().get(record["run_id"]).run_id == record["run_id"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["agent", "--scheduler", "foo"],
            "error: --scheduler 'foo': give tcp://HOST:PORT, e.g. tcp://127.0.0.1:8786; the allowed schemes are "
            "tcp, ws, tls, wss\n",
        ),
        (["agent", "--scheduler", "tcp://127.0.0.1"], "error: --scheduler 'tcp://127.0.0.1': give tcp://HOST:PORT"),
        (
            ["agent", "--scheduler", "inproc://x"],
            "error: --scheduler 'inproc://x': give tcp://HOST:PORT, e.g. tcp://127.0.0.1:8786; the allowed schemes "
            "are tcp, ws, tls, wss\n",
        ),
        (
            ["agents", "--scheduler", "tcp://127.0.0.1:99999"],
            "error: --scheduler 'tcp://127.0.0.1:99999': give tcp://HOST:PORT, e.g. tcp://127.0.0.1:8786 (or 'local'",
        ),
    ],
)
def test_a_malformed_scheduler_address_is_one_line_before_dask_sees_it(args: list[str], message: str) -> None:
    """Dask's own error for it comes with a logged traceback; ours is one line."""
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2, res.output
    assert res.stderr.startswith(message) and "Traceback" not in res.output, res.output
