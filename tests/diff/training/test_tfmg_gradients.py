"""Issue 34 §2 for the Model Garden: its own YOLOv3-tiny (examples/tfmg/yolov3_tiny.py, tf-models-official 2.20.0,
built in its stack with pjreddie's weights) through the gradient diff against libdarknet's backward_network and
the 3-step training diff against its train_network, on dog.jpg with three boxes, batch 1.

One crossing to the Model Garden's stack computes both batch-norm modes, two tape passes and three SGD steps each
(~50-80 s on 2 shared cores: TensorFlow's start, two builds, four passes, six steps); the Darknet side and the
yardstick are the session's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.diff.training._fixtures import dog_batch
from tests.yolo._assets import cfg_path, weights_path

STEPS = 3


@pytest.fixture(scope="module")
def diffs(darknet_sides: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Both modes' gradient diffs and 3-step training diffs from ONE crossing (the steps taken in the stack with
    libdarknet's yolo delta on the model's own outputs; each mode's Darknet side a fresh trainer)."""
    from repliscope.backends.darknet.training import DarknetTrainer
    from repliscope.diff.training.batches import Batch
    from repliscope.diff.training.gradients import run_gradient_diff
    from repliscope.diff.training.steps import run_training_diff
    from repliscope.diff.training.tfmg_port import BN_MODES, steps_plan, tfmg_ports
    from repliscope.stacks.call import run_task

    trainer = darknet_sides["trainer"]
    work = tmp_path_factory.mktemp("tfmg-grad")
    x, truth = dog_batch()
    batch = Batch(x, truth, ("dog.jpg",))
    plan = steps_plan(trainer, [batch], STEPS)
    ports = tfmg_ports(trainer.network, cfg_path(), weights_path(), BN_MODES, run_task, work, plan)
    out: dict[str, Any] = {
        bn: run_gradient_diff(
            trainer, port, x, truth, yardstick=darknet_sides["yardstick"], manifest_name="yolov3-tiny"
        )
        for bn, port in ports.items()
    }
    for bn, port in ports.items():
        with (
            DarknetTrainer(cfg_path(), weights_path(), batch=1, workdir=work) as fresh,
            DarknetTrainer(cfg_path(), weights_path(), batch=1, workdir=work) as oracle,
        ):
            out[f"{bn}/steps"] = run_training_diff(fresh, oracle, port, [batch], steps=STEPS, gradient=out[bn])
    out["crossings"] = ports["as-loaded"].crossings
    return out


@pytest.mark.slow
@pytest.mark.stack
@pytest.mark.network
def test_as_loaded_the_model_gardens_batch_norm_is_named_at_the_first_gradient_reached(diffs: dict[str, Any]) -> None:
    """Training mode reads no moving statistic: the Model Garden's tf_keras BatchNormalization (biased batch
    variance, epsilon 1e-3 inside the root, the exact derivative) moves the heads' outputs by 0.5 % and every
    gradient behind a batch norm past tolerance; the first one the backward reaches is convolutional_22.weights."""
    r = diffs["as-loaded"]
    assert not r.passed and r.first_divergent == "convolutional_22.weights", r.summary
    by = {(p.layer, p.param): p for p in r.params}
    assert len(by) == 37
    assert by[("convolutional_22", "weights")].rel_l2 > 4 * by[("convolutional_22", "weights")].tolerance  # 5.8e-3
    assert by[("convolutional_22", "biases")].passed and by[("convolutional_15", "biases")].passed  # no BN input
    assert not by[("convolutional_21", "scales")].passed and by[("convolutional_21", "scales")].rel_l2 > 0.01
    assert {f.layer for f in r.forward} == {"convolutional_15", "convolutional_22"}  # the heads only cross back
    assert all(0.002 < f.rel < 0.01 for f in r.forward)  # measured 0.0046, 0.0049
    assert r.port["bn"] == "as-loaded" and r.port["bn_layers_patched"] == 0


