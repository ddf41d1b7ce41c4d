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
