"""Session-scoped fixtures for the diff tests: one Lite0 reference, its ONNX candidate, a batch of 8 real
foolbox images pre-processed by the manifest, and the layer-diff results everybody asserts on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

from repliscope.backends.onnxruntime.candidate import OnnxCandidate
from repliscope.datasets import resolve_dataset
from repliscope.diff.layers.driver import diff_layers
from repliscope.diff.layers.layer_result import LayerDiffResult
from repliscope.diff.layers.torch_reference import TorchReference
from repliscope.diff.task_level import first_batch
from repliscope.evaluation.run import PreparedRun, RunSettings, prepare
from tests.conftest import LITE0

BROKEN_INITIALIZER = "_blocks.5._expand_conv.weight"
"""The weight perturbed (x 1.01) in the broken candidate; its fused ONNX unit is keyed '_blocks.5._bn0'."""


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.conftest import _session_cache

    return _session_cache(tmp_path_factory)


@pytest.fixture(scope="session")
def lite0(cache_dir: Path) -> PreparedRun:
    return prepare(LITE0, RunSettings(runtime="torch", threads=2, batch_size=8, cache_dir=cache_dir))


@pytest.fixture(scope="session")
def batch(lite0: PreparedRun) -> tuple[list[str], np.ndarray]:
    return first_batch(lite0.pipeline, resolve_dataset("foolbox_imagenet"), 8, tuple(lite0.artifact.input_shape[1:]))


@pytest.fixture(scope="session")
def reference(lite0: PreparedRun) -> TorchReference:
    return TorchReference.from_artifact(lite0.artifact)


@pytest.fixture(scope="session")
def onnx_path(lite0: PreparedRun, cache_dir: Path) -> Path:
    from repliscope.runtimes.onnx_export import export_to_onnx

    return export_to_onnx(lite0.artifact, cache_dir)[0]


@pytest.fixture(scope="session")
def healthy(reference: TorchReference, onnx_path: Path, batch: tuple[list[str], np.ndarray]) -> LayerDiffResult:
    ids, x = batch
    return diff_layers(reference, OnnxCandidate(onnx_path), x, samples=ids)


@pytest.fixture(scope="session")
def broken(reference: TorchReference, onnx_path: Path, batch: tuple[list[str], np.ndarray]) -> LayerDiffResult:
    model = onnx.load(str(onnx_path))
    (init,) = [i for i in model.graph.initializer if i.name == BROKEN_INITIALIZER]
    weights = onnx.numpy_helper.to_array(init) * np.float32(1.01)
    init.CopyFrom(onnx.numpy_helper.from_array(weights, init.name))
    ids, x = batch
    return diff_layers(reference, OnnxCandidate(model, source="perturbed"), x, samples=ids)


# -- the small example models (examples/models): functional ops, op-level bug zoo ----------------------------

EXAMPLE_MODELS = Path(__file__).resolve().parents[2] / "examples" / "models"


def example_model(name: str) -> Any:
    """``examples/models/<name>.py``'s ``build()`` with the committed ``<name>.pt`` weights, in eval mode."""
    import importlib.util

    import torch

    spec = importlib.util.spec_from_file_location(f"repliscope_example_{name}", EXAMPLE_MODELS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model = module.build()
    model.load_state_dict(torch.load(EXAMPLE_MODELS / f"{name}.pt", weights_only=True))
    return model.eval()


def export_onnx(model: Any) -> onnx.ModelProto:
    """The model exported like the onnxruntime runtime does (dynamo, opset 18, optimized, batch dynamic)."""
    import torch

    from repliscope.runtimes.onnx_export import OPSET, quiet_torch_exporter

    with quiet_torch_exporter():
        program = torch.onnx.export(
            model,
            (torch.zeros(2, 3, 32, 32),),
            dynamo=True,
            opset_version=OPSET,
            input_names=["input"],
            output_names=["logits"],
            optimize=True,
            verbose=False,
            dynamic_shapes=({0: torch.export.Dim("batch")},),
        )
    assert program is not None
    return program.model_proto


@pytest.fixture(scope="session")
def tiny_x() -> np.ndarray:
    """float32 NCHW (4, 3, 32, 32), standard normal, seeded."""
    return np.random.default_rng(7).standard_normal((4, 3, 32, 32)).astype(np.float32)


@pytest.fixture(scope="session")
def tiny_resnet() -> tuple[Any, onnx.ModelProto]:
    model = example_model("tiny_resnet")
    return model, export_onnx(model)


@pytest.fixture(scope="session")
def tiny_transformer() -> tuple[Any, onnx.ModelProto]:
    model = example_model("tiny_transformer")
    return model, export_onnx(model)


def edited(model: onnx.ModelProto) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return copy


def fx_nodes(model: onnx.ModelProto, fx: str) -> list[onnx.NodeProto]:
    """The nodes exported from FX node ``fx`` (``add_40``: the trailing ``pkg.torch.onnx.name_scopes`` entry)."""
    from repliscope.diff.layers.onnx_units import node_op

    return [n for n in model.graph.node if node_op(n)[0] == fx]


def drop_node(model: onnx.ModelProto, node: onnx.NodeProto, keep: int) -> None:
    """Remove ``node``; its consumers read its input number ``keep`` instead (a dropped residual add)."""
    (out,) = node.output
    source = node.input[keep]
    model.graph.node.remove(node)
    for other in model.graph.node:
        for i, name in enumerate(other.input):
            if name == out:
                other.input[i] = source


def set_attribute(node: onnx.NodeProto, name: str, value: Any) -> None:
    (attr,) = [a for a in node.attribute if a.name == name]
    node.attribute.remove(attr)
    node.attribute.append(onnx.helper.make_attribute(name, value))


def find_node(model: onnx.ModelProto, op_type: str, scope: str, nth: int = 0) -> onnx.NodeProto:
    """The ``nth`` node of type ``op_type`` whose deepest module scope is ``scope`` (graph order)."""
    from repliscope.diff.layers.onnx_units import node_scopes

    found = [n for n in model.graph.node if n.op_type == op_type and (node_scopes(n) or [""])[-1] == scope]
    return found[nth]


def jitter_weights(model: onnx.ModelProto) -> onnx.ModelProto:
    """Every float weight (initializers with more than one element) moved by one ulp towards +inf."""
    out = edited(model)
    for init in out.graph.initializer:
        w = onnx.numpy_helper.to_array(init)
        if w.dtype == np.float32 and w.size > 1:
            init.CopyFrom(onnx.numpy_helper.from_array(np.nextafter(w, np.float32(np.inf)), init.name))
    return out


@pytest.fixture(scope="module")
def app() -> Any:
    """The ``diff`` command in a Typer app of its own (a second command keeps "diff" a sub-command, as in the real
    CLI), for the CLI tests of every diff kind."""
    import typer

    from repliscope.cli.diff_cmd import register

    app = typer.Typer()

    @app.command()
    def version() -> None:
        print("0")

    register(app)
    return app
