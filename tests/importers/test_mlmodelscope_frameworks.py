"""MLModelScope agent names map through one table (``AGENT_FRAMEWORKS``) to the package their constraint is about
and the repliscope framework / runtime that runs their files: ``Onnxruntime 1.7.1`` is ONNX Runtime 1.7.1, never
``onnx ==1.7.1`` (before: the onnx package was constrained, so the import could not be evaluated as written)."""

from __future__ import annotations

import contextlib
import hashlib
from pathlib import Path

import pytest
import yaml

from repliscope.errors import RepliscopeError
from repliscope.importers.batch import import_one
from repliscope.importers.mlmodelscope_frameworks import AGENT_FRAMEWORKS, agent_framework
from repliscope.importers.mlmodelscope_rules import pep440_constraint
from repliscope.manifest.schema import Manifest
from repliscope.stacks.spec import parse_spec
from tests.importers.test_mlmodelscope import LITE0_MLMS

FIX = Path(__file__).parent / "fixtures" / "mlmodelscope"
CORPUS = Path(__file__).parents[1] / "fixtures" / "mlmodelscope-corpus"


def test_every_agent_of_the_real_manifests_has_its_row() -> None:
    """Every ``framework.name`` of the 591 corpus manifests (read as text: the importer's YAML rules are tested
    elsewhere) is an agent of the table."""
    names = set()
    for p in CORPUS.rglob("*.yml"):
        lines = p.read_text(encoding="utf-8", errors="replace").splitlines()
        start = next(i for i, line in enumerate(lines) if line.startswith("framework:"))
        names.add(next(ln for ln in lines[start + 1 :] if ln.strip().startswith("name:")).split(":", 1)[1])
    cleaned = {n.split("#")[0].strip() for n in names}
    assert {n for n in cleaned if agent_framework(n) is None} == set()
    assert {agent_framework(n).title for n in cleaned} == {  # type: ignore[union-attr]
        "Caffe",
        "Caffe2",
        "CNTK",
        "MXNet",
        "PyTorch",
        "TensorFlow",
        "TensorRT",
    }


def test_the_importer_tests_manifests_get_their_agents_framework() -> None:
    """Real manifests the importer tests use, the first two of each agent's folder (cheap): a runnable TensorFlow
    graph keeps its constraint (the same package), every other agent's model gets the placeholders with a message
    naming that agent."""
    seen = set()
    for p in [p for folder in sorted(FIX.iterdir()) for p in sorted(folder.glob("*.yml"))[:2]]:
        raw = yaml.safe_load(p.read_text(encoding="utf-8"))
        agent = agent_framework(str(raw["framework"]["name"]))
        assert agent is not None, p
        with contextlib.suppress(RepliscopeError):
            result = import_one("mlmodelscope", p)
            fw, fmt = result.manifest["framework"], result.manifest["source"]["format"]
            if fmt == "tf_frozen_graph":
                assert agent.title == "TensorFlow"
                version = str(raw["framework"].get("version") or "")
                assert fw == {"name": "tensorflow", "version": pep440_constraint(version.split("||")[0], "f")}
            else:
                assert fw == {"name": "onnx", "version": ">=0"} and fmt == "onnx", p
                (msg,) = [w.message for w in result.warnings if w.code == "mlmodelscope.framework_not_runnable"]
                assert f"with {agent.title} " in msg
            seen.add((agent.title, fmt))
    assert seen == {
        ("Caffe", "onnx"),
        ("Caffe2", "onnx"),
        ("CNTK", "onnx"),
        ("MXNet", "onnx"),
        ("PyTorch", "onnx"),
        ("TensorFlow", "tf_frozen_graph"),
    }


@pytest.mark.parametrize(
    ("name", "version", "spec"),
    [("Onnxruntime", "1.7.1", "onnxruntime==1.7.1"), ("onnxruntime", "1.12", "onnxruntime<1.13.0,>=1.12.0")],
)
def test_onnxruntime_constraint_is_a_stack_spec_not_an_onnx_pin(
    tmp_path: Path, name: str, version: str, spec: str
) -> None:
    (tmp_path / "lite0.onnx").write_bytes(b"an onnx file")
    text = LITE0_MLMS.format(md5=hashlib.md5(b"an onnx file").hexdigest())
    text = text.replace("  name: Onnxruntime\n  version: '>=1.0'", f"  name: {name}\n  version: '{version}'")
    (tmp_path / "ort.yml").write_text(text, encoding="utf-8")
    result = import_one("mlmodelscope", tmp_path / "ort.yml")
    m = result.manifest
    assert m["framework"] == {"name": "onnx", "version": ">=0"}  # the hostile pin 'onnx ==1.7.1' is gone
    Manifest.model_validate({**m, "provenance": None})  # the translation is a valid manifest as written
    (w,) = [w for w in result.warnings if w.code == "mlmodelscope.framework_runtime"]
    assert w.field == "framework.version"
    given = w.message.split("--stack '")[1].rstrip("'")
    assert "--runtime onnxruntime" in w.message and parse_spec(given).text == spec
    assert set(AGENT_FRAMEWORKS) >= {"onnxruntime", "tensorflow", "pytorch", "caffe", "caffe2", "cntk", "mxnet"}
