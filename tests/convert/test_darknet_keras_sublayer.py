"""The port built from the cfg (``--runtimes darknet keras --layers``) runs a Darknet layer Keras layer by Keras
layer, so a diverging layer names the one that makes the error (the driver's matching is tested on the port file,
tests/diff/layers/test_darknet_sublayer.py); and libdarknet's output tells the value before a leaky activation.
The port is built in memory with a converter bug, leaky slope 0.01 (~1.5 s)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.diff.layers._darknet_port import dog_outputs
from tests.yolo._assets import cfg_path, weights_path

pytest.importorskip("keras")


def test_the_cfg_built_port_runs_a_layer_sub_layer_by_sub_layer() -> None:
    from repliscope.backends.darknet.reference import DarknetLayers
    from repliscope.convert.darknet_cfg import load_network_cfg
    from repliscope.convert.darknet_verify import DarknetKerasCandidate

    x, outs = dog_outputs()
    cand = DarknetKerasCandidate(load_network_cfg(cfg_path()), weights_path(), epsilon=1e-6, leaky_slope=0.01)
    subs = cand.sublayer_outputs("convolutional_0", [x])
    assert [label for label, _ in subs] == [
        "convolutional_0_pad (ZeroPadding2D)",
        "convolutional_0_conv (Conv2D)",
        "convolutional_0 (LeakyReLU)",
    ]
    conv, act = subs[1][1], subs[2][1]
    np.testing.assert_array_equal(act, np.where(conv > 0, conv, conv * np.float32(0.01)))
    np.testing.assert_array_equal(cand.run_layer("convolutional_0", [x]), act)
    # libdarknet's output, the leaky undone, is the convolution the candidate's Conv2D computes (slope aside)
    ref = outs[0]["convolutional_0"][None]
    stages = DarknetLayers(cfg_path(), weights_path(), outputs=outs).stages("convolutional_0", ref)
    assert [words for words, _ in stages] == ["output before its leaky activation (convolution + bias)", "output"]
    assert np.max(np.abs(stages[0][1] - conv)) < 1e-4 * np.max(np.abs(conv))
    assert np.max(np.abs(stages[1][1] - act)) > 0.1  # the slope: the activation makes the error
