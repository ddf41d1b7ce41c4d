"""Training-step diff: ``k`` optimiser steps from the same weights on the same pre-processed batches, libdarknet's
``train_network`` against the port trained by Keras' SGD configured to equal Darknet's update.

Darknet's update (``update_convolutional_layer``, pjreddie 2018), per step with ``B = batch x subdivisions``, the
update buffer ``u`` holding the accumulated NEGATIVE gradient summed over the batch (``G``)::

    u = momentum * u_prev - G                            (backward adds -G to the buffer scaled last step)
    u_w -= decay * B * W                                  (weights only: no decay on biases and BN scales)
    W  += lr / B * u                                      (biases, scales: += lr / B * u, no decay)
    u  *= momentum                                        (kept for the next step)

With ``V = lr / B * u`` this is ``V = momentum * V_prev - lr * (G / B + decay * W)``, ``W += V``: exactly Keras'
``SGD(learning_rate=lr, momentum=momentum, nesterov=False)`` (velocity ``m = momentum * m - lr * g``; ``w += m``)
given the gradient ``g = G / B + decay * W`` on kernels (``G / B`` elsewhere), i.e. the batch-MEAN loss plus the L2
term ``decay / 2 * ||W||^2`` on kernels (not Keras' ``weight_decay=``, which is decoupled from the momentum) —
PROVIDED the learning rate is the same at both steps: Darknet's buffer holds gradients, Keras' velocity holds
``lr``-scaled steps, so when ``lr`` changes between steps (``burn_in``: ``lr * (batch_num / burn_in)^power``; a
``steps`` boundary) the momentum term differs by ``lr_t / lr_{t-1}``. The result flags every such step.

The learning rate of each step is Darknet's policy (:func:`darknet_rate`, pinned against ``get_current_rate``) at
``batch_num = seen / B`` after ``train_network`` added the batch to ``seen``. The loss both sides report is
Darknet's: ``forward_yolo_layer``'s cost on each side's own outputs (``*net->cost`` = mean over the yolo layers of
their sum of squared deltas; ``train_network`` returns it / batch), so the port's per-step loss is the original
loss of the port's outputs and the loss curves compare the networks, not two losses.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import BaseModel, Field

from repliscope.backends.darknet.training import DarknetTrainer, SolverSettings, darknet_rate
from repliscope.diff.tolerance import dtype_eps
from repliscope.diff.training.batches import Batch
from repliscope.diff.training.gradients import GradientDiffResult
from repliscope.diff.training.port import KerasPort
from repliscope.errors import RepliscopeError

if TYPE_CHECKING:
    from repliscope.diff.training.tfmg_port import TfmgPort

LOSS_K = 16.0
"""Loss tolerance factor: ``|port - darknet| <= LOSS_K * max(eps * sqrt(outputs), step-0 relative difference) *
|darknet|`` (step 0 has identical weights: its difference is the forward's rounding)."""

ROUNDING_K = 4.0
"""Drift tolerance's rounding term: ``ROUNDING_K * eps * sqrt(step) * ||W_0|| / ||dW||`` (each update rounds every
weight to float32 once on each side)."""


def keras_sgd(settings: SolverSettings, learning_rate: float) -> Any:
    """Keras' SGD equal to Darknet's update (module doc): momentum as the cfg's, no Nesterov, no weight_decay
    (the decay goes into the kernels' gradient)."""
    from repliscope.diff.training.keras_port import import_tf_keras

    _, keras = import_tf_keras()
    return keras.optimizers.SGD(learning_rate=learning_rate, momentum=settings.momentum, nesterov=False)


class StepRow(BaseModel):
    step: int
    learning_rate: float
    darknet_loss: float
    port_loss: float
    loss_rel: float
    loss_tolerance: float
    lr_changed: bool = False


class DriftRow(BaseModel):
    """After ``step``: ``||dW_port - dW_darknet|| / ||dW_darknet||`` for one parameter (dW = W_step - W_0)."""

    step: int
    layer: str
    param: str
    darknet_drift: float
    port_drift: float
    rel: float
    tolerance: float
    passed: bool


class TrainingStepDiffResult(BaseModel):
    """``kind = "training_step_diff"`` as stored and printed with ``--json``."""

    kind: Literal["training_step_diff"] = "training_step_diff"
    manifest: str
    reference: str = "darknet (libdarknet train_network)"
    candidate: str
    dataset: str
    samples: int
    batch: int
    steps: int
    images: list[str]
    verdict: Literal["passed", "failed"]
    summary: str
    solver: dict[str, Any]
    optimizer: dict[str, Any]
    conventions: dict[str, str]
    port: dict[str, Any]
    rows: list[StepRow] = Field(default_factory=list)
    drift: list[DriftRow] = Field(default_factory=list)
    first_divergent: str | None = None
    """``step N: layer.param`` (or ``step N: loss``) where the two trainings first separate (the store's
    headline)."""
    first_separation: DriftRow | None = None
    first_loss_separation: StepRow | None = None
    gradient_tolerances: dict[str, float] = Field(default_factory=dict)
    passed: bool


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    den = float(np.linalg.norm(b.astype(np.float64).ravel()))
    num = float(np.linalg.norm((a.astype(np.float64) - b.astype(np.float64)).ravel()))
    return num / den if den > 0 else (0.0 if num == 0 else math.inf)


def _port_step(port: KerasPort, oracle: DarknetTrainer, batch: Batch, optimizer: Any, decay: float) -> float:
    """One step of the port: forward (training), Darknet's yolo delta and cost on ITS outputs (``oracle``), tape
    gradients with ``-delta`` upstream, ``g / B (+ decay * W on kernels)``, ``optimizer.apply``. Returns the loss
    as ``train_network`` reports it."""
    tf = port.tf
    trainable = port.params.trainable()
    with tf.GradientTape() as tape:
        outs = port.model(tf.constant(np.ascontiguousarray(batch.x.transpose(0, 2, 3, 1))), training=True)
        by_name = dict(zip([lay.name for lay in port.net.layers], outs, strict=True))
        heads = {y: by_name[src] for y, src in port.yolo.items()}
    upstream, costs = [], []
    for y, head in heads.items():
        arr = np.asarray(head.numpy()).transpose(0, 3, 1, 2)
        if not np.all(np.isfinite(arr)):
            raise RepliscopeError(f"the port's input of {y} has NaN/Inf values")
        delta, cost = oracle.yolo_layer(y, np.ascontiguousarray(arr), batch.truth)
        upstream.append(tf.constant(np.ascontiguousarray((-delta).transpose(0, 2, 3, 1))))
        costs.append(cost)
    grads = tape.gradient(list(heads.values()), [v for _, _, v in trainable], output_gradients=upstream)
    b = batch.x.shape[0]
    applied = []
    for (layer, param, var), grad in zip(trainable, grads, strict=True):
        if grad is None:
            raise RepliscopeError(f"{layer}.{param}: the port's variable gets no gradient")
        g = grad / b
        if param == "weights":
            g = g + decay * var.value
        applied.append(g)
    optimizer.apply(applied, [v for _, _, v in trainable])
    loss = float(np.float32(sum(costs) / len(costs)) / b)
    return loss


def run_training_diff(
    trainer: DarknetTrainer,
    oracle: DarknetTrainer,
    port: KerasPort | TfmgPort,
    batches: list[Batch],
    *,
    steps: int,
    gradient: GradientDiffResult | None = None,
    manifest_name: str = "",
    dataset: str = "",
    make_optimizer: Callable[[SolverSettings, float], Any] = keras_sgd,
) -> TrainingStepDiffResult:
    """``steps`` steps (batches cycled) on both sides from the weights both hold now. ``gradient``: a gradient
    diff on the first batch whose per-parameter tolerances bound the drift difference (else ``eps * sqrt(n)``
    terms alone). ``make_optimizer(settings, lr)``: the port's optimiser (default :func:`keras_sgd`; a test passes
    a misconfigured one)."""
    if steps < 1:
        raise RepliscopeError(f"--train-steps {steps}: at least 1")
    if not batches:
        raise RepliscopeError("no training batch")
    if oracle.batch != trainer.batch:
        raise RepliscopeError(
            f"the yolo-layer oracle is loaded for batch {oracle.batch}, the trainer for {trainer.batch}"
        )
    settings = trainer.solver()
    if settings.adam:
        raise RepliscopeError("the cfg trains with adam=1; the training diff reproduces Darknet's SGD only")
    big_b = settings.batch * settings.subdivisions
    w0 = {layer: p.arrays() for layer, p in trainer.params().items()}
    eps = dtype_eps("float32")
    grad_tol = {f"{r.layer}.{r.param}": r.tolerance for r in gradient.params} if gradient else {}
    optimizer = None
    rows: list[StepRow] = []
    drift: list[DriftRow] = []
    outputs = sum(int(np.prod(lay.out_shape)) for lay in trainer.network.layers if lay.type == "yolo")
    seen0 = trainer.seen
    prev_lr: float | None = None
    step0_rel = 0.0
    for t in range(steps):
        batch = batches[t % len(batches)]
        lr = darknet_rate(settings, (seen0 + (t + 1) * settings.batch) // big_b)
        dn_loss = trainer.train_step(batch.x, batch.truth)
        if not math.isclose(lr, trainer.current_rate(), rel_tol=1e-6):
            raise RepliscopeError(
                f"step {t + 1}: Darknet's rate {trainer.current_rate()} differs from the policy's {lr}"
            )
        if hasattr(port, "stepped"):  # the Model Garden's model: its steps were taken in its stack (tfmg_port)
            port_loss = port.stepped(t, batch, lr)
        else:
            if optimizer is None:
                optimizer = make_optimizer(settings, lr)
            else:
                optimizer.learning_rate.assign(lr)
            port_loss = _port_step(port, oracle, batch, optimizer, settings.decay)
        rel = abs(port_loss - dn_loss) / abs(dn_loss) if dn_loss else abs(port_loss)
        if t == 0:
            step0_rel = rel
        tol = LOSS_K * max(eps * math.sqrt(outputs), step0_rel)
        rows.append(
            StepRow(
                step=t + 1,
                learning_rate=lr,
                darknet_loss=dn_loss,
                port_loss=port_loss,
                loss_rel=rel,
                loss_tolerance=tol,
                lr_changed=prev_lr is not None and lr != prev_lr,
            )
        )
        prev_lr = lr
        dn_now = {layer: p.arrays() for layer, p in trainer.params().items()}
        port_now = port.parameters()
        for layer in [lay.name for lay in reversed(trainer.network.layers) if lay.type == "convolutional"]:
            lay = trainer.network.layer(layer)
            n = trainer.batch * lay.out_shape[1] * lay.out_shape[2]
            for param in ("weights", "biases", "scales"):
                if param not in dn_now[layer]:
                    continue
                d_dn = dn_now[layer][param].astype(np.float64) - w0[layer][param]
                d_port = port_now[layer][param].astype(np.float64) - w0[layer][param]
                dn_norm = float(np.linalg.norm(d_dn.ravel()))
                w_norm = float(np.linalg.norm(w0[layer][param].astype(np.float64).ravel()))
                # each update rounds W to float32: sqrt(steps) roundings of |W|, relative to the drift
                rounding = ROUNDING_K * eps * math.sqrt(t + 1) * w_norm / dn_norm if dn_norm > 0 else math.inf
                tol = grad_tol.get(f"{layer}.{param}", LOSS_K * eps * math.sqrt(n)) + rounding
                r = _rel(d_port, d_dn)
                drift.append(
                    DriftRow(
                        step=t + 1,
                        layer=layer,
                        param=param,
                        darknet_drift=dn_norm,
                        port_drift=float(np.linalg.norm(d_port.ravel())),
                        rel=r,
                        tolerance=tol,
                        passed=r <= tol,
                    )
                )
    first = next((d for d in drift if not d.passed), None)
    first_loss = next((r for r in rows if r.loss_rel > r.loss_tolerance), None)
    passed = first is None and first_loss is None
    if passed:
        summary = f"{steps} steps: losses and every parameter's drift within tolerance"
    else:
        parts = []
        if first_loss is not None:
            parts.append(f"losses separate at step {first_loss.step} ({first_loss.loss_rel:.3g} relative)")
        if first is not None:
            where = f"{first.layer}.{first.param} ({first.rel:.3g} > {first.tolerance:.3g})"
            parts.append(f"weights separate at step {first.step} in {where}")
        summary = "; ".join(parts)
    changed = [r.step for r in rows if r.lr_changed]
    conventions = {
        "update": "Darknet: u = momentum*u - G; u_w -= decay*B*W; W += lr/B*u. Keras: SGD(lr, momentum) on "
        "g = G/B + decay*W (kernels), G/B (biases, scales)",
        "loss": "both losses are Darknet's forward_yolo_layer cost (mean over yolo layers of sum delta^2, / batch) "
        "on each side's own outputs",
        "batch_norm": "training mode on both sides; rolling statistics .99 / .01 of the batch's (unbiased variance)",
    }
    if changed:
        conventions["learning_rate"] = (
            f"the learning rate changes before step(s) {changed}: Keras' velocity is lr-scaled, Darknet's update "
            "buffer is not, so the momentum term differs by lr_t / lr_(t-1) there"
        )
    images = sorted({n for b in batches for n in b.names})
    heads = []
    if first is not None:
        heads.append((first.step, f"step {first.step}: {first.layer}.{first.param}"))
    if first_loss is not None:
        heads.append((first_loss.step, f"step {first_loss.step}: loss"))
    return TrainingStepDiffResult(
        manifest=manifest_name,
        candidate=str(port.description.get("port", "port")),
        dataset=dataset,
        samples=len(images),
        batch=trainer.batch,
        steps=steps,
        images=images,
        verdict="passed" if passed else "failed",
        summary=summary,
        solver={**settings.__dict__, "seen": seen0, "B": big_b},
        optimizer={
            **(
                port.description["optimizer"]
                if optimizer is None and port.description.get("optimizer")
                else {
                    "class": f"{type(optimizer).__module__}.{type(optimizer).__name__}",
                    "config": {
                        k: v for k, v in optimizer.get_config().items() if isinstance(v, (int, float, str, bool))
                    }
                    if optimizer is not None
                    else {},
                }
            ),
            "gradient": "G / B + decay * W on kernels (L2 in the loss), G / B on biases and scales",
            "learning_rates": [r.learning_rate for r in rows],
        },
        conventions=conventions,
        port=port.description,
        rows=rows,
        drift=drift,
        first_divergent=min(heads)[1] if heads else None,
        first_separation=first,
        first_loss_separation=first_loss,
        gradient_tolerances=grad_tol,
        passed=passed,
    )


def loss_plot(result: TrainingStepDiffResult) -> bytes:
    """Both loss curves on one chart (PNG bytes)."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6), dpi=110)
    steps = [r.step for r in result.rows]
    ax.plot(steps, [r.darknet_loss for r in result.rows], "o-", label="darknet (train_network)")
    ax.plot(steps, [r.port_loss for r in result.rows], "x--", label=f"port ({result.candidate})")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (Darknet's cost / batch)")
    ax.set_title(f"{result.manifest}: {result.steps} steps, batch {result.batch}")
    ax.legend()
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()
