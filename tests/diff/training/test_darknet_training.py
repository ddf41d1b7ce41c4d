"""libdarknet in training mode (repliscope.backends.darknet.training) pinned against libdarknet itself and against
the formulas of pjreddie's src/convolutional_layer.c / src/network.c: the sign and scale of the update buffers,
the yolo layer's delta on outside outputs, one train_network step = Darknet's SGD, get_current_rate."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from repliscope.backends.darknet.training import DarknetTrainer, SolverSettings, darknet_rate, training_cfg_text
from repliscope.errors import RepliscopeError
from tests.diff.training._fixtures import dog_batch
from tests.yolo._assets import cfg_path, need_darknet, weights_path


def test_training_cfg_replaces_batch_and_subdivisions_only(tmp_path: Path) -> None:
    cfg = tmp_path / "a.cfg"
    cfg.write_text("[net]\n# Testing\nbatch=1\nsubdivisions=1\n# batch=64\nwidth=416\n\n[convolutional]\nbatch=3\n")
    text = training_cfg_text(cfg, 2)
    want = ["[net]", "batch=2", "subdivisions=1", "# Testing", "# batch=64", "width=416", "", "[convolutional]"]
    assert text.splitlines() == [*want, "batch=3"]


@pytest.fixture(scope="module")
def trainer(tmp_path_factory: pytest.TempPathFactory) -> DarknetTrainer:
    need_darknet()
    return DarknetTrainer(cfg_path(), weights_path(), batch=1, workdir=tmp_path_factory.mktemp("train"))


def test_batch_out_of_range_is_refused(tmp_path: Path) -> None:
    need_darknet()
    with pytest.raises(RepliscopeError, match=r"training batch 17: allowed 1\.\.16"):
        DarknetTrainer(cfg_path(), weights_path(), batch=17, workdir=tmp_path)


def test_update_buffers_are_the_negative_gradient_summed_over_the_batch(trainer: DarknetTrainer) -> None:
    """convolutional_22 (1x1, linear, no BN) feeds yolo_23: dC/dbias = -sum(delta), dC/dW = -delta . input^T."""
    x, truth = dog_batch()
    before = trainer.params()
    g = trainer.gradients(x, truth)
    delta = g.deltas["yolo_23"].astype(np.float64)  # (1, 255, 26, 26): -dC/d(conv_22 output)
    inp = g.outputs["convolutional_21"].astype(np.float64)  # (1, 256, 26, 26)
    bias = -delta.sum(axis=(0, 2, 3))
    np.testing.assert_allclose(g.gradients["convolutional_22"]["biases"], bias, rtol=0, atol=1e-5 * np.abs(bias).max())
    w = -np.einsum("bohw,bihw->oi", delta, inp)[:, :, None, None]
    got = g.gradients["convolutional_22"]["weights"]
    assert got.shape == (255, 256, 1, 1)
    assert np.abs(got - w).max() <= 1e-5 * np.abs(w).max()
    # the yolo cost is the sum of the squared deltas; net->cost their mean over the two yolo layers
    assert g.costs["yolo_23"] == pytest.approx(float((delta**2).sum()), rel=1e-5)
    assert g.cost == pytest.approx((g.costs["yolo_16"] + g.costs["yolo_23"]) / 2, rel=1e-6)
    assert g.cost == pytest.approx(4.2437, abs=1e-4)  # measured: libdarknet, dog.jpg, these three boxes
    # nothing changed: parameters, rolling statistics; a second pass is bit-identical
    after = trainer.params()
    for name, p in before.items():
        for key, arr in p.arrays().items():
            assert np.array_equal(arr, after[name].arrays()[key]), (name, key)
    again = trainer.gradients(x, truth)
    assert all(np.array_equal(again.gradients[n][k], g.gradients[n][k]) for n in g.gradients for k in g.gradients[n])


def test_yolo_layer_on_outside_outputs_is_darknets_own_delta(trainer: DarknetTrainer) -> None:
    x, truth = dog_batch()
    g = trainer.gradients(x, truth)
    for yolo, src in (("yolo_16", "convolutional_15"), ("yolo_23", "convolutional_22")):
        delta, cost = trainer.yolo_layer(yolo, g.outputs[src], truth)
        assert np.array_equal(delta, g.deltas[yolo])
        assert cost == g.costs[yolo]
    with pytest.raises(
        RepliscopeError, match=r"yolo_16: inputs of shape \(1, 255, 26, 26\), expected \(1, 255, 13, 13\)"
    ):
        trainer.yolo_layer("yolo_16", g.outputs["convolutional_22"], truth)
    with pytest.raises(RepliscopeError, match="convolutional_15 is a convolutional layer, not a yolo layer"):
        trainer.yolo_layer("convolutional_15", g.outputs["convolutional_15"], truth)


def test_one_train_network_step_is_darknets_sgd(tmp_path: Path) -> None:
    """W1 = W0 - lr * (G / B + decay * W0) on kernels, B0 - lr * G / B on biases (momentum buffer empty at load)."""
    need_darknet()
    x, truth = dog_batch()
    with DarknetTrainer(cfg_path(), weights_path(), batch=1, workdir=tmp_path) as tr:
        s = tr.solver()
        assert (s.policy, s.burn_in, s.steps) == ("steps", 1000, (400000, 450000))
        assert (s.momentum, s.decay) == (pytest.approx(0.9), pytest.approx(0.0005))
        assert tr.seen == 32013312  # the weights header
        w0 = tr.params()
        g = tr.gradients(x, truth)
        loss = tr.train_step(x, truth)
        assert loss == pytest.approx(g.cost, rel=1e-6)  # train_network: the cost before the update / batch (1)
        assert tr.seen == 32013313
        lr = tr.current_rate()
        assert lr == pytest.approx(1e-5, rel=1e-6)  # past both steps: 0.001 * .1 * .1
        w1 = tr.params()
        for name in ("convolutional_0", "convolutional_13", "convolutional_22"):
            want = w0[name].weights - lr * (g.gradients[name]["weights"] + s.decay * w0[name].weights)
            step = np.abs(want - w0[name].weights).max()
            assert np.abs(w1[name].weights - want).max() <= 1e-3 * step + 2e-7 * np.abs(w0[name].weights).max()
            want_b = w0[name].biases - lr * g.gradients[name]["biases"]
            assert np.abs(w1[name].biases - want_b).max() <= 1e-3 * np.abs(want_b - w0[name].biases).max() + 1e-9


@pytest.mark.parametrize("seen", [0, 1, 500, 999, 1000, 399_999, 400_000, 450_000, 32013312])
def test_darknet_rate_is_get_current_rate(trainer: DarknetTrainer, seen: int) -> None:
    trainer.seen = seen
    try:
        assert darknet_rate(trainer.solver(), seen) == trainer.current_rate()
    finally:
        trainer.seen = 32013312


def test_unsupported_policy_is_named() -> None:
    s = SolverSettings(0.1, 0.9, 0.0005, "sig", 0, 4.0, 100, (), (), 1, 1, False)
    with pytest.raises(RepliscopeError, match="learning-rate policy 'sig'"):
        darknet_rate(s, 10)
