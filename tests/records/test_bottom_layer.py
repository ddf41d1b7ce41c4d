"""The bottom layer, ``repliscope.records``: it imports nothing of repliscope (import-linter's contract in
``pyproject.toml`` forbids every other module, and an upward import in a copy of the package breaks it; a fresh
process loads nothing else), and the evaluation package hands on the very same types, so records, their hashes
and the importers of ``repliscope.evaluation.record`` are unchanged."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import repliscope
import repliscope.evaluation.record as evaluation_record
import repliscope.records.evaluation as record_types

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"
BOTTOM_CONTRACT = "The bottom layer (repliscope.records, repliscope.errors) imports nothing of repliscope above it"


def test_an_upward_import_in_the_bottom_layer_breaks_the_contract(tmp_path: Path) -> None:
    """A copy of the package whose stack matrix types import the stacks package again (what the bottom layer
    replaced): ``lint-imports`` (``make lint``) fails and names the contract and the import; the tree as it stands
    keeps the contract. The records may raise the exceptions of ``repliscope.errors``, the bottom's other half."""
    contracts = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["tool"]["importlinter"]["contracts"]
    contract = next(c for c in contracts if c["name"] == BOTTOM_CONTRACT)
    assert contract["source_modules"] == ["repliscope.records", "repliscope.errors"]
    assert contract["forbidden_modules"] == ["repliscope.*"]
    assert contract["ignore_imports"] == ["repliscope.records.** -> repliscope.errors"]
    lint = [str(Path(sys.executable).with_name("lint-imports")), str(PYPROJECT)]

    def run(env: dict[str, str] | None = None) -> tuple[int, str]:
        out = subprocess.run(lint, capture_output=True, text=True, cwd=PYPROJECT.parent, env=env)
        return out.returncode, " ".join(out.stdout.split())  # lines are wrapped at the terminal's width

    assert f"{BOTTOM_CONTRACT} KEPT" in run()[1]

    shutil.copytree(Path(repliscope.__file__).parent, tmp_path / "repliscope")
    hostile = tmp_path / "repliscope" / "records" / "stack_matrix.py"
    hostile.write_text(hostile.read_text(encoding="utf-8") + "\nfrom repliscope.stacks.spec import CURRENT\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    code, broken = run(env)
    assert code == 1
    assert f"{BOTTOM_CONTRACT} BROKEN" in broken
    assert "repliscope.records is not allowed to import repliscope.stacks" in broken
    assert "repliscope.records.stack_matrix -> repliscope.stacks.spec" in broken


def test_importing_the_bottom_layer_loads_no_other_module_of_repliscope() -> None:
    code = (
        "import json, pkgutil, importlib, sys, repliscope.records as r, repliscope.errors\n"
        "for m in pkgutil.iter_modules(r.__path__, 'repliscope.records.'): importlib.import_module(m.name)\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('repliscope'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded = json.loads(out)
    assert {"repliscope.records.evaluation", "repliscope.records.stack", "repliscope.records.stack_matrix"} <= set(
        loaded
    )
    assert [
        m for m in loaded if m not in ("repliscope", "repliscope.errors") and not m.startswith("repliscope.records")
    ] == []


def test_the_evaluation_package_hands_on_the_same_types() -> None:
    for name in record_types.__dict__:
        value = getattr(record_types, name)
        if isinstance(value, type) and value.__module__ == record_types.__name__ and not name.startswith("_"):
            assert getattr(evaluation_record, name) is value, name
    assert evaluation_record.result_hash is record_types.result_hash
    assert evaluation_record.RUN_ID_PATTERN == record_types.RUN_ID_PATTERN
    assert issubclass(evaluation_record.ImportedRecord, record_types.EvaluationRecord)


def test_result_hash_is_the_one_records_were_stored_with() -> None:
    """The hash of these four samples, computed with evaluation/record.py before the types moved."""
    s, d, g = record_types.SamplePrediction, record_types.Detection, record_types.SegmentationSample
    samples = [
        s(sample_id="a.jpg", label=3, topk_indices=[3, 1], topk_probs=[0.91234567, 0.05]),
        s(sample_id="b.jpg", label=None, error="decode failed"),
        s(sample_id="c.jpg", label=None, detections=[d(box=[1.00049, 2, 30.5, 40], score=0.8765432, class_id=18)]),
        s(
            sample_id="d.png",
            label=None,
            segmentation=g(size_hw=(2, 2), num_classes=2, confusion=[[0, 0, 3], [1, 1, 1]], predicted={"0": "03"}),
        ),
    ]
    assert record_types.result_hash(samples) == "46185ecdd68907827e1bb230d8477add7499da80220d97204e424b6b49c93374"
