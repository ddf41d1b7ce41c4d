"""Session-scoped sides of the gradient diffs on dog.jpg: one libdarknet trainer (yolov3-tiny, batch 1), its
parameters and repliscope's float32/float64 yardstick ports (building the three Keras ports takes ~15 s: once)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.yolo._assets import cfg_path, need_darknet, weights_path


@pytest.fixture(scope="session")
def darknet_sides(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    need_darknet()
    pytest.importorskip("keras")
    from repliscope.backends.darknet.training import DarknetTrainer
    from repliscope.diff.training.port import yardstick

    trainer = DarknetTrainer(cfg_path(), weights_path(), batch=1, workdir=tmp_path_factory.mktemp("grad"))
    values = trainer.params()
    return {"trainer": trainer, "values": values, "yardstick": yardstick(trainer.network, values)}


@pytest.fixture(scope="session")
def darknet_gradient(darknet_sides: dict[str, Any]) -> Any:
    """The gradient diff of the darknet-keras port with Darknet's batch norm, on dog.jpg, against the session's
    trainer and yardstick: test_gradient_diff asserts on it, test_training_steps takes its tolerances (computed
    once: a port build and a backward pass on both sides, ~6 s)."""
    from repliscope.diff.training.gradients import run_gradient_diff
    from repliscope.diff.training.port import load_port
    from tests.diff.training._fixtures import dog_batch

    trainer = darknet_sides["trainer"]
    port = load_port("darknet-keras", trainer.network, darknet_sides["values"], bn="darknet")
    x, truth = dog_batch()
    return run_gradient_diff(trainer, port, x, truth, yardstick=darknet_sides["yardstick"], manifest_name="yolov3-tiny")
