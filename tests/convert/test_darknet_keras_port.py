"""The Keras port file of a Darknet model is an ordinary ``.keras`` file: importing
:mod:`repliscope.convert.darknet_keras` registers its one custom layer (``repliscope>DarknetYolo``), so
``keras.saving.load_model`` loads it with no private call, and a port edited and saved again loads the same way.
The port is converted once per test process (~3 s with Keras's start-up, shared with tests/diff/layers)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.diff.layers._darknet_port import converted_port

keras = pytest.importorskip("keras")


def test_port_file_loads_with_keras_alone_after_the_import(tmp_path: Path) -> None:
    import repliscope.convert.darknet_keras as port_module

    assert keras.saving.get_registered_object("repliscope>DarknetYolo") is port_module.DarknetYolo
    model = keras.saving.load_model(converted_port(), compile=False)  # no custom_objects, no private function
    yolo = model.get_layer("yolo_16")
    assert type(yolo) is port_module.DarknetYolo and (yolo.anchors, yolo.entries) == (3, 85)
    # edited as the guide shows (a layer's attribute), saved, loaded again: the edit is in the file
    model.get_layer("convolutional_13").negative_slope = 0.01
    model.save(tmp_path / "edited.keras")
    again = keras.saving.load_model(tmp_path / "edited.keras", compile=False)
    assert again.get_layer("convolutional_13").negative_slope == pytest.approx(0.01)
    x = np.linspace(-1, 1, 2 * 13 * 13 * 255, dtype=np.float32).reshape(2, 13, 13, 255)
    out = keras.ops.convert_to_numpy(again.get_layer("yolo_16")(x))
    logistic = 1 / (1 + np.exp(-x))
    np.testing.assert_allclose(out[..., 4], logistic[..., 4], rtol=1e-6)  # objectness: logistic
    np.testing.assert_array_equal(out[..., 2:4], x[..., 2:4])  # w, h: unchanged


def test_a_file_that_is_no_port_is_one_error_naming_it(tmp_path: Path) -> None:
    from repliscope.convert.darknet_keras import load_darknet_port
    from repliscope.errors import RepliscopeError

    bad = tmp_path / "bad.keras"
    bad.write_bytes(b"not a zip")
    with pytest.raises(RepliscopeError, match=r"cannot load the Keras port '.*bad\.keras': "):
        load_darknet_port(bad)
    assert load_darknet_port(converted_port()).get_layer("yolo_23").entries == 85
