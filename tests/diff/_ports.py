"""Re-implementations of examples/models/tiny_resnet.py for the candidate-format tests.

* torch ports (``--candidate tests/diff/_ports.py:same`` etc.): factories taking the reference module;
* a Keras 3 functional port (NHWC) with the reference weights copied in, optionally with a porting bug, saved
  by the tests as ``.keras``, ``.tflite`` and a SavedModel folder.

Keras layer names follow the torch paths (``layer1_0_conv1`` for ``layer1.0.conv1``).
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

BUGS = ("elu_after_add", "dropped_residual", "bn_epsilon")
"""Keras porting bugs -> the reference unit the diff must name (see BUG_UNITS)."""
BUG_UNITS = {"elu_after_add": "layer1.0/relu#2", "dropped_residual": "layer1.0/add", "bn_epsilon": "layer2.0.bn1"}


def same(reference: torch.nn.Module) -> torch.nn.Module:
    """A faithful torch port: a copy of the reference."""
    return copy.deepcopy(reference)


def elu(reference: torch.nn.Module) -> torch.nn.Module:
    """A torch port whose first block ends with ELU instead of ReLU (a functional-op bug)."""
    port = copy.deepcopy(reference)
    block = port.layer1[0]

    def forward(x: torch.Tensor, self: Any = block) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.elu(out + x)

    block.forward = forward  # type: ignore[method-assign]
    return port


def keras_tiny_resnet(reference: torch.nn.Module, bug: str | None = None, keras: Any = None) -> Any:
    """The Keras port of TinyResNet(width=16) with ``reference``'s weights; ``bug`` one of :data:`BUGS`; ``keras``:
    the Keras module to build it with (default Keras 3; ``tf_keras`` builds the same port in Keras 2)."""
    if keras is None:
        import keras

    layers = keras.layers
    state = {k: v.detach().numpy() for k, v in reference.state_dict().items()}
    convs: dict[str, Any] = {}
    norms: dict[str, Any] = {}

    def conv(x: Any, path: str, filters: int, kernel: int, stride: int = 1) -> Any:
        if kernel == 3 and stride == 2:  # torch pads 1 on every side; Keras "same" would pad (0, 1)
            x = layers.ZeroPadding2D(1, name=f"{path.replace('.', '_')}_pad")(x)
            padding = "valid"
        else:
            padding = "same" if kernel == 3 else "valid"
        layer = layers.Conv2D(
            filters, kernel, strides=stride, padding=padding, use_bias=False, name=path.replace(".", "_")
        )
        convs[path] = layer
        return layer(x)

    def norm(x: Any, path: str) -> Any:
        eps = 1e-3 if bug == "bn_epsilon" and path == "layer2.0.bn1" else 1e-5
        layer = layers.BatchNormalization(epsilon=eps, name=path.replace(".", "_"))
        norms[path] = layer
        return layer(x)

    def block(x: Any, prefix: str, filters: int, stride: int, first: bool) -> Any:
        out = layers.ReLU(name=f"{prefix.replace('.', '_')}_relu")(
            norm(conv(x, f"{prefix}.conv1", filters, 3, stride), f"{prefix}.bn1")
        )
        out = norm(conv(out, f"{prefix}.conv2", filters, 3), f"{prefix}.bn2")
        skip = x if stride == 1 else norm(conv(x, f"{prefix}.proj.0", filters, 1, stride), f"{prefix}.proj.1")
        if first and bug == "dropped_residual":
            summed = out
        else:
            summed = layers.Add(name=f"{prefix.replace('.', '_')}_add")([out, skip])
        act = "elu" if first and bug == "elu_after_add" else "relu"
        return layers.Activation(act, name=f"{prefix.replace('.', '_')}_out")(summed)

    inputs = keras.Input((32, 32, 3), name="input")
    x = layers.ReLU(name="relu")(norm(conv(inputs, "conv1", 16, 3), "bn1"))
    x = block(x, "layer1.0", 16, 1, True)
    x = block(x, "layer2.0", 32, 2, False)
    x = layers.GlobalAveragePooling2D(keepdims=True, name="pool")(x)
    x = layers.Flatten(name="flatten")(x)
    fc = layers.Dense(10, name="fc")
    model = keras.Model(inputs, fc(x), name="tiny_resnet_keras")
    for path, layer in convs.items():
        layer.set_weights([state[f"{path}.weight"].transpose(2, 3, 1, 0)])
    for path, layer in norms.items():
        layer.set_weights([state[f"{path}.{k}"] for k in ("weight", "bias", "running_mean", "running_var")])
    fc.set_weights([state["fc.weight"].T, state["fc.bias"]])
    return model


def nhwc(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(0, 2, 3, 1))