@pytest.mark.slow
@pytest.mark.stack
@pytest.mark.network
def test_with_darknets_training_batch_norm_every_gradient_passes(diffs: dict[str, Any]) -> None:
    r = diffs["darknet-bn"]
    assert r.passed and r.first_divergent is None, r.summary
    assert len(r.params) == 37 and r.port["bn_layers_patched"] == 11
    assert max(p.ratio for p in r.params) < 0.6  # measured 0.38 (convolutional_18.biases)
    assert all(p.cosine > 0.999 for p in r.params)
    assert all(f.rel < 5e-4 for f in r.forward)  # measured 1.6e-4, 1.7e-4


@pytest.mark.slow
@pytest.mark.stack
@pytest.mark.network
def test_three_steps_track_darknet_with_its_batch_norm_and_separate_at_step_1_without(diffs: dict[str, Any]) -> None:
    """Darknet's train_network against the Model Garden's model trained in its stack by tf_keras' SGD (momentum
    0.9, decay into the kernels' gradient, Darknet's learning rate 1e-5 from seen = 0 and burn_in)."""
    dn = diffs["darknet-bn/steps"]
    assert dn.passed and dn.first_divergent is None, dn.summary
    assert [round(r.darknet_loss, 4) for r in dn.rows] == [4.2437, 4.1626, 4.0133]
    assert [round(r.port_loss, 4) for r in dn.rows] == [4.2439, 4.1628, 4.0135]
    assert all(r.loss_rel < 1e-4 for r in dn.rows)  # measured 5.6e-5, 4.5e-5, 4.6e-5
    assert dn.optimizer["class"].endswith("SGD") and dn.optimizer["config"]["nesterov"] is False
    keras = diffs["as-loaded/steps"]
    assert not keras.passed and keras.first_divergent == "step 1: convolutional_21.weights", keras.summary
    assert keras.first_separation is not None and keras.first_separation.rel > 1.5 * keras.first_separation.tolerance
    assert all(r.loss_rel < 2e-3 for r in keras.rows)  # the losses stay close (1.3e-3): the weights tell


@pytest.mark.slow
@pytest.mark.stack
@pytest.mark.network
def test_one_crossing_two_deterministic_passes_per_mode(diffs: dict[str, Any]) -> None:
    assert diffs["crossings"] == 1
    for bn in ("as-loaded", "darknet-bn"):
        d = diffs[bn].determinism
        assert d.deterministic and d.port_spread == 0.0 and d.darknet_spread == 0.0


def test_a_wrong_mode_and_a_loss_upstream_are_refused(tmp_path: Path) -> None:
    from repliscope.convert.darknet_cfg import load_network_cfg
    from repliscope.diff.training.tfmg_port import tfmg_ports
    from repliscope.errors import RepliscopeError

    def never(task: str, into: Path, out: Path) -> None:
        raise AssertionError("no crossing for refused input")

    net = load_network_cfg(cfg_path())
    with pytest.raises(RepliscopeError, match=r"--tfmg-bn keras \(allowed: as-loaded, darknet-bn\)"):
        tfmg_ports(net, cfg_path(), weights_path(), ("keras",), never, tmp_path)
    port = tfmg_ports(net, cfg_path(), weights_path(), ("as-loaded",), never, tmp_path)["as-loaded"]
    with pytest.raises(RepliscopeError, match="takes Darknet's delta as its upstream"):
        port.gradients(np.zeros((1, 3, 416, 416), np.float32), lambda outputs: outputs)


@pytest.mark.parametrize(
    ("port", "extra", "message"),
    [
        ("tfmg-yolov3-tiny:keras", (), "batch-norm mode 'keras' (allowed: as-loaded, darknet-bn)"),
        ("tfmg-yolov3-tiny", ("--port-loss", "darknet_yolo"), "its upstream is Darknet's delta (no --port-loss)"),
    ],
)
def test_the_command_line_refuses_what_the_model_gardens_port_cannot_do(
    port: str, extra: tuple[str, ...], message: str, tmp_path: Path
) -> None:
    """Refused before any crossing to the stack: one line, exit 2, nothing stored."""
    from typer.testing import CliRunner

    from repliscope.cli.main import app
    from tests.yolo._assets import MANIFEST

    db = f"sqlite:///{tmp_path / 'runs.db'}"
    args = ["diff", str(MANIFEST), "--gradients", port, *extra, "--db", db]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2, res.stdout + res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: --gradients {port}: {message}")
    assert not (tmp_path / "runs.db").exists()
