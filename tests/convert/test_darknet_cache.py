"""Issue 38 item 1: the Darknet -> ONNX conversion cache keeps nothing unverified. The sidecar records the
conversion's inputs (the weights' and cfg's sha256 the manifest declares) and the converted model's sha256; it is
written atomically after the model; a hit is used only when both match, anything else is converted again."""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from repliscope.convert.darknet_onnx import convert_cached
from repliscope.runtimes import ModelArtifact

CFG = """[net]
width=8
height=8
channels=3

[convolutional]
filters=2
size=1
stride=1
pad=0
activation=linear
"""


def _artifact(tmp_path: Path) -> ModelArtifact:
    cfg = tmp_path / "tiny.cfg"
    cfg.write_text(CFG)
    weights = tmp_path / "tiny.weights"
    floats = np.arange(8, dtype=np.float32)  # 2 biases, then the 2x3x1x1 kernel
    weights.write_bytes(struct.pack("<iiiQ", 0, 2, 0, 0) + floats.tobytes())
    return ModelArtifact(
        path=weights,
        sha256=hashlib.sha256(weights.read_bytes()).hexdigest(),
        format="darknet",
        input_name="data",
        input_shape=(1, 3, 8, 8),
        input_dtype="float32",
        config_path=cfg,
        config_sha256=hashlib.sha256(cfg.read_bytes()).hexdigest(),
    )


def test_the_sidecar_records_inputs_and_model_hash(tmp_path: Path) -> None:
    artifact = _artifact(tmp_path)
    path, info = convert_cached(artifact, tmp_path / "cache")
    assert info["cached"] is False
    sidecar = json.loads(path.with_suffix(".json").read_text())
    assert sidecar["onnx_sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert sidecar["inputs"]["weights_sha256"] == artifact.sha256
    assert sidecar["inputs"]["config_sha256"] == artifact.config_sha256
    assert [p.name for p in path.parent.iterdir() if p.name.endswith(".part")] == []
    again, info = convert_cached(artifact, tmp_path / "cache")
    assert again == path and info["cached"] is True


@pytest.mark.parametrize(
    "tamper",
    [
        lambda model, sidecar: model.write_bytes(b"not the converted model"),
        lambda model, sidecar: sidecar.unlink(),
        lambda model, sidecar: sidecar.write_text("{"),
        lambda model, sidecar: sidecar.write_text(
            json.dumps({**json.loads(sidecar.read_text()), "onnx_sha256": hashlib.sha256(b"x").hexdigest()})
        ),
        # the shared loader cache (repliscope.runtimes.loaders): a sidecar of other inputs is a miss
        lambda model, sidecar: sidecar.write_text(
            json.dumps(
                {
                    **json.loads(sidecar.read_text()),
                    "inputs": {**json.loads(sidecar.read_text())["inputs"], "weights_sha256": "0" * 64},
                }
            )
        ),
    ],
)
def test_an_unverified_cache_entry_is_converted_again(tmp_path: Path, tamper: Callable[[Path, Path], object]) -> None:
    artifact = _artifact(tmp_path)
    path, _ = convert_cached(artifact, tmp_path / "cache")
    good = path.read_bytes()
    tamper(path, path.with_suffix(".json"))
    again, info = convert_cached(artifact, tmp_path / "cache")
    assert again == path and info["cached"] is False
    assert path.read_bytes() == good
    assert json.loads(path.with_suffix(".json").read_text())["onnx_sha256"] == hashlib.sha256(good).hexdigest()
