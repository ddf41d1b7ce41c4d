"""Gradient diff, libdarknet's backward_network vs the Keras training port's tape, on dog.jpg with three boxes:
the port with Darknet's batch-norm convention agrees within the measured float32 tolerance, the stock-Keras
batch norm (biased variance, epsilon inside the square root) is named at the first gradient the backward reaches."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.diff.training._fixtures import dog_batch
from tests.yolo._assets import cfg_path


@pytest.fixture(scope="module")
def sides(darknet_sides: dict[str, Any]) -> dict[str, Any]:
    return darknet_sides


@pytest.fixture(scope="module")
def darknet_diff(darknet_gradient: Any) -> Any:
    return darknet_gradient  # _diff(sides, "darknet"), once per session (conftest)


def _diff(sides: dict[str, Any], bn: str) -> Any:
    from repliscope.diff.training.gradients import run_gradient_diff
    from repliscope.diff.training.port import load_port

    trainer = sides["trainer"]
    port = load_port("darknet-keras", trainer.network, sides["values"], bn=bn)
    x, truth = dog_batch()
    return run_gradient_diff(trainer, port, x, truth, yardstick=sides["yardstick"], manifest_name="yolov3-tiny")


@pytest.mark.slow
def test_port_with_darknets_batch_norm_agrees_layer_by_layer(darknet_diff: Any) -> None:
    r = darknet_diff
    assert r.passed and r.verdict == "passed" and r.first_divergent is None, r.summary
    assert r.first_divergent_detail is None
    assert len(r.params) == 37  # 13 conv layers: 13 weights, 13 biases, 11 BN scales
    assert r.determinism.deterministic and r.determinism.darknet_spread == 0.0 and r.determinism.port_spread == 0.0
    by = {(p.layer, p.param): p for p in r.params}
    # the last layers are float32-close; batch-norm backward at batch 1 makes the early ones percents-sensitive
    assert by[("convolutional_22", "weights")].rel_l2 < 5e-4
    assert by[("convolutional_22", "biases")].rel_l2 < 1e-6
    assert by[("convolutional_0", "scales")].float32_sensitivity is not None
    assert by[("convolutional_0", "scales")].float32_sensitivity > 0.005  # measured 0.021
    assert all(p.cosine > 0.999 for p in r.params)
    assert max(p.ratio for p in r.params) < 0.5  # measured 0.21 (convolutional_15.weights)
    crossings = {f.layer: f.rounding_kink_crossings for f in r.forward if f.rounding_kink_crossings}
    assert crossings["convolutional_18"] == 2  # Darknet's float32 flips two leaky units against the float32 port
    assert "-dC/dparam" in r.conventions["sign"] and "training=True" in r.conventions["batch_norm"]


@pytest.mark.slow
def test_stock_keras_batch_norm_is_named_at_the_first_gradient_reached(sides: dict[str, Any]) -> None:
    r = _diff(sides, "keras")
    assert not r.passed and r.first_divergent == "convolutional_22.weights"
    detail = r.first_divergent_detail
    assert detail is not None and detail.rel_l2 > detail.tolerance
    by = {(p.layer, p.param): p for p in r.params}
    assert by[("convolutional_15", "weights")].ratio > 2  # measured 2.5
    assert r.summary.startswith("first divergent gradient (backward order): convolutional_22.weights")


@pytest.mark.slow
def test_darknets_batch_norm_backward_is_not_the_derivative_of_its_forward(
    sides: dict[str, Any], darknet_diff: Any
) -> None:
    """The same forward with TensorFlow's exact derivative differs from Darknet's hand-written backward most at
    the 13x13 layers (N = 169 values per channel: / N vs / (N - 1), epsilon 1e-5 inside vs 1e-6 outside)."""
    exact = _diff(sides, "autodiff")
    darknet = darknet_diff
    e = {(p.layer, p.param): p.rel_l2 for p in exact.params}
    d = {(p.layer, p.param): p.rel_l2 for p in darknet.params}
    assert e[("convolutional_14", "weights")] > 2.5 * d[("convolutional_14", "weights")]  # measured 1.3e-3 vs 4e-4
    assert e[("convolutional_22", "weights")] == pytest.approx(d[("convolutional_22", "weights")], rel=1e-3)


def test_port_mapping_errors_name_the_layer(tmp_path: Path) -> None:
    pytest.importorskip("keras")
    from repliscope.convert.darknet_cfg import load_network_cfg
    from repliscope.diff.training.keras_port import build_training_port, port_params
    from repliscope.errors import RepliscopeError

    net = load_network_cfg(cfg_path())
    model = build_training_port(net)
    assert len(port_params(model, net).trainable()) == 37
    with pytest.raises(RepliscopeError, match=r"convolutional_4 \(conv\): the port has no layer 'nope'"):
        port_params(model, net, {"convolutional_4": {"conv": "nope"}})
    with pytest.raises(RepliscopeError, match="--mapping names convolutional_99, not layers of the cfg"):
        port_params(model, net, {"convolutional_99": "x"})
    # convolutional_0 has batch norm: a conv with a bias (convolutional_15's) is not Darknet's convolution
    with pytest.raises(RepliscopeError, match="convolutional_0: port conv 'convolutional_15_conv' has a bias"):
        port_params(model, net, {"convolutional_0": {"conv": "convolutional_15_conv"}})


@pytest.mark.slow
def test_registered_darknet_yolo_loss_on_the_ports_outputs_as_its_upstream(
    sides: dict[str, Any], darknet_diff: Any
) -> None:
    """The port's upstream from the LOSSES registry's darknet_yolo (libdarknet's forward_yolo_layer on the PORT's
    own outputs): the loss and the port's backward together still agree with Darknet's backward."""
    from repliscope.diff.training.gradients import run_gradient_diff
    from repliscope.diff.training.port import load_port, registered_loss_upstream

    trainer = sides["trainer"]
    x, truth = dog_batch()
    port = load_port("darknet-keras", trainer.network, sides["values"])
    from repliscope.stacks.call import run_loss

    upstream = registered_loss_upstream("darknet_yolo", cfg_path(), trainer.network, truth, run_loss)
    r = run_gradient_diff(trainer, port, x, truth, yardstick=sides["yardstick"], port_loss=("darknet_yolo", upstream))
    assert r.passed and r.port_loss == "darknet_yolo", r.summary
    assert "registered loss 'darknet_yolo'" in r.conventions["upstream"]
    by = {(p.layer, p.param): p.rel_l2 for p in r.params}
    base = {(p.layer, p.param): p.rel_l2 for p in darknet_diff.params}
    # the delta now comes from the port's outputs (5e-4 relative from Darknet's): the last layer moves most
    assert by[("convolutional_22", "biases")] > base[("convolutional_22", "biases")]
    assert by[("convolutional_22", "weights")] < 5e-3
    from repliscope.errors import RepliscopeError

    with pytest.raises(RepliscopeError, match="--port-loss 'nope': not a registered loss"):
        registered_loss_upstream("nope", cfg_path(), trainer.network, truth, run_loss)
