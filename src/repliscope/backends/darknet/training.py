"""libdarknet in training mode, through the exact struct layouts of :mod:`repliscope.backends.darknet.structs`: the
original side of a gradient diff and of a training-step diff (:mod:`repliscope.diff.training`).

What it calls (pjreddie's Darknet of September 2018, Debian's ``libdarknet.so``):

- :meth:`DarknetTrainer.gradients`: ``net->train = 1``, ``net->input`` / ``net->truth`` set, every layer's
  ``weight_updates`` / ``bias_updates`` / ``scale_updates`` zeroed, then ``forward_network`` and
  ``backward_network``. Darknet's ``delta`` is the NEGATIVE gradient of its cost (``forward_yolo_layer``:
  ``delta = target - output``; ``backward_convolutional_layer`` accumulates ``delta x input`` with ``gemm(...,
  1, c)`` into ``weight_updates``), so each update buffer holds ``-dC/dparam`` summed over the batch; the
  gradient this module returns is its negation (``dC/dparam``, summed over the batch, not averaged);
- :meth:`DarknetTrainer.train_step`: ``train_network(net, d)`` itself (one ``train_network_datum``: ``*seen +=
  batch``, forward, backward, ``update_network`` with ``get_current_rate``), which returns the batch's cost / batch;
- :meth:`DarknetTrainer.yolo_layer`: one yolo layer's own ``forward_yolo_layer`` in training mode on outputs given
  from outside (a port's), its ``delta`` and ``cost``: the original loss applied to another network's outputs.

The training cfg is the given cfg with ``batch`` / ``subdivisions`` of its ``[net]`` section replaced (libdarknet
allocates every layer buffer for ``batch / subdivisions`` images), checked by repliscope's own cfg reader and the
loaded layer array checked against it (:class:`~repliscope.backends.darknet.layer_loop.LayerLoop`).
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import os
import re
from collections.abc import Iterator
from ctypes import POINTER, c_float, c_int, c_size_t, c_void_p
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from repliscope.backends.darknet import lib as dn
from repliscope.backends.darknet.layer_loop import LayerLoop
from repliscope.backends.darknet.lib import DATA, MATRIX
from repliscope.backends.darknet.structs import FORWARD, LAYER, NETWORK
from repliscope.convert.darknet_cfg import DarknetFormatError, load_network_cfg, read_weights
from repliscope.errors import FrameworkError, RepliscopeError

MAX_TRAIN_BATCH = 16
"""Images per training batch this module allows (CPU-sized: yolov3-tiny at 416 needs ~170 MB per image)."""

TRAINABLE_TYPES = ("convolutional", "maxpool", "route", "upsample", "shortcut", "yolo")
"""Darknet layer types the training diff runs on both sides (the Keras training port builds these)."""

POLICY_NAMES = ("constant", "step", "exp", "poly", "steps", "sig", "random")
"""``learning_rate_policy`` in enum order (``net->policy`` indexes it)."""


def _training_library() -> ctypes.CDLL:
    lib = dn.load_library()
    for name in ("forward_network", "backward_network", "update_network"):
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = [c_void_p], None
    lib.train_network.argtypes, lib.train_network.restype = [c_void_p, DATA], c_float
    lib.get_current_rate.argtypes, lib.get_current_rate.restype = [c_void_p], c_float
    lib.get_current_batch.argtypes, lib.get_current_batch.restype = [c_void_p], c_size_t
    lib.fill_cpu.argtypes, lib.fill_cpu.restype = [c_int, c_float, c_void_p, c_int], None
    return lib


@contextlib.contextmanager
def quiet_stdio() -> Iterator[None]:
    """Silence file descriptors 1 and 2 (``forward_yolo_layer`` prints its "Region ... Avg IOU" line to stdout,
    ``load_network`` its layer table to stderr)."""
    import sys

    sys.stdout.flush()
    sys.stderr.flush()
    saved = (os.dup(1), os.dup(2))
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 1)
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])


_NET_KEY = re.compile(r"^\s*(batch|subdivisions)\s*=", re.IGNORECASE)


def training_cfg_text(cfg: Path, batch: int) -> str:
    """The cfg's text with ``[net]``'s ``batch`` / ``subdivisions`` replaced by ``batch`` / 1 (every other line
    kept, comments included)."""
    out: list[str] = []
    section = ""
    for line in cfg.read_text(encoding="utf-8", errors="strict").splitlines():
        stripped = line.strip()
        if stripped.startswith("["):
            section = stripped.lower()
            out.append(line)
            if section in ("[net]", "[network]"):
                out += [f"batch={batch}", "subdivisions=1"]
            continue
        if section in ("[net]", "[network]") and _NET_KEY.match(line):
            continue
        out.append(line)
    return "\n".join(out) + "\n"


@dataclass(frozen=True)
class ConvParams:
    """One convolutional layer's parameters in Darknet's layout: ``weights`` (n, c, size, size), ``biases`` (n,),
    BN ``scales`` / ``rolling_mean`` / ``rolling_variance`` (n,) or None."""

    weights: np.ndarray
    biases: np.ndarray
    scales: np.ndarray | None = None
    rolling_mean: np.ndarray | None = None
    rolling_variance: np.ndarray | None = None

    def arrays(self) -> dict[str, np.ndarray]:
        out = {"weights": self.weights, "biases": self.biases}
        for key in ("scales", "rolling_mean", "rolling_variance"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        return out


@dataclass
class DarknetGradients:
    """One ``forward_network`` + ``backward_network`` in training mode.

    ``gradients``: per convolutional layer, ``dC/dparam`` summed over the batch (the negated update buffers):
    ``weights`` (n, c, size, size), ``biases``, ``scales`` (BN layers). ``outputs``: every layer's training-mode
    output (NCHW, BN on batch statistics). ``deltas``: each yolo layer's ``delta`` (``-dC/d(its input)``, NCHW).
    ``costs``: each yolo layer's ``*l.cost`` (sum of its squared deltas); ``cost``: ``*net->cost`` (their mean)."""

    gradients: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    outputs: dict[str, np.ndarray] = field(default_factory=dict)
    deltas: dict[str, np.ndarray] = field(default_factory=dict)
    costs: dict[str, float] = field(default_factory=dict)
    cost: float = 0.0
    batch_mean: dict[str, np.ndarray] = field(default_factory=dict)
    batch_variance: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass(frozen=True)
