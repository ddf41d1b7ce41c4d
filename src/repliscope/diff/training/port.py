"""The port side of a gradient / training-step diff: a Keras model that trains like the Darknet network, its
variables paired with Darknet's parameters and loaded with the original's values, its gradients by
``tf.GradientTape``.

``PORT`` on the command line:

- ``darknet-keras``: repliscope's training port of the manifest's cfg (:mod:`.keras_port`; ``bn`` picks its
  batch-norm convention, ``bn_dtype`` the normalisation layers' precision);
- ``FILE.keras``: a saved Keras model (``DarknetBatchNorm`` / ``DarknetYolo`` layers allowed);
- ``FILE.py:NAME`` / ``module:NAME``: a function called with the cfg's parsed network (:class:`Network`)
  returning a ``keras.Model``, or a model object.

The model's layers are paired with Darknet's by the naming convention of :mod:`.keras_port` or by ``mapping``,
and every Darknet parameter is ASSIGNED to the port from libdarknet's loaded network before anything runs (both
sides start from the same weights; the port's own initial values are ignored).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from repliscope.backends.darknet.reference import layer_sources
from repliscope.backends.darknet.training import ConvParams
from repliscope.convert.darknet_cfg import Network
from repliscope.diff.training.keras_port import (
    PortParams,
    batch_norm_class,
    build_training_port,
    import_tf_keras,
    load_darknet_params,
    port_params,
    read_port_params,
    to_darknet_layout,
)
from repliscope.errors import RepliscopeError

BUILTIN_PORT = "darknet-keras"
Upstream = dict[str, np.ndarray] | Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]
"""The upstream gradient at the yolo layers' inputs: given, or computed from the port's own outputs."""
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def one_line(exc: BaseException) -> str:
    """``Type: first line`` of a port's exception; Keras' "Exception encountered when calling X.call()." wrapper
    gets the wrapped message appended (its next non-empty line)."""
    lines = [_ANSI.sub("", line).strip() for line in str(exc).splitlines()]
    lines = [line for line in lines if line]
    text = lines[0] if lines else ""
    if text.startswith("Exception encountered when calling") and len(lines) > 1:
        text = f"{text} {lines[1]}"
    return f"{type(exc).__name__}: {text}"


def yolo_inputs(net: Network) -> dict[str, str]:
    """yolo layer name -> the layer whose output it reads (where Darknet's delta is the upstream gradient)."""
    out = {}
    for lay in net.layers:
        if lay.type == "yolo":
            (src,) = layer_sources(lay)
            out[lay.name] = net.layers[src].name
    if not out:
        raise RepliscopeError("the cfg has no [yolo] layer: the gradient diff feeds Darknet's yolo delta")
    return out


@dataclass
class PortGradients:
    """One tape pass: ``gradients`` (layer -> param -> dC/dparam in Darknet's layout, summed over the batch, the
    same sign and scale as :class:`~repliscope.backends.darknet.training.DarknetGradients`) and every Darknet
    layer's training-mode output (NCHW)."""

    gradients: dict[str, dict[str, np.ndarray]]
    outputs: dict[str, np.ndarray]


class KerasPort:
    """A Keras model seen as the Darknet network: ``model`` outputs every paired Darknet layer's output."""

    def __init__(self, model: Any, net: Network, params: PortParams, description: dict[str, Any]) -> None:
        tf, keras = import_tf_keras()
        self.tf, self.net, self.params, self.description = tf, net, params, description
        names = [lay.name for lay in net.layers]
        self._names = names
        self.model = keras.Model(model.inputs, [model.get_layer(params.outputs[n]).output for n in names])
        self.dtype = str(self.model.inputs[0].dtype).replace("<dtype: '", "").rstrip("'>")
        self.yolo = yolo_inputs(net)

    def set_leaky_masks(self, masks: dict[str, np.ndarray] | None) -> None:
        """Darknet layer -> NCHW bool (``output > 0`` of another implementation): the derivative pattern of this
        port's masked leaky layers (None: their own)."""
        for name, keras_name in self.params.outputs.items():
            layer = self.model.get_layer(keras_name)
            if hasattr(layer, "mask") and hasattr(layer, "negative_slope"):
                value = None if masks is None else masks.get(name)
                layer.mask = (
                    None if value is None else self.tf.constant(np.ascontiguousarray(value.transpose(0, 2, 3, 1)))
                )

    def load(self, values: dict[str, ConvParams]) -> None:
        load_darknet_params(self.params, values)

    def parameters(self) -> dict[str, dict[str, np.ndarray]]:
        return read_port_params(self.params)

    def moving(self) -> list[tuple[Any, np.ndarray]]:
        return [
            (var, np.asarray(var.numpy()))
            for vs in self.params.variables.values()
            for p, var in vs.items()
            if p.startswith("rolling")
        ]

    def _feed(self, x: np.ndarray) -> Any:
        return self.tf.constant(np.ascontiguousarray(x.transpose(0, 2, 3, 1)).astype(self.dtype))

    def forward(self, x: np.ndarray, training: bool) -> dict[str, np.ndarray]:
        outs = self.model(self._feed(x), training=training)
        return {n: self._check(n, o).transpose(0, 3, 1, 2) for n, o in zip(self._names, outs, strict=True)}

    def _check(self, name: str, out: Any) -> np.ndarray:
        arr = np.asarray(out.numpy() if hasattr(out, "numpy") else out)
        lay = self.net.layer(name)
        want = (lay.out_shape[1], lay.out_shape[2], lay.out_shape[0])
        if arr.ndim != 4 or arr.shape[1:] != want:
            raise RepliscopeError(f"the port's output of {name} has shape {arr.shape}, expected (batch, {want})")
        if not np.all(np.isfinite(arr)):
            raise RepliscopeError(f"the port's output of {name} has {int(np.sum(~np.isfinite(arr)))} NaN/Inf values")
        return arr

    def gradients(
        self, x: np.ndarray, upstream: Upstream, *, keep_moving: bool = True
    ) -> tuple[PortGradients, dict[str, Any]]:
        """``tape.gradient(yolo inputs, variables, output_gradients=upstream)`` in training mode; ``upstream``:
        yolo layer -> dC/d(its input) NCHW (the NEGATED Darknet delta), or a function of the port's own yolo inputs
        (yolo layer -> NCHW) returning them (a registered loss evaluated on the port's outputs). Returns the
        gradients and the tape's outputs of the yolo inputs (tensors). ``keep_moving``: restore the moving
        statistics afterwards."""
        tf = self.tf
        saved = self.moving() if keep_moving else []
        trainable = self.params.trainable()
        try:
            with tf.GradientTape() as tape:
                outs = self.model(self._feed(x), training=True)
                by_name = dict(zip(self._names, outs, strict=True))
                heads = [by_name[self.yolo[y]] for y in self.yolo]
            outputs = {n: self._check(n, o).transpose(0, 3, 1, 2) for n, o in by_name.items()}
            given = upstream if isinstance(upstream, dict) else upstream({y: outputs[s] for y, s in self.yolo.items()})
            for y, s in self.yolo.items():
                if y not in given or given[y].shape != outputs[s].shape:
                    got = given[y].shape if y in given else "none"
                    raise RepliscopeError(f"upstream gradient of {y}: shape {got}, expected {outputs[s].shape}")
            og = [
                tf.constant(np.ascontiguousarray(given[y].transpose(0, 2, 3, 1)).astype(self.dtype)) for y in self.yolo
            ]
            grads = tape.gradient(heads, [v for _, _, v in trainable], output_gradients=og)
        except RepliscopeError:
            raise
        except Exception as exc:  # the port's own code (a custom layer): one line
            raise RepliscopeError(f"the port raised {one_line(exc)}") from None
        finally:
            for var, value in saved:
                var.assign(value)
        result: dict[str, dict[str, np.ndarray]] = {}
        for (layer, param, var), grad in zip(trainable, grads, strict=True):
            if grad is None:
                raise RepliscopeError(
                    f"{layer}.{param}: the port's variable {var.path} gets no gradient from the yolo layers' inputs "
                    "(not on the path from the input to them)"
                )
            arr = np.asarray(grad.numpy(), np.float64 if self.dtype == "float64" else np.float32)
            if not np.all(np.isfinite(arr)):
                raise RepliscopeError(f"{layer}.{param}: the port's gradient has NaN/Inf values")
            result.setdefault(layer, {})[param] = to_darknet_layout(param, arr)
        return PortGradients(result, outputs), {y: by_name[self.yolo[y]] for y in self.yolo}


def _call_user(obj: Any, net: Network, spec: str) -> Any:
    _, keras = import_tf_keras()
    if isinstance(obj, keras.Model):
        return obj
    if not callable(obj):
        raise RepliscopeError(f"--gradients {spec}: not a keras.Model nor a function returning one")
    try:
        model = obj(net)
    except Exception as exc:  # the user's code: any failure is one line
        raise RepliscopeError(f"--gradients {spec} raised {one_line(exc)}") from None
    if not isinstance(model, keras.Model):
        raise RepliscopeError(f"--gradients {spec} returned {type(model).__name__}, not a keras.Model")
    return model


def load_port(
    spec: str,
    net: Network,
    values: dict[str, ConvParams],
    *,
    bn: str = "darknet",
    bn_dtype: str = "float32",
    dtype: str = "float32",
    mapping: dict[str, Any] | None = None,
    low_precision: frozenset[str] | None = None,
    leaky_masks: bool = False,
) -> KerasPort:
    """``spec`` (module doc) -> the port with the original's parameters loaded."""
    _, keras = import_tf_keras()
    if spec == BUILTIN_PORT:
        model = build_training_port(
            net, bn=bn, bn_dtype=bn_dtype, dtype=dtype, low_precision=low_precision, leaky_masks=leaky_masks
        )
        desc = {"port": BUILTIN_PORT, "bn": bn, "bn_dtype": bn_dtype, "dtype": dtype}
        if low_precision is not None:
            desc["low_precision"] = ",".join(sorted(low_precision))
    elif spec.endswith(".keras"):
        if not Path(spec).is_file():
            raise RepliscopeError(f"--gradients {spec}: no such file")
        from repliscope.convert.darknet_keras import _yolo_layer_class

        _yolo_layer_class()
        batch_norm_class()
        try:
            model = keras.saving.load_model(spec, compile=False)
        except Exception as exc:  # a foreign file: one line
            raise RepliscopeError(f"--gradients {spec}: Keras cannot load it: {type(exc).__name__}: {exc}") from None
        desc = {"port": spec}
    elif ":" in spec:
        from repliscope.user_code import load_user_object

        model = _call_user(load_user_object(spec, "--gradients"), net, spec)
        desc = {"port": spec}
    else:
        raise RepliscopeError(f"--gradients {spec}: give {BUILTIN_PORT}, a .keras file, or FILE.py:NAME / module:NAME")
    params = port_params(model, net, mapping)
    desc["mapping"] = params.origin
    port = KerasPort(model, net, params, desc)
    port.load(values)
    return port


Yardstick = tuple["KerasPort", "KerasPort", "KerasPort"]
"""repliscope's training port with Darknet's conventions: float32, float64, float64 with settable leaky
derivative patterns (:func:`yardstick`)."""


def yardstick(net: Network, values: dict[str, ConvParams]) -> Yardstick:
    """repliscope's training port with Darknet's conventions in float32 and in float64 (the gradient diff's
    measure of float32 sensitivity), and in float64 with leaky derivatives settable (what Darknet's kink crossings
    alone do to the gradients)."""
    return (
        load_port(BUILTIN_PORT, net, values, dtype="float32"),
        load_port(BUILTIN_PORT, net, values, dtype="float64"),
        load_port(BUILTIN_PORT, net, values, dtype="float64", leaky_masks=True),
    )


def registered_loss_upstream(
    name: str, cfg: Path, net: Network, truth: np.ndarray, run: Callable[[Any, Any], Any]
) -> Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]:
    """The upstream gradient of the port from a loss of the LOSSES registry (the loss-diff contract,
    ``repliscope.diff.loss.contract``) evaluated on the port's own yolo inputs with ``truth`` (B, boxes, 5) as the
    targets: its ``gradients`` (d total / d outputs of the loss being minimised). ``run(spec, inputs)``: how a
    registered loss runs (the CLI passes :func:`repliscope.stacks.call.run_loss`: here, or in its provisioned
    stack; the diff package itself imports no stack code)."""
    from repliscope.diff.loss.contract import LOSSES, ImageTargets, LossInputs
    from repliscope.diff.loss.sources import yolo_config

    if name not in LOSSES.names():
        raise RepliscopeError(f"--port-loss {name!r}: not a registered loss (allowed: {', '.join(LOSSES.names())})")
    spec = LOSSES.get(name)
    if spec.family != "yolo":
        raise RepliscopeError(f"--port-loss {name}: a {spec.family} loss, the port's outputs are yolo layers'")
    config, _ = yolo_config(cfg, net)
    targets = []
    for i, rows in enumerate(truth):
        kept = rows[rows[:, 0] > 0]
        targets.append(ImageTargets(f"image {i}", kept[:, :4].astype(np.float32), kept[:, 4].astype(np.int64)))

    def upstream(outputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        inputs = LossInputs("yolo", {k: v.astype(np.float32) for k, v in outputs.items()}, tuple(targets), config)
        result = run(spec, inputs)
        for k, g in result.gradients.items():
            if not np.all(np.isfinite(g)):
                raise RepliscopeError(f"--port-loss {name}: its gradient of {k} has NaN/Inf values")
        return {k: np.asarray(g, np.float32) for k, g in result.gradients.items()}

    return upstream
