"""A stack built from the package registry with a pinned old onnxruntime (1.20.1), and the stack matrix of
EfficientNet-Lite0 (exported to ONNX) on the foolbox images across ``current`` and that stack. Slow: the cold
build installs ~60 distributions (35-60 s here); the stack is created once per session under the session's
REPLISCOPE_CACHE and reused by the matrix test. Skipped with the reason when the registry cannot serve it."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from repliscope.cli.main import app
from repliscope.stacks.spec import StackError
from repliscope.stacks.store import Stack, create_stack, list_stacks
from repliscope.store.repository import RunStore
from tests.conftest import LITE0, LITE0_FOOLBOX_TOP1, _session_cache

pytest.importorskip("distributed")
pytestmark = [pytest.mark.slow, pytest.mark.stack, pytest.mark.network]

SPEC = "onnxruntime==1.20.1"
_UNREACHABLE = (
    "No matching distribution found",
    "Could not find a version",
    "NewConnectionError",
    "Temporary failure in name resolution",
    "Network is unreachable",
)


@pytest.fixture(scope="session")
def ort_stack(tmp_path_factory: pytest.TempPathFactory) -> Stack:
    """The onnxruntime 1.20.1 stack, created once in this session."""
    cache = _session_cache(tmp_path_factory)
    try:
        stack = create_stack(SPEC, cache_dir=cache)
    except StackError as exc:
        if any(text in str(exc) for text in _UNREACHABLE):
            pytest.skip(f"the package registry cannot serve {SPEC} for this Python: {str(exc).splitlines()[-1]}")
        if "not an editable or source install" in str(exc):
            pytest.skip(str(exc))
        raise
    return stack


def test_stack_from_the_registry(ort_stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> None:
    stack = ort_stack
    assert stack.path is not None and stack.resolved["onnxruntime"] == "1.20.1"
    lock = (stack.path / "lock.txt").read_text().splitlines()
    assert "onnxruntime==1.20.1" in lock
    (editable,) = (line for line in lock if line.startswith("-e "))  # repliscope from this checkout: its path, or
    # in a git clone with a remote pip's VCS form naming the commit ("-e git+file:///...@<sha>#egg=repliscope")
    assert editable == f"-e {Path(__file__).resolve().parents[2]}" or editable.endswith("#egg=repliscope")
    assert stack.lock_sha256 == hashlib.sha256((stack.path / "lock.txt").read_bytes()).hexdigest()
    probe = subprocess.run(
        [
            str(stack.python_executable),
            "-c",
            "import json, onnxruntime, repliscope, distributed\n"
            "from repliscope.stacks.current import current_stack\n"
            "print(json.dumps([onnxruntime.__version__, distributed.__version__, current_stack()]))",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    version, dist_version, current = json.loads(probe.stdout)
    assert version == "1.20.1" and dist_version == __import__("distributed").__version__
    assert (current["key"], current["spec"], current["lock_sha256"]) == (stack.key, SPEC, stack.lock_sha256)
    again = create_stack("ONNXRuntime == 1.20.1", cache_dir=_session_cache(tmp_path_factory))
    assert again.cached and again.key == stack.key  # its time: benchmarks/bench_stacks.py
    assert [s.key for s in list_stacks(_session_cache(tmp_path_factory))] == [stack.key]


def _lite0_onnx(folder: Path, cache: Path) -> Path:
    """EfficientNet-Lite0 exported to ONNX (this environment's torch) beside a manifest of framework onnx."""
    from repliscope.evaluation.run import RunSettings, prepare
    from repliscope.runtimes.onnx_export import export_to_onnx

    onnx_path, _ = export_to_onnx(prepare(LITE0, RunSettings(runtime="onnxruntime", threads=1)).artifact, cache)
    shutil.copyfile(onnx_path, folder / "lite0.onnx")
    manifest = yaml.safe_load(LITE0.read_text())
    manifest.pop("architecture")
    manifest.update(
        name="efficientnet-lite0-onnx",
        framework={"name": "onnx", "version": ">=1.14"},
        source={
            "uri": "lite0.onnx",
            "format": "onnx",
            "sha256": hashlib.sha256((folder / "lite0.onnx").read_bytes()).hexdigest(),
        },
    )
    path = folder / "lite0-onnx.yaml"
    path.write_text(yaml.safe_dump(manifest, sort_keys=False))
    return path


def test_matrix_current_vs_onnxruntime_1_20_1(
    ort_stack: Stack, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    import onnxruntime

    stack = ort_stack
    manifest = _lite0_onnx(tmp_path, _session_cache(tmp_path_factory))
    out = tmp_path / "matrix.html"
    res = CliRunner().invoke(
        app, ["stacks", str(manifest), "--stack", "current", "--stack", SPEC, "--report", str(out), "--json"]
    )
    assert res.exit_code == 0, res.output
    m = json.loads(res.stdout[res.stdout.index("{") :])
    assert [s["key"] for s in m["stacks"]] == ["current", stack.key]
    assert [s["versions"]["onnxruntime"] for s in m["stacks"]] == [onnxruntime.__version__, "1.20.1"]
    assert [s["top1"] for s in m["stacks"]] == [0.9, 0.9]  # 18 of 20: the two golden misses
    (pair,) = m["pairs"]
    assert (pair["compared"], pair["agree"], pair["agreement"], pair["flips_ab"], pair["flips_ba"]) == (
        20,
        20,
        1.0,
        [],
        [],
    )
    assert pair["outputs_compared"] == 20 and pair["max_abs_output_diff"] < 1e-4  # 0.0 measured on this machine
    db = RunStore()
    current_run, stack_run = (db.get(s["run_id"]) for s in m["stacks"])
    assert [s.top1 for s in current_run.samples] == [s.top1 for s in stack_run.samples] == LITE0_FOOLBOX_TOP1
    assert stack_run.software["stack"]["key"] == stack.key and stack_run.software["stack"]["spec"] == SPEC
    assert stack_run.software["distributions"]["onnxruntime"] == "1.20.1"
    assert stack_run.runtime["framework_version"] == "1.20.1"
    assert current_run.software["stack"]["key"] == "current"
    assert current_run.software["distributions"]["onnxruntime"] == onnxruntime.__version__
    assert db.get_stack_matrix(m["matrix_id"]).pairs[0].agreement == 1.0
    assert stack.key in out.read_text()


def test_an_agent_without_the_framework_never_gets_the_job(ort_stack: Stack, tmp_path: Path) -> None:
    """A real agent in the onnxruntime 1.20.1 stack (no torch) beside this environment's in-process agent: the
    torch-source Lite0 on onnxruntime (the export needs torch) always goes to the in-process agent, and restricted
    to the stack it is refused at once, the stack's agent named with the missing framework."""
    import uuid

    from repliscope.agents.cluster import Cluster
    from repliscope.agents.placement import NoAgentMatches, constraints_for
    from repliscope.agents.submit import submit_job
    from repliscope.job_execution import JobSpec
    from repliscope.manifest.loader import load_manifest
    from repliscope.stacks.run import start_stack_agent, stop_started, versions_differ, wait_for_started

    stack = ort_stack
    loaded = load_manifest(LITE0)
    with versions_differ(), Cluster.connect(None) as cluster:
        started = [start_stack_agent(cluster, stack, tmp_path)]
        try:
            wait_for_started(cluster, started, 180)
            assert len([a for a in cluster.agents() if a.alive]) == 2
            ran_on = []
            for _ in range(3):
                job = JobSpec(
                    uuid.uuid4().hex,
                    "evaluate",
                    "lite0",
                    loaded.text,
                    "onnxruntime",
                    "foolbox_imagenet",
                    "foolbox_imagenet",
                    {"limit": 2, "threads": 1, "batch_size": 1, "manifest_path": str(LITE0)},
                )
                ran_on.append(submit_job(cluster, job, constraints_for(loaded, "onnxruntime")).agent["stack"]["key"])
            assert ran_on == ["current"] * 3
            with pytest.raises(NoAgentMatches) as refused:
                constraints = constraints_for(loaded, "onnxruntime", stack=stack.key)
                submit_job(
                    cluster,
                    JobSpec(
                        uuid.uuid4().hex,
                        "evaluate",
                        "lite0",
                        loaded.text,
                        "onnxruntime",
                        "foolbox_imagenet",
                        "foolbox_imagenet",
                        {"limit": 2},
                    ),
                    constraints,
                )
            reasons = refused.value.reasons
            assert set(reasons) == {
                started[0].name,
                *(a.capabilities.agent_id for a in cluster.agents() if a.capabilities.stack.get("key") == "current"),
            }
            assert any("framework 'torch'" in why and "not installed" in why for why in reasons[started[0].name])
        finally:
            stop_started(started)
