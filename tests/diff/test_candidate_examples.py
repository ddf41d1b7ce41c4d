"""The example models with a local architecture module (examples/tiny-resnet.yaml, tiny-transformer.yaml): torch
vs onnxruntime layer diff, and a user's ONNX file (the export) as ``--candidate``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from repliscope.cli.main import app
from repliscope.evaluation.run import RunSettings, prepare
from tests.conftest import EXAMPLES


@pytest.mark.parametrize("name, units", [("tiny-resnet", 22), ("tiny-transformer", None)])
def test_torch_vs_onnxruntime_layer_diff_passes(name: str, units: int | None) -> None:
    res = CliRunner().invoke(
        app,
        [
            "diff",
            str(EXAMPLES / f"{name}.yaml"),
            "--runtimes",
            "torch",
            "onnxruntime",
            "--layers",
            "--batch",
            "2",
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["reference"]["module"] == {"tiny-resnet": "TinyResNet", "tiny-transformer": "TinyTransformer"}[name]
    assert data["first_divergent"] == {"golden": None, "carried": None}
    assert data["output"] is not None and data["output"]["passed"]
    for mode in ("golden", "carried"):
        assert data["summary"][mode]["failed"] == 0 and data["summary"][mode]["compared"] >= 10
    if units is not None:
        assert data["summary"]["golden"]["reference_units"] == units


def test_a_users_onnx_file_is_paired_by_its_exporter_metadata(cache_dir: Path, tmp_path: Path) -> None:
    from repliscope.runtimes.onnx_export import export_to_onnx

    prepared = prepare(EXAMPLES / "tiny-resnet.yaml", RunSettings(runtime="torch", cache_dir=cache_dir))
    exported, _ = export_to_onnx(prepared.artifact, cache_dir)
    mine = tmp_path / "my_model.onnx"
    mine.write_bytes(exported.read_bytes())
    res = CliRunner().invoke(
        app, ["diff", str(EXAMPLES / "tiny-resnet.yaml"), "--candidate", str(mine), "--batch", "2", "--json"]
    )
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["candidate"]["format"] == "onnx" and data["candidate"]["mapping_origin"] == "onnx metadata"
    assert data["candidate"]["model"] == str(mine)
    assert data["summary"]["golden"]["failed"] == 0 and data["summary"]["carried"]["failed"] == 0


def _stripped(exported: Path, target: Path, bug: bool = False) -> Path:
    """The export without the torch exporter's metadata (as another tool would write it); ``bug``: the first
    Relu after an Add becomes an Elu."""
    import onnx

    model = onnx.load(str(exported))
    adds = {o for n in model.graph.node if n.op_type == "Add" for o in n.output}
    for node in model.graph.node:
        del node.metadata_props[:]
    if bug:
        first = next(n for n in model.graph.node if n.op_type == "Relu" and n.input[0] in adds)
        first.op_type = "Elu"
    onnx.save(model, str(target))
    return target


def test_an_onnx_file_without_metadata_is_run_node_by_node(cache_dir: Path, tmp_path: Path) -> None:
    from repliscope.runtimes.onnx_export import export_to_onnx

    prepared = prepare(EXAMPLES / "tiny-resnet.yaml", RunSettings(runtime="torch", cache_dir=cache_dir))
    exported, _ = export_to_onnx(prepared.artifact, cache_dir)
    base = ["diff", str(EXAMPLES / "tiny-resnet.yaml"), "--batch", "2", "--json", "--candidate"]
    res = CliRunner().invoke(app, [*base, str(_stripped(exported, tmp_path / "plain.onnx"))])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["candidate"]["mapping_origin"] == "proposed" and data["candidate"]["format"] == "onnx"
    assert data["summary"]["golden"]["failed"] == 0 and data["summary"]["golden"]["compared"] >= 10
    bad = CliRunner().invoke(app, [*base, str(_stripped(exported, tmp_path / "elu.onnx", bug=True))])
    assert bad.exit_code == 1
    first = json.loads(bad.stdout)["first_divergent"]["golden"]
    assert first["path"] == "layer1.0/relu#2" and first["source"].endswith("tiny_resnet.py:31")


@pytest.mark.parametrize("name, units", [("tiny-resnet", 22), ("tiny-transformer", 28)])
def test_torch_port_of_each_example_replays_every_op_exactly(name: str, units: int) -> None:
    """The transformer's reshape(n, t, 3, heads, d) replays with the golden batch's n (recorded on that batch)."""
    ports = Path(__file__).parent / "_ports.py"
    res = CliRunner().invoke(
        app, ["diff", str(EXAMPLES / f"{name}.yaml"), "--candidate", f"{ports}:same", "--batch", "2", "--json"]
    )
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["candidate"]["mapping_origin"] == "by name" and len(data["candidate"]["pairs"]) == units
    for mode in ("golden", "carried"):
        assert data["summary"][mode]["compared"] == units and data["summary"][mode]["max_ratio"] == 0.0
