"""Reading a TensorFlow frozen graph: its GraphDef and its tensor names. Shared by the TensorFlow runner and the
tf2onnx conversion (:mod:`repliscope.runtimes.tf2onnx_convert`), below both (TensorFlow imported on use only)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from repliscope.runtimes.errors import ModelLoadError


def tensor_name(name: str) -> str:
    """A graph tensor name ``op:index`` (``image_tensor:0``); anything else is an error."""
    op, sep, index = name.rpartition(":")
    if not sep or not op or not index.isdigit():
        raise ModelLoadError(
            f"'{name}' is not a graph tensor name: a frozen graph's inputs and outputs are named "
            "'operation:index', e.g. 'image_tensor:0'"
        )
    return name


def read_graph_def(path: Path) -> Any:
    """The ``tf.compat.v1.GraphDef`` serialised in ``path``."""
    import tensorflow as tf

    graph_def = tf.compat.v1.GraphDef()
    try:
        graph_def.ParseFromString(Path(path).read_bytes())
    except Exception as exc:
        raise ModelLoadError(f"'{path}' is not a serialised GraphDef: {type(exc).__name__}: {exc}") from exc
    return graph_def
