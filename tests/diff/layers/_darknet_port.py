"""The Keras port of YOLOv3-tiny as ``repliscope convert --to keras`` writes it, libdarknet's layer outputs on
``dog.jpg``, and hand edits of the port file (its ``config.json``) as a porter would make them: shared by the
wiring tests (one conversion, one libdarknet run per module)."""

from __future__ import annotations

import atexit
import json
import shutil
import tempfile
import zipfile
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from tests.yolo._assets import DARKNET_DATA, cfg_path, need_darknet, weights_path

Layers = list[dict[str, Any]]


@cache
def converted_port() -> Path:
    """``repliscope convert --to keras`` of pjreddie's YOLOv3-tiny, once per test process (a temporary folder
    removed at exit); copy it before changing it."""
    need_darknet()
    from repliscope.convert.darknet_keras import convert_keras

    folder = Path(tempfile.mkdtemp(prefix="repliscope-darknet-port-"))
    atexit.register(shutil.rmtree, folder, True)
    out = folder / "yolov3-tiny.keras"
    convert_keras(cfg_path(), weights_path(), out)
    return out


@cache
def dog_outputs() -> tuple[np.ndarray, list[dict[str, np.ndarray]]]:
    """(libdarknet's letterboxed ``dog.jpg`` (1, 3, 416, 416), its every-layer outputs), once per process."""
    need_darknet()
    from repliscope.backends.darknet import reference as ref

    x = ref.letterbox(DARKNET_DATA / "dog.jpg", 416, 416)[None]
    return x, ref.darknet_layer_outputs(cfg_path(), weights_path(), x)


def edit_port(port: Path, out: Path, edit: Callable[[dict[str, Any]], None]) -> Path:
    """A copy of the ``.keras`` file ``port`` whose model config (``config.json``) ``edit`` changed in place."""
    with zipfile.ZipFile(port) as z:
        files = {n: z.read(n) for n in z.namelist()}
    config = json.loads(files["config.json"])
    edit(config["config"])
    files["config.json"] = json.dumps(config).encode()
    with zipfile.ZipFile(out, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
    return out


def layer(config: dict[str, Any], name: str) -> dict[str, Any]:
    (entry,) = [e for e in config["layers"] if e["name"] == name]
    return entry


def swap_route_inputs(config: dict[str, Any]) -> None:
    """``route_20`` (``layers = -1, 8``: the upsampled tensor, then ``convolutional_8``) concatenated the other way
    round; ``convolutional_21`` still gets 384 channels, so the file loads and runs."""
    args = layer(config, "route_20")["inbound_nodes"][0]["args"][0]
    assert [a["config"]["keras_history"][0] for a in args] == ["upsample_19", "convolutional_8"]
    args.reverse()


def drop_passthrough_route(config: dict[str, Any]) -> None:
    """No Keras layer for ``route_17`` (``layers = -4``, a one-input route: a pass-through of
    ``convolutional_13``): ``convolutional_18`` reads ``convolutional_13`` directly, as a hand-written port does."""
    config["layers"].remove(layer(config, "route_17"))
    config["output_layers"] = [o for o in config["output_layers"] if o[0] != "route_17"]
    history = layer(config, "convolutional_18_conv")["inbound_nodes"][0]["args"][0]["config"]["keras_history"]
    assert history[0] == "route_17"
    history[0] = "convolutional_13"


@cache
def converted_onnx() -> Path:
    """repliscope's Darknet -> ONNX conversion of YOLOv3-tiny, standing for a user's own ONNX file (every layer's
    last tensor named after the Darknet layer), once per process; copy it before changing it."""
    need_darknet()
    from repliscope.convert.darknet_onnx import convert

    folder = Path(tempfile.mkdtemp(prefix="repliscope-darknet-onnx-"))
    atexit.register(shutil.rmtree, folder, True)
    out = folder / "yolov3-tiny.onnx"
    convert(cfg_path(), weights_path(), out)
    return out


def leaky_slope(name: str, slope: float) -> Callable[[dict[str, Any]], None]:
    """An edit of the port's config: ``name`` (a LeakyReLU) with another negative slope."""

    def edit(config: dict[str, Any]) -> None:
        entry = layer(config, name)
        assert entry["class_name"] == "LeakyReLU"
        entry["config"]["negative_slope"] = slope

    return edit
