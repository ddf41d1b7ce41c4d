"""Builders of hostile ONNX models for the external-data tests (issue 20 item 2)."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def classifier_with_external_weights(
    folder: Path, name: str = "model.onnx", location: str = "weights.bin", classes: int = 64
) -> Path:
    """A (1, classes) float32 input -> input + W classifier whose initializer W (classes float32) lives in
    ``folder/weights.bin``; then its location is rewritten to ``location`` (the file is not moved)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weights = numpy_helper.from_array(np.arange(classes, dtype=np.float32), name="W")
    graph = helper.make_graph(
        [helper.make_node("Add", ["input", "W"], ["logits"])],
        "g",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [-1, classes])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [-1, classes])],
        [weights],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    path = folder / name
    onnx.save_model(
        model,
        str(path),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="weights.bin",
        size_threshold=0,
    )
    if location != "weights.bin":
        proto = onnx.load(str(path), load_external_data=False)
        for entry in proto.graph.initializer[0].external_data:
            if entry.key == "location":
                entry.value = location
            if entry.key == "length":  # the whole target file
                entry.value = str(classes * 4)
        path.write_bytes(proto.SerializeToString())
    return path


def with_external_entries(path: Path, entries: list[tuple[str, str]], data_location: int | None = None) -> Path:
    """Rewrite the external_data entries of the first initializer of the model at ``path`` (and its
    data_location when given); returns ``path``."""
    import onnx

    proto = onnx.load(str(path), load_external_data=False)
    tensor = proto.graph.initializer[0]
    del tensor.external_data[:]
    for key, value in entries:
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    if data_location is not None:
        tensor.data_location = data_location
    path.write_bytes(proto.SerializeToString())
    return path