class SolverSettings:
    """The ``[net]`` training settings as libdarknet parsed them (read back from ``struct network``)."""

    learning_rate: float
    momentum: float
    decay: float
    policy: str
    burn_in: int
    power: float
    max_batches: int
    steps: tuple[int, ...]
    scales: tuple[float, ...]
    batch: int
    subdivisions: int
    adam: bool


def _floats(ptr: int | None, n: int) -> np.ndarray:
    if not ptr:
        raise FrameworkError("libdarknet returned a NULL buffer")
    return np.ctypeslib.as_array(ctypes.cast(ptr, POINTER(c_float)), shape=(n,)).copy()


def _write(ptr: int | None, values: np.ndarray) -> None:
    if not ptr:
        raise FrameworkError("libdarknet returned a NULL buffer")
    data = np.ascontiguousarray(values, dtype=np.float32).reshape(-1)
    ctypes.memmove(ptr, data.ctypes.data, data.nbytes)


class DarknetTrainer:
    """A libdarknet network loaded for training ``batch`` images at a time from ``cfg`` + ``weights``.

    ``workdir``: where the training cfg is written. ``seen``: set ``*net->seen`` (images seen; the learning-rate
    policy and burn_in read it) instead of the weights header's value."""

    def __init__(
        self, cfg: Path, weights: Path, *, batch: int, workdir: Path, threads: int = 1, seen: int | None = None
    ) -> None:
        if not 1 <= batch <= MAX_TRAIN_BATCH:
            raise RepliscopeError(f"training batch {batch}: allowed 1..{MAX_TRAIN_BATCH}")
        self.lib = _training_library()
        try:
            base = load_network_cfg(cfg)
            read_weights(weights, base)  # a short file would be read past silently by libdarknet: refuse it first
        except DarknetFormatError as exc:
            raise RepliscopeError(str(exc)) from exc
        unsupported = sorted({lay.type for lay in base.layers} - set(TRAINABLE_TYPES))
        if unsupported:
            raise RepliscopeError(
                f"{cfg}: the training diff supports {', '.join(TRAINABLE_TYPES)} layers, not {', '.join(unsupported)}"
            )
        workdir.mkdir(parents=True, exist_ok=True)
        train_cfg = workdir / f"{cfg.stem}.batch{batch}.cfg"
        train_cfg.write_text(training_cfg_text(cfg, batch), encoding="utf-8")
        try:
            network = load_network_cfg(train_cfg)
        except DarknetFormatError as exc:
            raise RepliscopeError(str(exc)) from exc
        if network.batch != batch:
            raise RepliscopeError(f"{train_cfg}: batch {network.batch}, expected {batch}")
        self.cfg, self.weights, self.batch, self.network = cfg, weights, batch, network
        dn.set_threads(threads)
        with quiet_stdio():
            net = self.lib.load_network(str(train_cfg).encode(), str(weights).encode(), 0)
        if not net:
            raise FrameworkError(f"libdarknet could not load {train_cfg} + {weights}")
        self._net: int = net
        LayerLoop(self.lib, net, network)  # checks the layer array (types, shapes, batch, forward pointers)
        self._head = ctypes.cast(net, POINTER(NETWORK))
        self._layers = ctypes.cast(self._head.contents.layers, POINTER(LAYER))
        if seen is not None:
            self.seen = seen

    # -- the network's state ------------------------------------------------------------------------------------

    @property
    def seen(self) -> int:
        """``*net->seen``: images trained on (from the weights header, then += batch per step)."""
        return int(ctypes.cast(self._head.contents.seen, POINTER(ctypes.c_size_t))[0])

    @seen.setter
    def seen(self, value: int) -> None:
        if value < 0:
            raise RepliscopeError(f"seen {value}: must be >= 0")
        ctypes.cast(self._head.contents.seen, POINTER(ctypes.c_size_t))[0] = value

    def current_rate(self) -> float:
        """``get_current_rate(net)``: the learning rate the next ``update_network`` uses at the current ``seen``
        (train_network increments ``seen`` BEFORE updating)."""
        return float(self.lib.get_current_rate(self._net))

    def rate_after(self, steps: int) -> float:
        """The learning rate of the update of the ``steps``-th next step (``seen + steps * batch``)."""
        saved = self.seen
        try:
            self.seen = saved + steps * self.batch * self.solver().subdivisions
            return self.current_rate()
        finally:
            self.seen = saved

    def solver(self) -> SolverSettings:
        h = self._head.contents
        steps: tuple[int, ...] = ()
        if h.steps and h.num_steps:
            steps = tuple(int(v) for v in np.ctypeslib.as_array(ctypes.cast(h.steps, POINTER(c_int)), (h.num_steps,)))
        scales = tuple(float(v) for v in _floats(h.scales, h.num_steps)) if h.scales and h.num_steps else ()
        return SolverSettings(
            learning_rate=float(h.learning_rate),
            momentum=float(h.momentum),
            decay=float(h.decay),
            policy=POLICY_NAMES[h.policy] if 0 <= h.policy < len(POLICY_NAMES) else f"policy {h.policy}",
            burn_in=int(h.burn_in),
            power=float(h.power),
            max_batches=int(h.max_batches),
            steps=steps,
            scales=scales,
            batch=int(h.batch),
            subdivisions=int(h.subdivisions),
            adam=bool(h.adam),
        )

    def conv_layers(self) -> list[str]:
        return [lay.name for lay in self.network.layers if lay.type == "convolutional"]

    def params(self) -> dict[str, ConvParams]:
        """Every convolutional layer's current parameters (copies)."""
        out: dict[str, ConvParams] = {}
        for lay in self.network.layers:
            if lay.type != "convolutional":
                continue
            c = self._layers[lay.index]
            n, size = c.n, c.size
            bn = bool(c.batch_normalize)
            out[lay.name] = ConvParams(
                weights=_floats(c.weights, c.nweights).reshape(n, c.c, size, size),
                biases=_floats(c.biases, n),
                scales=_floats(c.scales, n) if bn else None,
                rolling_mean=_floats(c.rolling_mean, n) if bn else None,
                rolling_variance=_floats(c.rolling_variance, n) if bn else None,
            )
        return out

    def _zero_updates(self) -> None:
        for lay in self.network.layers:
            if lay.type != "convolutional":
                continue
            c = self._layers[lay.index]
            self.lib.fill_cpu(c.nweights, 0.0, c.weight_updates, 1)
            self.lib.fill_cpu(c.n, 0.0, c.bias_updates, 1)
            if c.batch_normalize:
                self.lib.fill_cpu(c.n, 0.0, c.scale_updates, 1)

    def _check_batch(self, x: np.ndarray, truth: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        net = self.network
        want = (self.batch, net.channels, net.height, net.width)
        if x.shape != want:
            raise RepliscopeError(f"training input of shape {x.shape}, expected {want} (NCHW float32)")
        h = self._head.contents
        per_image = h.truths
        if truth.ndim != 3 or truth.shape[0] != self.batch or truth.shape[2] != 5:
            raise RepliscopeError(f"truth of shape {truth.shape}, expected ({self.batch}, boxes, 5): x y w h class")
        if truth.shape[1] * 5 > per_image:
            raise RepliscopeError(f"{truth.shape[1]} boxes per image; libdarknet's truth holds {per_image // 5}")
        flat = np.zeros((self.batch, per_image), np.float32)
        flat[:, : truth.shape[1] * 5] = truth.reshape(self.batch, -1)
        return np.ascontiguousarray(x, dtype=np.float32), flat

    def _set_batch(self, x: np.ndarray, truth: np.ndarray) -> None:
        data, flat = self._check_batch(x, truth)
        h = self._head.contents
        _write(h.input, data)
        _write(h.truth, flat)

    def _read_updates(self) -> dict[str, dict[str, np.ndarray]]:
        out: dict[str, dict[str, np.ndarray]] = {}
        for lay in self.network.layers:
            if lay.type != "convolutional":
                continue
            c = self._layers[lay.index]
            grads = {
                "weights": -_floats(c.weight_updates, c.nweights).reshape(c.n, c.c, c.size, c.size),
                "biases": -_floats(c.bias_updates, c.n),
            }
            if c.batch_normalize:
                grads["scales"] = -_floats(c.scale_updates, c.n)
            out[lay.name] = grads
        return out

    def gradients(self, x: np.ndarray, truth: np.ndarray) -> DarknetGradients:
        """``dC/dparam`` of every convolutional layer for the batch ``x`` (B, C, H, W) with ``truth`` (B, boxes, 5:
        x, y, w, h relative to the network input, class; a row with x = 0 ends the list). The network's parameters
        and rolling statistics are left as they were (the update buffers are zeroed before and after)."""
        saved = self.params()
        self._set_batch(x, truth)
        self._zero_updates()
        h = self._head.contents
        h.train = 1
        try:
            with quiet_stdio():
                self.lib.forward_network(self._net)
                self.lib.backward_network(self._net)
        finally:
            self._head.contents.train = 0
        result = DarknetGradients(gradients=self._read_updates())
        for lay in self.network.layers:
            c = self._layers[lay.index]
            shape = (self.batch, *lay.out_shape)
            result.outputs[lay.name] = _floats(c.output, c.outputs * c.batch).reshape(shape)
            if lay.type == "yolo":
                result.deltas[lay.name] = _floats(c.delta, c.outputs * c.batch).reshape(shape)
                result.costs[lay.name] = float(_floats(c.cost, 1)[0])
            if lay.type == "convolutional" and c.batch_normalize:
                result.batch_mean[lay.name] = _floats(c.mean, c.n)
                result.batch_variance[lay.name] = _floats(c.variance, c.n)
        result.cost = float(_floats(self._head.contents.cost, 1)[0])
        self._zero_updates()
        self._restore_rolling(saved)
        return result

    def _restore_rolling(self, saved: dict[str, ConvParams]) -> None:
        for name, p in saved.items():
            c = self._layers[self.network.layer(name).index]
            if p.rolling_mean is not None and p.rolling_variance is not None:
                _write(c.rolling_mean, p.rolling_mean)
                _write(c.rolling_variance, p.rolling_variance)

    def train_step(self, x: np.ndarray, truth: np.ndarray) -> float:
        """One ``train_network(net, d)`` on the batch (d.X: B rows of the flattened images, d.y: B truth rows);
        returns what it returns: the cost of the forward pass before the update, divided by the batch."""
        data, flat = self._check_batch(x, truth)
        rows_x = data.reshape(self.batch, -1)
        x_ptrs = (POINTER(c_float) * self.batch)(*(r.ctypes.data_as(POINTER(c_float)) for r in rows_x))
        y_ptrs = (POINTER(c_float) * self.batch)(*(r.ctypes.data_as(POINTER(c_float)) for r in flat))
        d = DATA()
        d.w, d.h = self.network.width, self.network.height
        d.X = MATRIX(self.batch, rows_x.shape[1], ctypes.cast(x_ptrs, POINTER(POINTER(c_float))))
        d.y = MATRIX(self.batch, flat.shape[1], ctypes.cast(y_ptrs, POINTER(POINTER(c_float))))
        d.shallow = 1
        with quiet_stdio():
            loss = float(self.lib.train_network(self._net, d))
        return loss

    def yolo_layer(self, name: str, inputs: np.ndarray, truth: np.ndarray) -> tuple[np.ndarray, float]:
        """``forward_yolo_layer`` of layer ``name`` in training mode on ``inputs`` (B, C, H, W: the yolo layer's
        input, e.g. a port's last conv output) and ``truth``: (its ``delta`` = ``-dC/dinputs``, its ``cost``)."""
        lay = self.network.layer(name)
        if lay.type != "yolo":
            raise RepliscopeError(f"{name} is a {lay.type} layer, not a yolo layer")
        want = (self.batch, *lay.in_shape)
        if inputs.shape != want:
            raise RepliscopeError(f"{name}: inputs of shape {inputs.shape}, expected {want}")
        net_shape = (self.batch, self.network.channels, self.network.height, self.network.width)
        _, flat = self._check_batch(np.zeros(net_shape, np.float32), truth)
        data = np.ascontiguousarray(inputs, dtype=np.float32)
        net = NETWORK.from_buffer_copy(self._head.contents)
        net.input = data.ctypes.data
        net.truth = flat.ctypes.data
        net.train = 1
        net.index = lay.index
        layer = self._layers[lay.index]
        with quiet_stdio():
            FORWARD(layer.forward)(layer, net)
        delta = _floats(layer.delta, layer.outputs * layer.batch).reshape(want)
        return delta, float(_floats(layer.cost, 1)[0])

    def close(self) -> None:
        if self._net:
            self.lib.free_network(self._net)
            self._net = 0

    def __enter__(self) -> DarknetTrainer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def darknet_rate(s: SolverSettings, batch_num: int) -> float:
    """``get_current_rate`` (src/network.c) for ``batch_num = seen / (batch x subdivisions)``, rounded as C
    computes it: ``(float)batch_num / burn_in`` in float, ``pow`` in double, the product returned as float."""
    f = np.float32
    lr = f(s.learning_rate)
    if batch_num < s.burn_in:
        return float(f(float(lr) * math.pow(float(f(f(batch_num) / f(s.burn_in))), s.power)))
    if s.policy == "constant":
        return float(lr)
    if s.policy == "steps":
        rate = lr
        for step, scale in zip(s.steps, s.scales, strict=True):
            if step > batch_num:
                return float(rate)
            rate = f(rate * f(scale))
        return float(rate)
    if s.policy == "poly":
        return float(f(float(lr) * math.pow(float(f(1 - f(f(batch_num) / f(s.max_batches)))), s.power)))
    raise RepliscopeError(
        f"learning-rate policy '{s.policy}': the training diff reproduces constant, steps and poly (and burn_in)"
    )
