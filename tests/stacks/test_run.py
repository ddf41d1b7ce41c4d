"""run_stacks and the ``stacks`` / ``stack`` / ``report`` commands on a real in-process scheduler with a real agent
process: the second stack is a cheap venv whose site-packages are this environment's (a ``.pth`` file; pip
mocked), so it runs the same software under its own stack key. The registry-built stack is in test_real_stack.py.
"""

from __future__ import annotations

import json
import site
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from repliscope.cli.main import app
from repliscope.stacks import store
from repliscope.stacks.run import run_stacks
from repliscope.stacks.spec import StackError
from repliscope.stacks.store import Stack, create_stack, list_stacks
from repliscope.store.repository import RunStore
from tests.conftest import REPO

pytest.importorskip("distributed")
pytestmark = pytest.mark.stack  # creates (cheap) stack venvs

RECT = REPO / "tests" / "fixtures" / "detection" / "rect-detector.yaml"
RESOLVED = {"onnxruntime": "0.0.0-this-environment"}


@pytest.fixture
def twin(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Stack]:
    """A stack 'onnxruntime' (created under tmp_path's cache) that imports this environment's packages."""
    monkeypatch.setenv("REPLISCOPE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(store, "resolve", lambda spec, root, on_line=None: dict(RESOLVED))

    def run_pip(args: list[str], on_line: object, what: str) -> None:
        if "-e" in args:  # the venv "installs" this environment: its site-packages on the path
            venv_python = Path(args[args.index("--python") + 1])
            lib = next((venv_python.parent.parent / "lib").glob("python3*"))
            (lib / "site-packages" / "twin.pth").write_text(  # addsitedir: its .pth files (editables) too
                f"import site; site.addsitedir({site.getsitepackages()[0]!r})\n"
            )

    monkeypatch.setattr(store, "_run_pip", run_pip)
    yield create_stack("onnxruntime")


def test_matrix_of_current_and_a_twin_stack(twin: Stack) -> None:
    runs = CliRunner().invoke(
        app,
        [
            "stacks",
            str(RECT),
            "--stack",
            "current",
            "--stack",
            twin.key,
            "--dataset",
            "synthetic_detection",
            "--limit",
            "6",
            "--json",
        ],
    )
    assert runs.exit_code == 0, runs.output
    m = json.loads(runs.stdout[runs.stdout.index("{") :])
    assert [s["key"] for s in m["stacks"]] == ["current", twin.key]
    assert m["runtime"] == "onnxruntime" and m["dataset"]["n"] == 6 and m["manifest"]["name"] == "rect-detector"
    assert [s["ap"] for s in m["stacks"]] == [1.0, 1.0] and [s["top1"] for s in m["stacks"]] == [None, None]
    assert m["stacks"][1]["agent_id"].startswith(f"stack-{twin.key}-")
    (pair,) = m["pairs"]
    assert (pair["a"], pair["b"], pair["compared"], pair["agreement"]) == ("current", twin.key, 6, None)
    assert pair["max_abs_output_diff"] == 0.0 and pair["outputs_compared"] == 6 and pair["result_hash_equal"]

    db = RunStore()
    stored = db.get_stack_matrix(m["matrix_id"][:8])
    assert stored.model_dump(mode="json") == m
    current_run, twin_run = (db.get(s["run_id"]) for s in m["stacks"])
    assert current_run.software["stack"]["key"] == "current"
    assert twin_run.software["stack"] == {
        **twin_run.software["stack"],
        "key": twin.key,
        "spec": "onnxruntime",
        "lock_sha256": twin.lock_sha256,
    }
    assert twin_run.software["stack"]["prefix"] == str(twin.path / "venv")
    assert twin_run.result_hash == current_run.result_hash
    assert db.get_job_result(f"stack-matrix-{m['matrix_id']}-{twin.key}").run_ids == [twin_run.run_id]

    out = twin.path.parent / "m.html"  # type: ignore[union-attr]
    report = CliRunner().invoke(app, ["report", m["matrix_id"][:10], "--out", str(out)])
    assert report.exit_code == 0 and f"wrote stack matrix report {out}" in report.output
    html = out.read_text()
    assert twin.key in html and "rect-detector 1.0.0 across 2 software stacks" in html and "data:image/png" in html


def test_run_stacks_refuses_a_stack_twice_and_reports_an_agent_that_cannot_start(twin: Stack) -> None:
    with pytest.raises(StackError, match=f"names stack {twin.key} more than once"):
        run_stacks(RECT, [twin.key, "onnxruntime"], "onnxruntime", "synthetic_detection")
    with pytest.raises(StackError, match=r"no stack 'abcdef123456' \(stacks: " + twin.key):
        run_stacks(RECT, ["current", "abcdef123456"], "onnxruntime", "synthetic_detection")
    (twin.path / "venv" / "lib" / "python3.11" / "site-packages" / "twin.pth").unlink()  # type: ignore[operator]
    with pytest.raises(
        StackError,
        match=rf"the agent of stack {twin.key} \(onnxruntime\) exited with code 1 "
        r"before joining tls://127\.0\.0\.1:\d+:\n.*No module named",
    ):
        run_stacks(RECT, ["current", twin.key], "onnxruntime", "synthetic_detection", limit=2)


def test_stack_commands(twin: Stack) -> None:
    runner = CliRunner()
    listed = runner.invoke(app, ["stack", "list", "--json"])
    assert listed.exit_code == 0 and [s["key"] for s in json.loads(listed.stdout)] == [twin.key]
    again = runner.invoke(app, ["stack", "create", "ONNXRuntime"])
    assert again.exit_code == 0 and f"cached: stack {twin.key} (onnxruntime)" in again.output
    table = runner.invoke(app, ["stack", "list"])
    assert twin.key in table.output and "0.0.0-this-" in table.output  # the version (folded at 80 columns)
    bad = runner.invoke(app, ["stack", "create", "--", "-e ."])
    assert bad.exit_code == 2 and "error: stack spec requirement '-e': pip options" in bad.output
    assert runner.invoke(app, ["stack", "remove", "current"]).exit_code == 2
    gone = runner.invoke(app, ["stack", "remove", twin.key[:6]])
    assert gone.exit_code == 0 and gone.output == f"removed stack {twin.key} (onnxruntime)\n"
    assert list_stacks() == []
    none = runner.invoke(app, ["stacks", str(RECT), "--stack", "current", "--report", "x.pdf"])
    assert none.exit_code == 2 and "give a .html or .md file" in none.output


def test_on_a_tcp_scheduler_a_live_agent_is_reused_and_kept(twin: Stack, tmp_path: Path) -> None:
    """A real ``dask scheduler`` with a live ``current`` agent: run_stacks reuses it (and leaves it running) and
    starts, then stops, an agent for the twin stack."""
    from repliscope.agents.cluster import Cluster
    from tests.agents.procs import Processes

    procs = Processes(tmp_path)
    try:
        address = procs.scheduler()
        procs.agent("keep-me", address)
        with Cluster.connect(address) as cluster:
            cluster.wait_for_agents(1, timeout=60)
            lines: list[str] = []
            m, outcomes = run_stacks(
                RECT, ["current", twin.key], "onnxruntime", "synthetic_detection", cluster, log=lines.append, limit=3
            )
            assert m.stacks[0].agent_id == "keep-me" and "stack current: reusing live agent keep-me" in lines
            assert str(m.stacks[1].agent_id).startswith(f"stack-{twin.key}-")
            assert [o.agent["stack"]["key"] for o in outcomes] == ["current", twin.key]
            assert m.pairs[0].max_abs_output_diff == 0.0 and m.pairs[0].result_hash_equal
            alive = {a.capabilities.agent_id for a in cluster.agents() if a.alive}
            assert alive == {"keep-me"}  # the started agent was stopped, the live one kept
        assert procs.procs["keep-me"].poll() is None
    finally:
        procs.stop_all()


def test_a_stack_whose_runtime_refuses_the_model_is_a_failed_entry_and_the_others_are_compared(
    twin: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As onnxruntime 1.16 does with an IR-10 model exported by today's torch: the twin's onnxruntime refuses to
    load any model; the matrix keeps that stack as a failed entry (the reason, no run, no pair), exit 0."""
    site_packages = twin.path / "venv" / "lib" / "python3.11" / "site-packages"  # type: ignore[operator]
    (site_packages / "twin_refuse.py").write_text(
        "import onnxruntime\n"
        "class _Refusing(onnxruntime.InferenceSession):\n"
        "    def __init__(self, *args, **kwargs):\n"
        "        raise RuntimeError('Unsupported model IR version: 10, max supported IR version: 9')\n"
        "onnxruntime.InferenceSession = _Refusing\n"
    )
    (site_packages / "twin_refuse.pth").write_text("import twin_refuse\n")
    runs = CliRunner().invoke(
        app,
        [
            "stacks",
            str(RECT),
            "--stack",
            "current",
            "--stack",
            twin.key,
            "--dataset",
            "synthetic_detection",
            "--limit",
            "3",
            "--json",
        ],
    )
    assert runs.exit_code == 0, runs.output
    m = json.loads(runs.stdout[runs.stdout.index("{") :])
    current, failed = m["stacks"]
    assert (current["key"], current["ap"], current["error"]) == ("current", 1.0, None)
    assert (failed["key"], failed["run_id"], failed["ap"]) == (twin.key, None, None)
    assert "Unsupported model IR version: 10" in failed["error"] and m["pairs"] == []
    assert [r.run_id for r in RunStore().list()] == [current["run_id"]]
    from repliscope.cli.output import console

    monkeypatch.setattr(console, "_width", 200)  # one table row a line
    table = CliRunner().invoke(
        app,
        [
            "stacks",
            str(RECT),
            "--stack",
            twin.key,
            "--stack",
            "current",
            "--dataset",
            "synthetic_detection",
            "--limit",
            "3",
        ],
    )
    assert table.exit_code == 0, table.output
    assert f"stack {twin.key} (onnxruntime) could not run the job: " in table.output
    failed_row = next(line for line in table.output.splitlines() if line.startswith(f"│ {twin.key}"))
    reference_row = next(line for line in table.output.splitlines() if line.startswith("│ current"))
    assert "│ failed " in failed_row and "(reference)" in reference_row and "100.00 %" in reference_row
    matrix_id = RunStore().list_stack_matrices(limit=1)[0].matrix_id
    out = twin.path.parent / "failed.md"  # type: ignore[union-attr]
    assert CliRunner().invoke(app, ["report", matrix_id, "-f", "md", "--out", str(out)]).exit_code == 0
    assert f"stack {twin.key} (onnxruntime) could not run the job: onnxruntime cannot load" in out.read_text()


def test_evaluate_with_stack_starts_an_agent_in_it_runs_there_and_stops_it(twin: Stack) -> None:
    runs = CliRunner().invoke(
        app, ["evaluate", str(RECT), "--dataset", "synthetic_detection", "--limit", "2", "--stack", twin.key, "--json"]
    )
    assert runs.exit_code == 0, runs.output
    assert f"starting a local agent in stack {twin.key} (onnxruntime)" in runs.output
    record = json.loads(runs.stdout[runs.stdout.index("{") :])
    assert record["software"]["stack"]["key"] == twin.key
    assert record["hardware"]["agent_id"].startswith(f"stack-{twin.key}-")
    assert [r.run_id for r in RunStore().list()] == [record["run_id"]]
    bad = CliRunner().invoke(app, ["evaluate", str(RECT), "--dataset", "synthetic_detection", "--stack", "abcdef99"])
    assert bad.exit_code == 2 and "no stack 'abcdef99'" in bad.output
