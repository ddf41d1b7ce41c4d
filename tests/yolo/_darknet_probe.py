"""Run in a subprocess by tests/yolo/test_darknet_cfg_hostile.py, so that a crash of libdarknet is a failed
assertion, not a dead pytest.

``python -m tests.yolo._darknet_probe parse CFG``: libdarknet's own ``parse_network_cfg`` (``load_network`` without
weights) of CFG, printed as JSON: the network's input and batch and, per layer, the fields its parser set.

``python -m tests.yolo._darknet_probe runner CFG WEIGHTS C H W``: repliscope's :class:`DarknetRunner` loading the
pair (the production path: repliscope's checks, then libdarknet); prints ``{"loaded": true}`` or
``{"error": "<the ModelLoadError>"}``.
"""

from __future__ import annotations

import ctypes
import json
import sys
from pathlib import Path

ACTIVATIONS = ("logistic", "relu", "relie", "linear", "ramp", "tanh", "plse", "leaky")


def parse(cfg: str) -> dict[str, object]:
    from repliscope.backends.darknet import lib as dn
    from repliscope.backends.darknet.runner import quiet_stderr
    from repliscope.backends.darknet.structs import LAYER, LAYER_TYPES, NETWORK

    lib = dn.load_library()
    with quiet_stderr():
        net = lib.load_network(cfg.encode(), b"", 0)
    head = ctypes.cast(net, ctypes.POINTER(NETWORK)).contents
    layers = ctypes.cast(head.layers, ctypes.POINTER(LAYER))
    out = []
    for i in range(head.n):
        c = layers[i]
        kind = LAYER_TYPES[c.type].lower()
        row: dict[str, object] = {"type": kind, "out": [c.out_c, c.out_h, c.out_w], "batch": c.batch}
        if kind == "convolutional":
            row |= {
                "filters": c.n,
                "size": c.size,
                "stride": c.stride,
                "pad": c.pad,
                "batch_normalize": bool(c.batch_normalize),
                "activation": ACTIVATIONS[c.activation] if c.activation < len(ACTIVATIONS) else c.activation,
            }
        elif kind == "maxpool":
            row |= {"size": c.size, "stride": c.stride, "padding": c.pad}
        elif kind == "upsample":
            row |= {"stride": c.stride, "scale": c.scale}
        elif kind == "route":
            row |= {"layers": [ctypes.cast(c.input_layers, ctypes.POINTER(ctypes.c_int))[k] for k in range(c.n)]}
        elif kind == "shortcut":
            row |= {"from": c.index}
        elif kind == "yolo":
            biases = ctypes.cast(c.biases, ctypes.POINTER(ctypes.c_float))
            row |= {
                "classes": c.classes,
                "mask": [ctypes.cast(c.mask, ctypes.POINTER(ctypes.c_int))[k] for k in range(c.n)],
                "anchors": [[biases[2 * k], biases[2 * k + 1]] for k in range(c.total)],
            }
        out.append(row)
    return {"input": [head.c, head.h, head.w], "batch": head.batch, "layers": out}


def runner(cfg: str, weights: str, c: int, h: int, w: int) -> dict[str, object]:
    from repliscope.backends.darknet.runner import DarknetRunner
    from repliscope.runtimes.base import ModelArtifact
    from repliscope.runtimes.errors import ModelLoadError

    artifact = ModelArtifact(
        path=Path(weights),
        sha256="",
        format="darknet",
        input_name="data",
        input_shape=(-1, c, h, w),
        input_dtype="float32",
        output_names=(),
        config_path=Path(cfg),
    )
    try:
        DarknetRunner(artifact, threads=1, cache_dir=Path("/nonexistent")).load()
    except ModelLoadError as exc:
        return {"error": str(exc)}
    return {"loaded": True}


if __name__ == "__main__":
    mode, *args = sys.argv[1:]
    if mode == "parse":
        result = parse(args[0])
    else:
        result = runner(args[0], args[1], *(int(a) for a in args[2:5]))
    print(json.dumps(result))
