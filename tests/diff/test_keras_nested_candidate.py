"""A Keras 3 model's layers AND sub-layers as candidate units, by path (``backbone/block/bn``): golden calls the
layer alone, carried wraps its ``call`` for one forward and restores it."""

from __future__ import annotations

import numpy as np
import pytest

from repliscope.errors import RepliscopeError


def _model():  # type: ignore[no-untyped-def]
    keras = pytest.importorskip("keras")
    layers = keras.layers
    block_in = keras.Input((6, 6, 4))
    bn = layers.BatchNormalization(epsilon=1e-3, name="bn")
    block = keras.Model(
        block_in, layers.ReLU(name="relu")(bn(layers.Conv2D(4, 3, padding="same", name="conv")(block_in))), name="block"
    )
    bb_in = keras.Input((6, 6, 3))
    backbone = keras.Model(bb_in, block(layers.Conv2D(4, 1, name="stem")(bb_in)), name="backbone")
    inp = keras.Input((6, 6, 3))
    model = keras.Model(inp, layers.GlobalAveragePooling2D(name="pool")(backbone(inp)), name="nested")
    bn.set_weights([np.full(4, 2, "f4"), np.full(4, 0.5, "f4"), np.zeros(4, "f4"), np.ones(4, "f4")])
    return keras, model


def test_nested_paths_golden_and_carried() -> None:
    from repliscope.backends.keras.candidate import KerasNestedCandidate

    keras, model = _model()
    cand = KerasNestedCandidate(model, keras, source="mem")
    x = np.random.default_rng(0).normal(size=(2, 3, 6, 6)).astype(np.float32)  # NCHW, as the reference gives it
    names = [u.name for u in cand.units(x)]
    assert names == [  # in the order the forward ENDS them, as a reference lists its units
        "backbone/stem",
        "backbone/block/conv",
        "backbone/block/bn",
        "backbone/block/relu",
        "backbone/block",
        "backbone",
        "pool",
    ]
    shapes = {u.name: u.shape for u in cand.units(x)}
    assert shapes["backbone/block/bn"] == (2, 6, 6, 4) and shapes["pool"] == (2, 4)
    # golden: the BN sub-layer alone, on an NCHW input, gives NHWC (the driver transposes: output_layout)
    y = np.ones((2, 4, 6, 6), np.float32)
    got = cand.run_layer("backbone/block/bn", [y])
    np.testing.assert_allclose(got, np.full((2, 6, 6, 4), 2 / np.sqrt(1 + 1e-3) + 0.5, np.float32), rtol=1e-6)
    # carried: one forward, the sub-layers' outputs in call order; the wrapped calls are removed afterwards
    carried = dict(cand.forward_layers(x, ["backbone/block/relu", "backbone/block/bn"]))
    assert list(carried) == ["backbone/block/bn", "backbone/block/relu"]
    np.testing.assert_allclose(carried["backbone/block/relu"], np.maximum(carried["backbone/block/bn"], 0), rtol=0)
    bn = cand.layer("backbone/block/bn")
    assert "call" not in vars(bn)
    with pytest.raises(
        RepliscopeError, match=r"has no layer 'bnn' in backbone/block \(did you mean 'bn'\?\); there: conv, bn, relu"
    ):
        cand.layer("backbone/block/bnn")
    with pytest.raises(
        RepliscopeError, match=r"unit 'backbone/block/bn' \(BatchNormalization\) fails on the reference input"
    ):
        cand.run_layer("backbone/block/bn", [np.ones((2, 3, 6, 6), np.float32)])
