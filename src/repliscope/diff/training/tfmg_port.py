"""The TF Model Garden's own YOLOv3-tiny (examples/tfmg/yolov3_tiny.py, tf-models-official 2.20.0 on TensorFlow
2.20 + tf_keras) as the port of a gradient diff, its tape run in the Model Garden's stack.

The model cannot run here (its pins are not ours), so each pass crosses to the stack once
(:func:`repliscope.stacks.call.run_task` ``tfmg_yolov3_tiny_gradients``; the diff package imports no stack code,
the caller passes the runner): the batch, Darknet's upstream gradient at the two yolo layers' inputs and the
weights' paths go in as one ``.npz``; the child builds the model from the Model Garden's parts with pjreddie's
weights (``build``), runs ``tf.GradientTape`` in training mode twice (the run-to-run spread) with
``output_gradients`` = the upstream at the heads (level 5 = ``convolutional_15``, level 4 = ``convolutional_22``),
and returns every mapped variable's gradient in Darknet's layout (kernel HWIO -> OIHW; batch norm gamma ->
``scales``, beta -> ``biases``; the heads' conv bias -> ``biases``) and the heads' training-mode outputs.

With a :class:`StepsPlan` the same crossing also takes the training-step diff's steps from the loaded weights
(:func:`_steps`: libdarknet's ``forward_yolo_layer`` on the model's own heads, loaded in the stack through ctypes,
and tf_keras' SGD configured as :mod:`repliscope.diff.training.steps` documents) and returns every parameter after
each step; :meth:`TfmgPort.stepped` serves them to ``run_training_diff``.

Batch norm (``bn``):

- ``as-loaded``: the Model Garden's own ``tf_keras.layers.BatchNormalization`` (epsilon 1e-3 inside the square
  root, BIASED batch variance, TensorFlow's exact derivative) in training mode: the moving statistics are not
  read, so folding the variances (the inference fix of the layer diff) changes nothing here;
- ``darknet-bn``: each of the Model Garden's batch-norm layers called with Darknet's training normalisation
  (unbiased batch variance, ``(x - mean) / (sqrt(var) + 1e-6)``, Darknet's hand-written backward:
  :func:`repliscope.diff.training.keras_port._darknet_normalize`), gamma and beta the Model Garden's own.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from repliscope.backends.darknet.training import DarknetTrainer, darknet_rate
from repliscope.convert.darknet_cfg import Network
from repliscope.diff.loss.originals.stack_io import read_meta, read_npz, write_npz
from repliscope.diff.training.batches import Batch
from repliscope.diff.training.port import PortGradients, Upstream, yolo_inputs
from repliscope.errors import RepliscopeError

TASK = "tfmg_yolov3_tiny_gradients"
FORMAT = "repliscope-tfmg-gradients/1"
BN_MODES = ("as-loaded", "darknet-bn")
RUNS = 2
"""Tape passes per crossing (two: the run-to-run spread the gradient diff reports)."""

Runner = Callable[[str, Path, Path], None]
"""``run(task, IN, OUT)``: how a registered task runs in its stack (the CLI and tests pass
:func:`repliscope.stacks.call.run_task`)."""


def example_path() -> Path:
    """examples/tfmg/yolov3_tiny.py of the checkout repliscope runs from (stacks install repliscope from it)."""
    path = Path(__file__).resolve().parents[4] / "examples" / "tfmg" / "yolov3_tiny.py"
    if not path.is_file():
        raise RepliscopeError(f"{path}: the Model Garden example is missing (repliscope must run from its checkout)")
    return path


def _example() -> Any:
    spec = importlib.util.spec_from_file_location("repliscope_tfmg_yolov3_tiny", example_path())
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _darknet_bn(tf: Any, model: Any, layers: dict[str, Any]) -> int:
    """Every batch-norm layer of ``model`` called with Darknet's training normalisation (module doc)."""
    from repliscope.diff.training.keras_port import _darknet_normalize

    normalize = _darknet_normalize(tf)
    count = 0
    for layer in layers.values():
        if type(layer).__name__ != "BatchNormalization":
            continue

        def call(inputs: Any, training: Any = None, _bn: Any = layer) -> Any:
            if training:
                return normalize(inputs) * _bn.gamma + _bn.beta
            return (inputs - _bn.moving_mean) / (tf.sqrt(_bn.moving_variance) + 1e-6) * _bn.gamma + _bn.beta

        layer.call = call
        count += 1
    return count


