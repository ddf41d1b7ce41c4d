"""A Keras port of a Darknet network that can TRAIN: batch normalisation kept as a layer (``convert --to keras``
folds it into the convolution, which is right for inference and wrong for training, where Darknet normalises with
the batch's own statistics), and each Darknet parameter a Keras variable.

Layers of Darknet layer ``convolutional_3`` (the names a user's port can follow instead of a ``--mapping``):
``convolutional_3_pad`` (``ZeroPadding2D``), ``convolutional_3_conv`` (``Conv2D``, no bias when BN follows),
``convolutional_3_bn`` (:class:`DarknetBatchNorm`), and the activation named ``convolutional_3`` (its output is the
Darknet layer's output). Other layers as :mod:`repliscope.convert.darknet_keras` builds them.

Darknet's batch normalisation in training mode (``forward_batchnorm_layer`` with ``net.train = 1``, pjreddie's
src/batchnorm_layer.c and src/blas.c)::

    mean = sum(x) / N                       N = batch x out_h x out_w
    var  = sum((x - mean)^2) / (N - 1)      the UNBIASED variance (variance_cpu)
    x_norm = (x - mean) / (sqrt(var) + 1e-6)        epsilon added to the square root (normalize_cpu)
    rolling = .99 * rolling + .01 * batch statistic   (the unbiased variance is what it keeps)

and its backward (``backward_batchnorm_layer``) is NOT the derivative of that forward: with ``d`` = the delta
reaching ``x_norm`` (after the scale)::

    mean_delta = sum(d) * -1 / sqrt(var + 1e-5)
    var_delta  = sum(d * (x - mean)) * -0.5 * (var + 1e-5)^(-3/2)
    dx = d / sqrt(var + 1e-5) + var_delta * 2 (x - mean) / N + mean_delta / N

(epsilon 1e-5 INSIDE the square root, and ``/ N`` where the forward divided by ``N - 1``). ``bn`` picks the port's
convention: ``"darknet"`` (the forward above and exactly that backward, through ``tf.custom_gradient``: the port
that reproduces Darknet's training), ``"autodiff"`` (the same forward, TensorFlow's exact derivative of it) or
``"keras"`` (``keras.layers.BatchNormalization(epsilon=1e-6, momentum=0.99)``: biased variance, epsilon inside the
square root, as a stock port would write it). ``bn_dtype`` runs the normalisation layers in ``bfloat16`` /
``float16`` (the mixed-precision pitfall: statistics and normalisation in the low precision, the result cast back).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from repliscope.backends.darknet.training import ConvParams
from repliscope.convert.darknet_cfg import DarknetFormatError, Network
from repliscope.convert.darknet_onnx import LEAKY_SLOPE
from repliscope.errors import RepliscopeError

BnMode = Literal["darknet", "autodiff", "keras"]
BN_MODES: tuple[str, ...] = ("darknet", "autodiff", "keras")
BN_DTYPES: tuple[str, ...] = ("float32", "bfloat16", "float16")
FORWARD_EPSILON = 1e-6
"""``normalize_cpu``: ``(x - mean) / (sqrt(var) + .000001f)``."""
BACKWARD_EPSILON = 1e-5
"""``mean_delta_cpu`` / ``variance_delta_cpu`` / ``normalize_delta_cpu``: ``sqrt(var + .00001f)``."""
ROLLING_MOMENTUM = 0.99
"""``forward_batchnorm_layer``: ``rolling = .99 * rolling + .01 * batch statistic``."""


def import_tf_keras() -> tuple[Any, Any]:
    """(tensorflow, keras) on the TensorFlow backend (the port's gradients come from ``tf.GradientTape``)."""
    from repliscope.convert.keras_target import import_keras

    keras = import_keras()
    import tensorflow as tf

    return tf, keras


def _darknet_normalize(tf: Any) -> Any:
    """``x_norm = (x - mean) / (sqrt(var_unbiased) + 1e-6)`` over axes (0, 1, 2) of NHWC ``x``, with Darknet's
    backward (module doc) as its gradient."""

    @tf.custom_gradient
    def normalize(x: Any) -> Any:
        n = tf.cast(tf.reduce_prod(tf.shape(x)[:-1]), x.dtype)
        mean = tf.reduce_mean(x, axis=(0, 1, 2))
        centred = x - mean
        var = tf.reduce_sum(tf.square(centred), axis=(0, 1, 2)) / (n - 1)
        y = centred / (tf.sqrt(var) + FORWARD_EPSILON)

        def grad(d: Any) -> Any:
            root = tf.sqrt(var + BACKWARD_EPSILON)
            mean_delta = tf.reduce_sum(d, axis=(0, 1, 2)) * (-1.0 / root)
            var_delta = tf.reduce_sum(d * centred, axis=(0, 1, 2)) * (-0.5 * tf.pow(var + BACKWARD_EPSILON, -1.5))
            return d / root + var_delta * 2.0 * centred / n + mean_delta / n

        return y, grad

    return normalize


def batch_norm_class() -> Any:
    """:class:`DarknetBatchNorm` (a Keras layer class, registered for ``.keras`` files)."""
    tf, _ = import_tf_keras()
    import keras

    normalize = _darknet_normalize(tf)

    @keras.saving.register_keras_serializable(package="repliscope")
    class DarknetBatchNorm(keras.layers.Layer):
        """Darknet's batch normalisation (module doc): ``gamma`` = Darknet's ``scales``, ``beta`` = its
        ``biases``; ``training=True`` normalises with the batch statistics and updates the moving ones."""

        def __init__(self, mode: str = "darknet", compute: str = "float32", **kwargs: Any) -> None:
            super().__init__(**kwargs)
            if mode not in ("darknet", "autodiff"):
                raise RepliscopeError(f"DarknetBatchNorm mode {mode!r} (allowed: darknet, autodiff)")
            self.mode, self.compute = mode, compute

        def build(self, input_shape: Any) -> None:
            n = int(input_shape[-1])
            self.gamma = self.add_weight(shape=(n,), initializer="ones", name="gamma")
            self.beta = self.add_weight(shape=(n,), initializer="zeros", name="beta")
            self.moving_mean = self.add_weight(shape=(n,), initializer="zeros", name="moving_mean", trainable=False)
            self.moving_variance = self.add_weight(
                shape=(n,), initializer="ones", name="moving_variance", trainable=False
            )

        def call(self, x: Any, training: bool = False) -> Any:
            xs = x if self.compute == "float32" else tf.cast(x, tf.as_dtype(self.compute))
            if training:
                n = tf.cast(tf.reduce_prod(tf.shape(xs)[:-1]), xs.dtype)
                if self.mode == "darknet":
                    y = normalize(xs)
                else:
                    centred = xs - tf.reduce_mean(xs, axis=(0, 1, 2))
                    var = tf.reduce_sum(tf.square(centred), axis=(0, 1, 2)) / (n - 1)
                    y = centred / (tf.sqrt(var) + FORWARD_EPSILON)
                xf = tf.stop_gradient(tf.cast(x, self.moving_mean.dtype))
                nf = tf.cast(tf.reduce_prod(tf.shape(xf)[:-1]), xf.dtype)
                mean = tf.reduce_mean(xf, axis=(0, 1, 2))
                var_f = tf.reduce_sum(tf.square(xf - mean), axis=(0, 1, 2)) / (nf - 1)
                self.moving_mean.assign(ROLLING_MOMENTUM * self.moving_mean + (1 - ROLLING_MOMENTUM) * mean)
                self.moving_variance.assign(ROLLING_MOMENTUM * self.moving_variance + (1 - ROLLING_MOMENTUM) * var_f)
            else:
                mean_l = tf.cast(self.moving_mean, xs.dtype)
                root = tf.sqrt(tf.cast(self.moving_variance, xs.dtype)) + FORWARD_EPSILON
                y = (xs - mean_l) / root
            y = tf.cast(y, x.dtype) if y.dtype != x.dtype else y
            return y * self.gamma + self.beta

        def get_config(self) -> dict[str, Any]:
            return {**super().get_config(), "mode": self.mode, "compute": self.compute}

    return DarknetBatchNorm


def masked_leaky_class() -> Any:
    """:class:`MaskedLeaky`: ``LeakyReLU``'s forward; its derivative from a given sign pattern when ``mask`` is set
    (another implementation's ``output > 0``), else from its own input. The yardstick uses it to measure what
    Darknet's kink crossings alone do to the gradients."""
    tf, _ = import_tf_keras()
    import keras

    class MaskedLeaky(keras.layers.Layer):
        def __init__(self, negative_slope: float = LEAKY_SLOPE, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.negative_slope = negative_slope
            self.mask: Any = None

        def call(self, x: Any) -> Any:
            slope = self.negative_slope
            if self.mask is None:
                return tf.where(x > 0, x, slope * x)
            m = tf.cast(self.mask, x.dtype)

            @tf.custom_gradient
            def leaky(v: Any) -> Any:
                def grad(dy: Any) -> Any:
                    return dy * (m + (1 - m) * slope)

                return tf.where(v > 0, v, slope * v), grad

            return leaky(x)

        def get_config(self) -> dict[str, Any]:
            return {**super().get_config(), "negative_slope": self.negative_slope}

    return MaskedLeaky


def _keras_bn(keras: Any, name: str, compute: str, dtype: str) -> Any:
    """Stock ``BatchNormalization`` as a naive port writes it (epsilon inside the square root, biased variance);
    ``compute``: the normalisation's dtype policy."""
    policy = dtype if compute == "float32" else f"mixed_{compute}"
    return keras.layers.BatchNormalization(epsilon=FORWARD_EPSILON, momentum=ROLLING_MOMENTUM, name=name, dtype=policy)


@dataclass
class PortParams:
    """Darknet (layer, param) -> the port's Keras variable: ``weights`` (kernel HWIO, Darknet OIHW), ``biases``
    (the BN ``beta`` or the conv bias), ``scales`` (BN ``gamma``), ``rolling_mean`` / ``rolling_variance``."""

    variables: dict[str, dict[str, Any]] = field(default_factory=dict)
    outputs: dict[str, str] = field(default_factory=dict)
    """Darknet layer name -> the Keras layer whose output is that layer's output."""
    origin: str = "names"

    def trainable(self) -> list[tuple[str, str, Any]]:
        return [
            (layer, param, var)
            for layer, params in self.variables.items()
            for param, var in params.items()
            if param in ("weights", "biases", "scales")
        ]


def build_training_port(
    net: Network,
    *,
    bn: str = "darknet",
    bn_dtype: str = "float32",
    dtype: str = "float32",
    leaky_slope: float = LEAKY_SLOPE,
    low_precision: frozenset[str] | None = None,
    leaky_masks: bool = False,
) -> Any:
    """The functional ``keras.Model`` (NHWC) whose outputs are every Darknet layer's output, in order, with
    untrained variables (:func:`load_darknet_params` sets the original's). ``dtype``: every layer's dtype
    (``float64``: the same equations with float64 rounding, the yardstick of a gradient's float32 sensitivity).
    ``low_precision``: the Darknet layers whose normalisation runs in ``bn_dtype`` (None: every one).
    ``leaky_masks``: leaky activations are :func:`masked_leaky_class` layers (their derivative pattern settable)."""
    if bn not in BN_MODES:
        raise RepliscopeError(f"batch-norm convention {bn!r} (allowed: {', '.join(BN_MODES)})")
    if dtype not in ("float32", "float64"):
        raise RepliscopeError(f"port dtype {dtype!r} (allowed: float32, float64)")
    if bn_dtype not in BN_DTYPES:
        raise RepliscopeError(f"batch-norm dtype {bn_dtype!r} (allowed: {', '.join(BN_DTYPES)})")
    unknown = sorted(set(low_precision or ()) - {lay.name for lay in net.layers if lay.params.get("batch_normalize")})
    if unknown:
        raise RepliscopeError(f"low-precision layers {', '.join(unknown)}: not batch-normalised layers of the cfg")
    _, keras = import_tf_keras()
    from repliscope.convert.darknet_keras import _yolo_layer_class

    yolo_cls = _yolo_layer_class()
    bn_cls = batch_norm_class() if bn != "keras" else None
    leaky_cls = masked_leaky_class() if leaky_masks else None
    inp = keras.Input((net.height, net.width, net.channels), name="data", dtype=dtype)
    outs: list[Any] = []
    x = inp
    for lay in net.layers:
        p, name = lay.params, lay.name
        if lay.type == "convolutional":
            pad, size, stride = int(p["pad"]), int(p["size"]), int(p["stride"])  # type: ignore[call-overload]
            filters, has_bn = int(p["filters"]), bool(p["batch_normalize"])  # type: ignore[call-overload]
            y = keras.layers.ZeroPadding2D(pad, name=f"{name}_pad", dtype=dtype)(x) if pad else x
            conv = keras.layers.Conv2D(
                filters, size, strides=stride, padding="valid", use_bias=not has_bn, name=f"{name}_conv", dtype=dtype
            )
            y = conv(y)
            if has_bn:
                compute = bn_dtype if low_precision is None or name in low_precision else "float32"
                if bn_cls is None:
                    norm = _keras_bn(keras, f"{name}_bn", compute, dtype)
                else:
                    norm = bn_cls(mode=bn, compute=compute, name=f"{name}_bn", dtype=dtype)
                y = norm(y)
            act = p["activation"]
            if act == "leaky" and leaky_cls is not None:
                y = leaky_cls(negative_slope=leaky_slope, name=name, dtype=dtype)(y)
            elif act == "leaky":
                y = keras.layers.LeakyReLU(negative_slope=leaky_slope, name=name, dtype=dtype)(y)
            elif act == "relu":
                y = keras.layers.ReLU(name=name, dtype=dtype)(y)
            elif act == "logistic":
                y = keras.layers.Activation("sigmoid", name=name, dtype=dtype)(y)
            elif act == "linear":
                y = keras.layers.Identity(name=name, dtype=dtype)(y)
            else:
                raise DarknetFormatError(f"{name}: activation {act} is not supported by the training port")
        elif lay.type == "maxpool":
            size, stride, padding = int(p["size"]), int(p["stride"]), int(p["padding"])  # type: ignore[call-overload]
            if padding != size - 1:
                raise DarknetFormatError(f"{name}: maxpool padding {padding} (size {size}): padding = size - 1 only")
            y = keras.layers.MaxPooling2D(size, strides=stride, padding="same", name=name, dtype=dtype)(x)
        elif lay.type == "route":
            srcs = [outs[i] for i in p["layers"]]  # type: ignore[attr-defined]
            if len(srcs) > 1:
                y = keras.layers.Concatenate(axis=-1, name=name, dtype=dtype)(srcs)
            else:
                y = keras.layers.Identity(name=name, dtype=dtype)(srcs[0])
        elif lay.type == "shortcut":
            y = keras.layers.Add(name=name, dtype=dtype)([x, outs[int(p["from"])]])  # type: ignore[call-overload]
        elif lay.type == "upsample":
            y = keras.layers.UpSampling2D(int(p["stride"]), interpolation="nearest", name=name, dtype=dtype)(x)  # type: ignore[call-overload]
        elif lay.type == "yolo":
            anchors = len(p["mask"])  # type: ignore[arg-type]
            y = yolo_cls(anchors, lay.in_shape[0] // anchors, name=name, dtype=dtype)(x)
        else:
            raise DarknetFormatError(f"{name}: layer type {lay.type} is not supported by the training port")
        outs.append(y)
        x = y
    return keras.Model(inp, outs, name="darknet_training_port")


def _bn_variables(layer: Any) -> dict[str, Any]:
    """gamma / beta / moving_mean / moving_variance of a Keras BatchNormalization or a DarknetBatchNorm."""
    by_name = {v.path.split("/")[-1]: v for v in layer.weights}
    missing = [k for k in ("gamma", "beta", "moving_mean", "moving_variance") if k not in by_name]
    if missing:
        raise RepliscopeError(
            f"port layer {layer.name!r} is no batch normalisation: it has no {', '.join(missing)} variable "
            f"(it has {', '.join(sorted(by_name)) or 'none'})"
        )
    return {
        "scales": by_name["gamma"],
        "biases": by_name["beta"],
        "rolling_mean": by_name["moving_mean"],
        "rolling_variance": by_name["moving_variance"],
    }


def port_params(model: Any, net: Network, mapping: dict[str, Any] | None = None) -> PortParams:
    """Pair every Darknet parameter with the port's variable: by the naming convention (module doc), or by
    ``mapping`` (Darknet layer -> ``{conv: K, bn: K, output: K}`` Keras layer names, or a Keras layer name: the
    layer whose output is the Darknet layer's). Errors name the Darknet layer and the missing Keras layer."""
    names = {layer.name for layer in model.layers}
    result = PortParams(origin="--mapping" if mapping else "names")
    mapping = mapping or {}
    unknown = sorted(set(mapping) - {lay.name for lay in net.layers})
    if unknown:
        raise RepliscopeError(f"--mapping names {', '.join(unknown)}, not layers of the cfg")

    def entry(lay_name: str, key: str, default: str) -> str:
        value = mapping.get(lay_name)
        if isinstance(value, str):
            return value if key == "output" else default
        if isinstance(value, dict):
            got = value.get(key, default)
            if not isinstance(got, str):
                raise RepliscopeError(f"--mapping {lay_name}.{key}: a Keras layer name, not {got!r}")
            return got
        if value is not None:
            raise RepliscopeError(f"--mapping {lay_name}: a Keras layer name or {{conv, bn, output}}, not {value!r}")
        return default

    def layer(lay_name: str, key: str, keras_name: str) -> Any:
        if keras_name not in names:
            raise RepliscopeError(
                f"{lay_name} ({key}): the port has no layer {keras_name!r}; name it so, or give --mapping "
                f"'{lay_name}: {{{key}: YOUR_LAYER}}'"
            )
        return model.get_layer(keras_name)

    for lay in net.layers:
        out = entry(lay.name, "output", lay.name)
        layer(lay.name, "output", out)
        result.outputs[lay.name] = out
        if lay.type != "convolutional":
            continue
        conv = layer(lay.name, "conv", entry(lay.name, "conv", f"{lay.name}_conv"))
        kernel = getattr(conv, "kernel", None)
        if kernel is None:
            raise RepliscopeError(f"{lay.name}: port layer {conv.name!r} has no kernel (a Conv2D is expected)")
        params: dict[str, Any] = {"weights": kernel}
        if lay.params["batch_normalize"]:
            if getattr(conv, "bias", None) is not None:
                raise RepliscopeError(
                    f"{lay.name}: port conv {conv.name!r} has a bias; Darknet's convolution before batch "
                    "normalisation has none (use_bias=False)"
                )
            params |= _bn_variables(layer(lay.name, "bn", entry(lay.name, "bn", f"{lay.name}_bn")))
        else:
            bias = getattr(conv, "bias", None)
            if bias is None:
                raise RepliscopeError(f"{lay.name}: port conv {conv.name!r} has no bias; Darknet's has one")
            params["biases"] = bias
        result.variables[lay.name] = params
    return result


def to_darknet_layout(param: str, value: np.ndarray) -> np.ndarray:
    """A port array in Darknet's layout: kernels HWIO -> OIHW; vectors unchanged."""
    return value.transpose(3, 2, 0, 1) if param == "weights" else value


def load_darknet_params(params: PortParams, values: dict[str, ConvParams]) -> None:
    """Assign the original's parameters (libdarknet's, :meth:`DarknetTrainer.params`) to the port's variables;
    refuses a shape that differs, naming the layer and parameter."""
    for layer, vars_ in params.variables.items():
        arrays = values[layer].arrays()
        for param, var in vars_.items():
            value = arrays[param]
            if param == "weights":
                value = value.transpose(2, 3, 1, 0)
            if tuple(var.shape) != value.shape:
                raise RepliscopeError(
                    f"{layer}.{param}: the port's variable {var.path} has shape {tuple(var.shape)}, Darknet's "
                    f"{value.shape} (in the port's layout)"
                )
            var.assign(value.astype(np.float32))


def read_port_params(params: PortParams) -> dict[str, dict[str, np.ndarray]]:
    """The port's current parameters in Darknet's layout."""
    return {
        layer: {param: to_darknet_layout(param, np.asarray(var.numpy(), np.float32)) for param, var in vs.items()}
        for layer, vs in params.variables.items()
    }
