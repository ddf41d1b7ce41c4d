"""A port file is data: a ``.keras`` candidate whose layer is a Python lambda (code that would create a file when
the model runs) is refused when it is read, by both ways a Darknet port is loaded, and the file never appears.
~1 s (Keras start-up shared with the other tests of this folder)."""

from __future__ import annotations

from pathlib import Path

import pytest

from repliscope.errors import RepliscopeError

keras = pytest.importorskip("keras")


def test_a_lambda_layer_in_a_port_file_never_runs(tmp_path: Path) -> None:
    from repliscope.convert.darknet_candidate import load_keras_candidate
    from repliscope.convert.darknet_keras import load_darknet_port

    sentinel = tmp_path / "sentinel"

    def touch(x: object) -> object:
        sentinel.write_text("ran")
        return x

    inp = keras.Input((4, 4, 3), name="data")
    model = keras.Model(inp, keras.layers.Lambda(lambda x: touch(x), name="convolutional_0")(inp))
    port = tmp_path / "hostile.keras"
    model.save(port)
    sentinel.unlink()  # written while the model was built: the loads below must not write it again
    with pytest.raises(RepliscopeError, match=r"cannot load the Keras model '.*hostile\.keras': ValueError: .*Lambda"):
        load_keras_candidate(port)
    with pytest.raises(RepliscopeError, match=r"cannot load the Keras port '.*hostile\.keras': ValueError: .*Lambda"):
        load_darknet_port(port)
    assert not sentinel.exists()