def child(into: Path, out: Path) -> None:
    """In the Model Garden's stack: the gradients of the model's heads w.r.t. every mapped variable (module doc)."""
    meta, arrays = read_npz(into, FORMAT)  # before any framework: a refused file costs nothing
    import tensorflow as tf

    result: dict[str, np.ndarray] = {}
    patched, optimizers = {}, {}
    for bn in meta["modes"]:
        if bn not in BN_MODES:
            raise RepliscopeError(f"bn {bn!r} (allowed: {', '.join(BN_MODES)})")
        patched[bn], optimizers[bn] = _passes(tf, meta, arrays, bn, result)
    done = {"format": FORMAT, "runs": int(meta["runs"]), "bn_layers_patched": patched, "optimizers": optimizers}
    write_npz(out, done, result)


def _passes(
    tf: Any, meta: dict[str, Any], arrays: dict[str, np.ndarray], bn: str, result: dict[str, Any]
) -> tuple[int, dict[str, Any] | None]:
    """The tape passes of one batch-norm mode into ``result`` (keys ``bn/g<run>/layer/param``, ``bn/out/yolo``),
    then its steps if asked (:func:`_steps`); returns how many batch-norm layers were given Darknet's
    normalisation and the optimiser of the steps."""
    example = _example()
    model = example.build(Path(meta["cfg"]), Path(meta["weights"]))
    layers = example._walk(model)
    patched = _darknet_bn(tf, model, layers) if bn == "darknet-bn" else 0
    variables: list[tuple[str, str, Any]] = []
    for dn_name, path in example.DARKNET_TO_TFMG.items():
        named = {v.name.split("/")[-1].split(":")[0]: v for v in layers[path].weights}
        variables.append((dn_name, "weights", named["kernel"]))
        if "gamma" in named:
            variables += [(dn_name, "scales", named["gamma"]), (dn_name, "biases", named["beta"])]
        else:
            variables.append((dn_name, "biases", named["bias"]))
    x = tf.constant(np.ascontiguousarray(arrays["x"].transpose(0, 2, 3, 1)))
    heads: list[tuple[str, str]] = [(str(y), str(level)) for y, level in meta["heads"]]
    upstream = [tf.constant(np.ascontiguousarray(arrays[f"up_{y}"].transpose(0, 2, 3, 1))) for y, _ in heads]
    for run in range(int(meta["runs"])):
        with tf.GradientTape() as tape:
            outputs = model(x, training=True)
            watched = [outputs[level] for _, level in heads]
        grads = tape.gradient(watched, [v for _, _, v in variables], output_gradients=upstream)
        for (layer, param, var), grad in zip(variables, grads, strict=True):
            if grad is None:
                raise RepliscopeError(f"{layer}.{param}: the Model Garden's {var.name} gets no gradient")
            arr = np.asarray(grad.numpy(), np.float32)
            result[f"{bn}/g{run}/{layer}/{param}"] = arr.transpose(3, 2, 0, 1) if param == "weights" else arr
        if run == 0:
            for (y, _), o in zip(heads, watched, strict=True):
                result[f"{bn}/out/{y}"] = np.asarray(o.numpy(), np.float32).transpose(0, 3, 1, 2)
    optimizer = _steps(tf, meta, arrays, bn, model, variables, heads, result) if meta.get("steps") else None
    return patched, optimizer


