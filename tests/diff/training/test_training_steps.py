"""Training-step diff: three train_network steps of libdarknet vs the Keras training port trained by the Keras
SGD configured as documented (repliscope.diff.training.steps), from pjreddie's weights on dog.jpg; a Nesterov
optimiser and a learning-rate change between steps are named at the step where the weights separate."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.diff.training._fixtures import DOG_TRUTH
from tests.yolo._assets import DARKNET_DATA, cfg_path, need_darknet, weights_path


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory, darknet_gradient: Any) -> dict[str, Any]:
    """dog.jpg as a batch, a fresh oracle trainer, and the gradient diff whose tolerances the steps use: the
    darknet-keras port's (Darknet's batch norm) on dog.jpg from pjreddie's weights, the session's (conftest)."""
    need_darknet()
    pytest.importorskip("keras")
    from repliscope.backends.darknet import reference as ref
    from repliscope.backends.darknet.training import DarknetTrainer
    from repliscope.diff.training.batches import stack

    work = tmp_path_factory.mktemp("steps")
    batch = stack([("dog", ref.letterbox(DARKNET_DATA / "dog.jpg", 416, 416), DOG_TRUTH)])
    oracle = DarknetTrainer(cfg_path(), weights_path(), batch=1, workdir=work)
    return {"batch": batch, "gradient": darknet_gradient, "oracle": oracle, "work": work}


def _run(setup: dict[str, Any], *, seen: int | None = None, optimizer: Any = None, steps: int = 3) -> Any:
    from repliscope.backends.darknet.training import DarknetTrainer
    from repliscope.diff.training.port import load_port
    from repliscope.diff.training.steps import keras_sgd, run_training_diff

    with DarknetTrainer(cfg_path(), weights_path(), batch=1, workdir=setup["work"], seen=seen) as trainer:
        port = load_port("darknet-keras", trainer.network, trainer.params())
        return run_training_diff(
            trainer,
            setup["oracle"],
            port,
            [setup["batch"]],
            steps=steps,
            gradient=setup["gradient"],
            manifest_name="yolov3-tiny",
            make_optimizer=optimizer or keras_sgd,
        )


@pytest.mark.slow
def test_keras_sgd_as_documented_follows_train_network(setup: dict[str, Any], tmp_path: Path) -> None:
    from repliscope.diff.training.steps import loss_plot

    r = _run(setup)
    assert r.passed and r.first_separation is None and r.first_loss_separation is None, r.summary
    assert [row.step for row in r.rows] == [1, 2, 3]
    assert all(row.learning_rate == pytest.approx(1e-5, rel=1e-6) for row in r.rows)
    assert r.rows[0].darknet_loss == pytest.approx(4.2437, abs=1e-4)  # measured, = the gradient diff's cost
    assert r.rows[-1].darknet_loss < r.rows[0].darknet_loss  # the loss goes down on the batch it trains on
    assert all(row.loss_rel < 2e-4 for row in r.rows)  # measured 5.6e-5, 4.6e-5, 4.6e-5
    last = {(d.layer, d.param): d for d in r.drift if d.step == 3}
    assert last[("convolutional_22", "weights")].rel < 1e-3  # measured 2.5e-4
    assert last[("convolutional_22", "weights")].darknet_drift > 1e-3
    assert r.optimizer["class"].endswith("SGD") and r.optimizer["config"]["nesterov"] is False
    assert r.optimizer["config"]["momentum"] == pytest.approx(0.9)
    png = loss_plot(r)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_nesterov_momentum_separates_at_the_first_step(setup: dict[str, Any]) -> None:
    from repliscope.diff.training.keras_port import import_tf_keras

    _, keras = import_tf_keras()
    r = _run(
        setup,
        steps=1,
        optimizer=lambda s, lr: keras.optimizers.SGD(learning_rate=lr, momentum=s.momentum, nesterov=True),
    )
    assert not r.passed and r.first_separation is not None
    assert (r.first_separation.step, r.first_separation.layer, r.first_separation.param) == (
        1,
        "convolutional_22",
        "weights",
    )
    assert r.first_divergent == "step 1: convolutional_22.weights"
    assert r.first_separation.port_drift / r.first_separation.darknet_drift == pytest.approx(1.9, rel=1e-2)


@pytest.mark.slow
def test_a_learning_rate_step_between_steps_is_flagged_and_separates(setup: dict[str, Any]) -> None:
    """seen = 399 998: step 1 trains at 1e-3, step 2 at batch 400 000 = the policy's first step, 1e-4; Keras'
    velocity carries the 1e-3-scaled step, Darknet's buffer the raw gradient."""
    r = _run(setup, seen=399_998, steps=2)
    assert [row.learning_rate for row in r.rows] == [pytest.approx(1e-3), pytest.approx(1e-4)]
    assert [row.lr_changed for row in r.rows] == [False, True]
    assert "before step(s) [2]" in r.conventions["learning_rate"]
    assert r.first_separation is not None and r.first_separation.step == 2
