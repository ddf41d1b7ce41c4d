"""A tiny ONNX model whose nodes carry the torch exporter's ``pkg.torch.onnx.name_scopes`` metadata."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from repliscope.runtimes import ModelArtifact

# (node name, op type, module scopes + op name): the shared ``act`` module is called twice
NODES = [
    ("node_mul", "Mul", ["", "scale", "mul"]),
    ("node_relu", "Relu", ["", "act", "relu"]),
    ("node_sigmoid", "Sigmoid", ["", "gate", "sigmoid"]),
    ("node_relu_1", "Relu", ["", "act", "relu_1"]),
]
KEYS = ["scale", "act", "gate", "act#2"]


def tiny_onnx(folder: Path) -> ModelArtifact:
    """float32 (N, 64) -> (N, 64): Mul by 0.5, Relu, Sigmoid, Relu; opset 17."""
    import onnx
    from onnx import TensorProto, helper

    names = ["input", "t0", "t1", "t2", "output"]
    nodes = []
    for i, (name, op, scopes) in enumerate(NODES):
        inputs = [names[i], "half"] if op == "Mul" else [names[i]]
        node = helper.make_node(op, inputs, [names[i + 1]], name=name)
        entry = node.metadata_props.add()
        entry.key, entry.value = "pkg.torch.onnx.name_scopes", repr(scopes)
        nodes.append(node)
    half = helper.make_tensor("half", TensorProto.FLOAT, [], [0.5])
    graph = helper.make_graph(
        nodes,
        "tiny",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 64])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["N", 64])],
        [half],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    path = folder / "tiny.onnx"
    onnx.save(model, str(path))
    return ModelArtifact(
        path=path,
        sha256=hashlib.sha256(path.read_bytes()).hexdigest(),
        format="onnx",
        input_name="input",
        input_shape=(-1, 64),
        input_dtype="float32",
    )


def batch(n: int = 2) -> np.ndarray:
    return np.linspace(-1, 1, n * 64, dtype=np.float32).reshape(n, 64)