def _steps(
    tf: Any,
    meta: dict[str, Any],
    arrays: dict[str, np.ndarray],
    bn: str,
    model: Any,
    variables: list[tuple[str, str, Any]],
    heads: list[tuple[str, str]],
    result: dict[str, Any],
) -> dict[str, Any]:
    """``meta["steps"]`` SGD steps of the model from the loaded weights, as the training diff's port takes them
    (:func:`repliscope.diff.training.steps._port_step`): Darknet's yolo delta and cost on the model's own heads
    (libdarknet's ``forward_yolo_layer``, loaded here through ctypes), ``g / B (+ decay * W on kernels)``,
    tf_keras' ``SGD(lr, momentum, nesterov=False)``. Records each step's loss and every parameter after it."""
    import tempfile

    import tf_keras

    from repliscope.backends.darknet.training import DarknetTrainer

    plan = meta["steps"]
    b = int(arrays["steps_x_0"].shape[0])
    optimizer = tf_keras.optimizers.SGD(learning_rate=plan["rates"][0], momentum=plan["momentum"], nesterov=False)
    losses = []
    with tempfile.TemporaryDirectory(prefix="repliscope-tfmg-oracle-") as work:
        oracle = DarknetTrainer(Path(meta["cfg"]), Path(meta["weights"]), batch=b, workdir=Path(work))
        try:
            for t, rate in enumerate(plan["rates"]):
                x = tf.constant(np.ascontiguousarray(arrays[f"steps_x_{t}"].transpose(0, 2, 3, 1)))
                truth = arrays[f"steps_truth_{t}"]
                with tf.GradientTape() as tape:
                    outputs = model(x, training=True)
                    watched = [outputs[level] for _, level in heads]
                upstream, costs = [], []
                for (y, _), head in zip(heads, watched, strict=True):
                    arr = np.asarray(head.numpy(), np.float32).transpose(0, 3, 1, 2)
                    if not np.all(np.isfinite(arr)):
                        raise RepliscopeError(f"step {t + 1}: the Model Garden's input of {y} has NaN/Inf values")
                    delta, cost = oracle.yolo_layer(y, np.ascontiguousarray(arr), truth)
                    upstream.append(tf.constant(np.ascontiguousarray((-delta).transpose(0, 2, 3, 1))))
                    costs.append(cost)
                grads = tape.gradient(watched, [v for _, _, v in variables], output_gradients=upstream)
                applied = []
                for (_, param, var), grad in zip(variables, grads, strict=True):
                    g = grad / b
                    applied.append(g + plan["decay"] * var if param == "weights" else g)
                optimizer.learning_rate = rate
                optimizer.apply_gradients(zip(applied, [v for _, _, v in variables], strict=True))
                losses.append(float(np.float32(sum(costs) / len(costs)) / b))
                for layer, param, var in variables:
                    arr = np.asarray(var.numpy(), np.float32)
                    result[f"{bn}/s{t}/{layer}/{param}"] = arr.transpose(3, 2, 0, 1) if param == "weights" else arr
        finally:
            oracle.close()
    result[f"{bn}/losses"] = np.asarray(losses, np.float64)
    config = {k: v for k, v in optimizer.get_config().items() if isinstance(v, int | float | str | bool)}
    return {"class": f"{type(optimizer).__module__}.{type(optimizer).__name__}", "config": config}


@dataclass(frozen=True)
class StepsPlan:
    """The training-step diff's side of a crossing: the batches of each step, Darknet's learning rate at each
    (:func:`repliscope.backends.darknet.training.darknet_rate`), the cfg's momentum and decay."""

    batches: tuple[Batch, ...]
    rates: tuple[float, ...]
    momentum: float
    decay: float


