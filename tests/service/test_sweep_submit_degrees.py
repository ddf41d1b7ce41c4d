"""A sweep job's degrees are checked when the job is submitted, not when an agent runs it: ``POST /api/v1/jobs``
refuses a variant at a degree its manifest's pre-processing does not have with a 422 at ``body.options.variants``
naming the entry and the allowed degrees, before a job row is written or an agent is asked
(``JobKind.check`` of the pitfalls kind: :func:`repliscope.pitfalls.sweep.check_variants`, the very check the sweep
makes when it starts). ``repliscope pitfalls`` refuses the same entry with the same words, exit 2, one line,
before the model is loaded."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from repliscope.cli.main import app as cli_app
from repliscope.job_execution import JobSpec, RunOptions
from repliscope.job_kinds import JOB_KINDS, JobOptionError
from repliscope.manifest.loader import load_manifest
from tests.conftest import LITE0

OFFSETS = ", ".join(f"[{r}, {c}]" for r in range(-2, 3) for c in range(-2, 3) if (r, c) != (0, 0))
"""Every offset center_crop_offset has on Lite0's pre-processing (rows and columns within +-2, not [0, 0])."""


def _post(client: TestClient, headers: dict[str, str], ref: str, variants: list[str]) -> Any:
    body = {"kind": "pitfalls", "manifest": ref, "runtime": "onnxruntime", "dataset": "foolbox_imagenet"}
    return client.post("/api/v1/jobs", json={**body, "options": {"variants": variants}}, headers=headers)


def test_a_bad_degree_is_refused_at_submission_naming_the_field_and_the_allowed_degrees(
    client: TestClient,
    headers_for: Callable[[str], dict[str, str]],
    service_app: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def never(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("an agent was asked about a refused job")

    monkeypatch.setattr(service_app.state.executor, "check", never)  # placement: the agents
    monkeypatch.setattr(service_app.state.executor, "submit", never)
    runner = headers_for("runner")
    r = client.post("/api/v1/manifests", content=LITE0.read_bytes(), headers={**runner, "Content-Type": "text/yaml"})
    assert r.status_code in (200, 201), r.text
    ref = r.json()["ref"]
    monkeypatch.chdir(tmp_path)  # where `touch touched` would create its file, were the value ever run
    touched = tmp_path / "touched"
    cases = {
        "center_crop_offset[offset=[0, 0]]": f"offset=[0, 0] is not a degree of center_crop_offset on this "
        f"manifest's pipeline (allowed offset: {OFFSETS})",
        "center_crop_offset[offset=[1, 0, 0]]": "offset=[1, 0, 0] is not a degree of center_crop_offset",
        "normalize_before_cast[steps=1000000]": "steps=1000000 is not a degree of normalize_before_cast on this "
        "manifest's pipeline (allowed steps: 1, 2)",
        'resize_library_swapped[library="$(touch touched)"]': "library=$(touch touched) is not a degree of "
        "resize_library_swapped on this manifest's pipeline (allowed library: opencv, torch, go_imaging)",
    }
    # one request (each costs a token check): every refused entry named in the one error, the good one not
    r = _post(client, runner, ref, ["center_crop_offset[offset=[1, 0]]", *cases])
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert error["field"] == "body.options.variants", error
    parts = error["message"].split("; variant ")
    assert len(parts) == len(cases) and "offset=[1, 0] is" not in error["message"]
    for part, (variant, words) in zip(parts, cases.items(), strict=True):
        assert part.removeprefix("variant ").startswith(f"'{variant.replace(chr(34), '')}': "), part
        assert words in part, part
    # an unknown variant and an unknown parameter: refused by name before the manifest is read
    r = _post(client, runner, ref, ["center_crop_offsett[offset=[1, 0]]"])
    assert r.status_code == 422 and r.json()["error"]["field"] == "body.options.variants"
    assert "unknown pitfall 'center_crop_offsett'. Did you mean 'center_crop_offset'" in r.json()["error"]["message"]
    r = _post(client, runner, ref, ["center_crop_offset[shift=[1, 0]]"])
    assert r.status_code == 422 and "no parameter 'shift' (center_crop_offset's parameters: offset)" in r.text
    # an absurd degree count: 100 entries (the most a job takes), each refused in the one error; 101 not read
    many = [f"normalize_before_cast[steps={k}]" for k in range(3, 103)]
    r = _post(client, runner, ref, many)
    assert r.status_code == 422 and r.json()["error"]["field"] == "body.options.variants"
    assert r.json()["error"]["message"].count("is not a degree of normalize_before_cast") == 100
    r = _post(client, runner, ref, [*many, "normalize_before_cast[steps=1]"])
    assert r.status_code == 422 and r.json()["error"]["field"] == "body.options.variants", r.text

    assert not touched.exists()
    jobs = client.get("/api/v1/jobs", headers=runner)
    assert jobs.status_code == 200 and jobs.json() == []  # nothing was queued


def test_the_kind_check_accepts_the_degrees_the_manifest_has() -> None:
    """The pitfalls kind's check (what the API calls) passes the degrees ``pitfalls MANIFEST --list`` shows."""
    loaded = load_manifest(LITE0)
    kind = JOB_KINDS.get("pitfalls")

    def spec(variants: list[str]) -> JobSpec:
        return JobSpec("j", "pitfalls", "lite0@1", loaded.text, "onnxruntime", "d", "d", RunOptions(variants=variants))

    good = ["center_crop_offset[offset=[1,0]]", "center_crop_offset", "normalize_before_cast[steps=2]"]
    kind.check_job(spec(good), loaded)  # no error
    kind.check_job(spec([]), loaded)
    with pytest.raises(JobOptionError) as refused:
        kind.check_job(spec(["resize_library_swapped[library=pillow]"]), loaded)  # Lite0's own resize library
    assert refused.value.option == "variants"
    assert "(allowed library: opencv, torch, go_imaging)" in str(refused.value)
    assert JOB_KINDS.get("evaluate").check is None


def test_the_cli_refuses_a_bad_degree_in_one_line_before_the_model_is_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    def never(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the model was loaded for a refused degree")

    monkeypatch.setattr("repliscope.evaluation.run.prepare", never)
    args = ["pitfalls", str(LITE0), "--runtime", "onnxruntime", "--limit", "1"]
    res = CliRunner().invoke(cli_app, [*args, "--variant", "normalize_before_cast[steps=1000000]"])
    assert res.exit_code == 2, res.output
    assert res.stderr == (
        "error: variant 'normalize_before_cast[steps=1000000]': steps=1000000 is not a degree of "
        "normalize_before_cast on this manifest's pipeline (allowed steps: 1, 2)\n"
    )
