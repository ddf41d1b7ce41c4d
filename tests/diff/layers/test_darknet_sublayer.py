"""A diverging unit names the candidate sub-layer that makes the error: the Keras unit of ``convolutional_13`` is
``convolutional_13_conv`` (Conv2D) then ``convolutional_13`` (LeakyReLU); libdarknet's output tells the value
before the activation (leaky is invertible), so a wrong slope is the LeakyReLU's, an activation inside the Conv2D is
the Conv2D's.
The same for an ONNX file's nodes. ~0.5 s per diff after one conversion and one libdarknet run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import onnx
import pytest

from tests.diff.layers._darknet_port import converted_onnx, converted_port, dog_outputs, edit_port, layer, leaky_slope
from tests.yolo._assets import cfg_path, weights_path

keras = pytest.importorskip("keras")


def _golden(candidate: Path, fmt: str):
    from repliscope.convert.darknet_candidate import verify_candidate

    x, outs = dog_outputs()
    return verify_candidate(
        cfg_path(), weights_path(), x, str(candidate), fmt, modes=("golden",), reference_outputs=outs
    )


def test_the_keras_sub_layer_that_makes_the_error_is_named(tmp_path: Path) -> None:
    r = _golden(edit_port(converted_port(), tmp_path / "slope.keras", leaky_slope("convolutional_13", 0.01)), "keras")
    first = r.first_divergent["golden"]
    assert first is not None and first.path == "convolutional_13"
    assert first.made_by == "convolutional_13 (LeakyReLU)"
    assert first.describe().startswith(
        "convolutional_13: Conv at yolov3-tiny.cfg:107, made by the candidate's convolutional_13 (LeakyReLU), "
        "max |err| "
    )
    (note,) = [n for n in r.notes if "sub-layer" in n]
    assert note.startswith(
        "'convolutional_13': golden: the error is made by the candidate's sub-layer convolutional_13 (LeakyReLU): "
        "its input (convolutional_13_conv (Conv2D)'s output) matches the reference output before its leaky "
        "activation (convolution + bias); its output differs from the reference output by up to 0.88"
    )

    # a Conv2D that also applies an activation of its own (its config's "activation"): the Conv2D makes it
    def conv_with_relu(config: dict[str, Any]) -> None:
        layer(config, "convolutional_4_conv")["config"]["activation"] = "relu"

    r = _golden(edit_port(converted_port(), tmp_path / "conv.keras", conv_with_relu), "keras")
    first = r.first_divergent["golden"]
    assert first is not None and (first.path, first.made_by) == ("convolutional_4", "convolutional_4_conv (Conv2D)")
    assert [row.path for row in r.layers if row.made_by] == ["convolutional_4"]  # the units that pass name nothing


def test_the_onnx_node_that_makes_the_error_is_named(tmp_path: Path) -> None:
    model = onnx.load(str(converted_onnx()))
    (leaky,) = [n for n in model.graph.node if n.output[0] == "convolutional_13"]
    assert leaky.op_type == "LeakyRelu"
    (alpha,) = leaky.attribute
    alpha.f = 0.01
    onnx.save(model, str(tmp_path / "slope.onnx"))
    first = _golden(tmp_path / "slope.onnx", "onnx").first_divergent["golden"]
    assert first is not None and (first.path, first.made_by) == ("convolutional_13", "convolutional_13 (LeakyRelu)")