class _Crossing:
    """One crossing to the stack per (batch, upstream), computing every requested batch-norm mode at once (one
    TensorFlow start for all of them); its passes are handed to the ports in order."""

    def __init__(
        self,
        net: Network,
        cfg: Path,
        weights: Path,
        modes: tuple[str, ...],
        run: Runner,
        workdir: Path,
        plan: StepsPlan | None = None,
    ):
        bad = [m for m in modes if m not in BN_MODES]
        if bad or not modes:
            raise RepliscopeError(f"--tfmg-bn {', '.join(bad) or '(none)'} (allowed: {', '.join(BN_MODES)})")
        self.net, self.cfg, self.weights, self.modes, self.run, self.workdir = net, cfg, weights, modes, run, workdir
        self.yolo = yolo_inputs(net)
        self.plan = plan
        self.served: dict[str, list[PortGradients]] = {}
        self.patched: dict[str, int] = {}
        self.optimizers: dict[str, Any] = {}
        self.npz: Any = None
        self.key = ""
        self.count = 0

    def heads(self) -> list[tuple[str, str]]:
        """(yolo layer, the Model Garden's output level) by the grid: 13x13 -> level 5, 26x26 -> level 4."""
        out = []
        for y, src in self.yolo.items():
            h = self.net.layer(src).out_shape[1]
            level = {self.net.height // 32: "5", self.net.height // 16: "4"}.get(h)
            if level is None:
                raise RepliscopeError(f"{y}: a {h}x{h} grid, the Model Garden's YOLOv3-tiny has levels 4 and 5 only")
            out.append((y, level))
        return out

    def next_pass(self, bn: str, x: np.ndarray, upstream: dict[str, np.ndarray]) -> PortGradients:
        digest = hashlib.sha256(np.ascontiguousarray(x, np.float32).tobytes())
        for y in sorted(upstream):
            digest.update(np.ascontiguousarray(upstream[y], np.float32).tobytes())
        key = digest.hexdigest()
        if key != self.key or not self.served.get(bn):
            self.served = self._cross(x, upstream)
            self.key = key
        return self.served[bn].pop(0)

    def _cross(self, x: np.ndarray, upstream: dict[str, np.ndarray]) -> dict[str, list[PortGradients]]:
        heads = self.heads()
        self.workdir.mkdir(parents=True, exist_ok=True)
        into, out = self.workdir / "tfmg-gradients-in.npz", self.workdir / "tfmg-gradients-out.npz"
        out.unlink(missing_ok=True)
        meta: dict[str, Any] = {"format": FORMAT, "cfg": str(self.cfg), "weights": str(self.weights)}
        meta.update(modes=list(self.modes), heads=[list(h) for h in heads], runs=RUNS)
        arrays = {"x": np.ascontiguousarray(x, np.float32)}
        arrays.update({f"up_{y}": np.ascontiguousarray(upstream[y], np.float32) for y, _ in heads})
        if self.plan is not None:
            p = self.plan
            meta["steps"] = {"rates": list(p.rates), "momentum": p.momentum, "decay": p.decay}
            for t, batch in enumerate(p.batches):
                arrays[f"steps_x_{t}"] = np.ascontiguousarray(batch.x, np.float32)
                arrays[f"steps_truth_{t}"] = np.ascontiguousarray(batch.truth, np.float32)
        write_npz(into, meta, arrays)
        if self.npz is not None:
            self.npz.close()
            self.npz = None
        self.run(TASK, into, out)
        self.count += 1
        got = read_meta(out, FORMAT)
        self.npz = np.load(out, allow_pickle=False)  # the steps' parameters are read when asked
        res = {k: self.npz[k] for k in self.npz.files if "/g" in k or "/out/" in k}
        self.patched = {str(k): int(v) for k, v in got["bn_layers_patched"].items()}
        self.optimizers = got["optimizers"]
        served: dict[str, list[PortGradients]] = {}
        for bn in self.modes:
            outputs = {self.yolo[y]: res[f"{bn}/out/{y}"] for y, _ in heads}
            for run in range(RUNS):
                grads: dict[str, dict[str, np.ndarray]] = {}
                for key, value in res.items():
                    if key.startswith(f"{bn}/g{run}/") and key.count("/") == 3:
                        _, _, layer, param = key.split("/")
                        if not np.all(np.isfinite(value)):
                            raise RepliscopeError(f"{layer}.{param}: the Model Garden's gradient has NaN/Inf values")
                        grads.setdefault(layer, {})[param] = value
                served.setdefault(bn, []).append(PortGradients(grads, outputs))
        return served


class TfmgPort:
    """The Model Garden's YOLOv3-tiny with batch-norm mode ``bn``, seen as the gradient diff's port
    (``KerasPort.gradients``' contract): each :meth:`gradients` call is one of the :data:`RUNS` tape passes a
    crossing computed. Made by :func:`tfmg_ports`."""

    def __init__(self, bn: str, crossing: _Crossing) -> None:
        self.bn, self.crossing = bn, crossing
        self._step = -1
        self.description: dict[str, Any] = {
            "port": f"tfmg-yolov3-tiny ({bn})",
            "model": "examples/tfmg/yolov3_tiny.py build(): official/projects/yolo darknettiny + YoloDecoder v3 "
            "tiny + YoloHead, tf-models-official 2.20.0, TensorFlow 2.20 + tf_keras 2.20.1 (its stack)",
            "bn": bn,
            "mapping": "examples/tfmg/yolov3_tiny.py DARKNET_TO_TFMG",
        }

    @property
    def crossings(self) -> int:
        return self.crossing.count

    def stepped(self, t: int, batch: Batch, rate: float) -> float:
        """The loss of step ``t`` (0-based) the crossing took in the stack, after checking it is the step the
        training diff asks for (the same batch and learning rate); :meth:`parameters` then holds the weights
        after it."""
        plan, npz = self.crossing.plan, self.crossing.npz
        if plan is None or npz is None:
            raise RepliscopeError("the Model Garden port took no steps: pass a StepsPlan and run the gradient diff")
        if t >= len(plan.rates) or plan.rates[t] != rate or plan.batches[t] is not batch:
            raise RepliscopeError(f"step {t + 1}: not the step planned for the Model Garden's stack (batch, rate)")
        self._step = t
        self.description["optimizer"] = self.crossing.optimizers.get(self.bn)
        return float(npz[f"{self.bn}/losses"][t])

    def parameters(self) -> dict[str, dict[str, np.ndarray]]:
        """Every mapped parameter (Darknet's layout) after the step :meth:`stepped` last served."""
        npz, prefix = self.crossing.npz, f"{self.bn}/s{self._step}/"
        out: dict[str, dict[str, np.ndarray]] = {}
        for key in npz.files:
            if key.startswith(prefix):
                _, _, layer, param = key.split("/")
                out.setdefault(layer, {})[param] = npz[key]
        return out

    def gradients(
        self, x: np.ndarray, upstream: Upstream, *, keep_moving: bool = True
    ) -> tuple[PortGradients, dict[str, Any]]:
        if not isinstance(upstream, dict):
            raise RepliscopeError("the Model Garden port takes Darknet's delta as its upstream (no --port-loss)")
        found = self.crossing.next_pass(self.bn, x, upstream)
        self.description["bn_layers_patched"] = self.crossing.patched.get(self.bn, 0)
        return found, {}


def tfmg_ports(
    net: Network,
    cfg: Path,
    weights: Path,
    modes: tuple[str, ...],
    run: Runner,
    workdir: Path,
    plan: StepsPlan | None = None,
) -> dict[str, TfmgPort]:
    """A port per batch-norm mode of ``modes`` (:data:`BN_MODES`), sharing one crossing to the stack per batch;
    with ``plan`` the same crossing also takes the training-step diff's steps from the loaded weights."""
    crossing = _Crossing(net, cfg, weights, modes, run, workdir, plan)
    return {bn: TfmgPort(bn, crossing) for bn in modes}


CLI_PORT = "tfmg-yolov3-tiny"
"""``--gradients tfmg-yolov3-tiny[:as-loaded|:darknet-bn]`` (default ``as-loaded``)."""


def is_cli_port(spec: str) -> bool:
    return spec == CLI_PORT or spec.startswith(CLI_PORT + ":")


def check_cli_port(spec: str, port_loss: str | None) -> str:
    """The batch-norm mode ``--gradients tfmg-yolov3-tiny[:MODE]`` names, checked with the option it cannot take
    (its upstream is Darknet's delta: ``--port-loss`` would cross once more per pass); RepliscopeError naming the
    allowed values."""
    mode = spec.partition(":")[2] or "as-loaded"
    if mode not in BN_MODES:
        raise RepliscopeError(f"--gradients {spec}: batch-norm mode {mode!r} (allowed: {', '.join(BN_MODES)})")
    if port_loss:
        raise RepliscopeError(
            f"--gradients {spec}: its upstream is Darknet's delta (no --port-loss): the model lives in its stack"
        )
    return mode


def steps_plan(trainer: DarknetTrainer, batches: Sequence[Batch], steps: int) -> StepsPlan:
    """The plan :func:`repliscope.diff.training.steps.run_training_diff` will follow: batches cycled, Darknet's
    learning rate of each step from ``trainer``'s solver and ``seen``."""

    settings = trainer.solver()
    big_b = settings.batch * settings.subdivisions
    rates = tuple(darknet_rate(settings, (trainer.seen + (t + 1) * settings.batch) // big_b) for t in range(steps))
    chosen = tuple(batches[t % len(batches)] for t in range(steps))
    return StepsPlan(chosen, rates, settings.momentum, settings.decay)


def cli_port(
    spec: str, net: Network, cfg: Path, weights: Path, run: Runner, workdir: Path, plan: StepsPlan | None = None
) -> TfmgPort:
    """The port ``--gradients tfmg-yolov3-tiny[:MODE]`` names (checked by :func:`check_cli_port`)."""
    mode = spec.partition(":")[2] or "as-loaded"
    return tfmg_ports(net, cfg, weights, (mode,), run, workdir, plan)[mode]
