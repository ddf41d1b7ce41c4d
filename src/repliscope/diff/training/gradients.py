"""Gradient diff: the gradient of the loss w.r.t. every parameter at fixed weights, libdarknet's backward against a
port's autodiff, layer by layer, independent of any loss re-implementation.

Both sides get the same batch and the same upstream gradient: Darknet's own yolo-layer ``delta`` (computed by
``forward_yolo_layer`` on Darknet's outputs) is the negated ``dC/d(yolo input)``; the port's gradients are
``tape.gradient(its yolo inputs, its variables, output_gradients=-delta)``. Conventions (stated in every result):

- sign and scale: Darknet's update buffers hold ``-dC/dparam`` summed over the batch; both sides are reported as
  ``+dC/dparam`` summed over the batch (Darknet's buffers negated; the port's tape unscaled);
- batch normalisation in training mode on both sides (Darknet: ``net->train = 1``; Keras: ``training=True``):
  batch statistics, Darknet's unbiased variance, moving statistics restored after each pass;
- layouts: kernels compared in Darknet's (out, in, kh, kw).

Per (layer, parameter): relative L2 error ``||port - darknet|| / ||darknet||``, cosine, the magnitude ratio
``||port|| / ||darknet||``, max |error|. What counts as agreement is measured, not guessed, on a YARDSTICK:
repliscope's own training port (Darknet's batch-norm convention) in float32 and in float64 gives each gradient's
float32 SENSITIVITY ``s = ||port32 - port64|| / ||port64||`` (how far float32 rounding alone moves it: the
batch-norm backward at batch 1 cancels heavily, so early layers' gradients move by percents), and the float64 port
with Darknet's own leaky derivative pattern (its ``output > 0``) gives the KINK effect ``c = ||port64(darknet's
pattern) - port64|| / ||port64||``: where a leaky unit has the other sign in Darknet's float32 output (a kink
crossing, rounding alone), its derivative is 0.1 instead of 1::

    tolerance = k * max(s, eps(float32) * sqrt(n), run-to-run spread) + 2 * c

with ``n`` = batch x out_h x out_w and ``k`` =
:data:`GRADIENT_K`. Both the sensitivity and the allowance depend on the network and the batch, never on the
candidate. Each side runs twice; a nonzero run-to-run spread is reported (the magnitudes are then not comparable
below it). With a registered loss as the port's upstream (``port_loss``), the loss evaluated on the float32
yardstick's own outputs against Darknet's delta measures how the forward's rounding reaches the gradients through
the loss; that relative L2 joins the ``max``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import BaseModel, Field

from repliscope.backends.darknet.training import DarknetGradients, DarknetTrainer
from repliscope.diff.tolerance import dtype_eps
from repliscope.diff.training.port import KerasPort, Upstream, Yardstick

if TYPE_CHECKING:
    from repliscope.diff.training.tfmg_port import TfmgPort

KINK_FACTOR = 2.0
"""The kink allowance is twice the measured effect of Darknet's crossings (the candidate's own may differ a little
from the float64 yardstick's)."""

GRADIENT_K = 16.0
"""Calibrated on yolov3-tiny, dog.jpg, batch 1: away from kink crossings, Darknet's own float32 gradients
(sequential float32 sums of up to 43 264 terms per channel, built with ``-Ofast``) deviate from the float64
evaluation of the same equations by up to ~8x the port's float32 deviation; 16 leaves a factor 2."""

SIGN = (
    "gradients are +dC/dparam summed over the batch: Darknet's weight_updates / bias_updates / scale_updates hold "
    "-dC/dparam (forward_yolo_layer: delta = target - output; backward_convolutional_layer: weight_updates += "
    "delta x input), negated here; the port's tape is fed output_gradients = -delta"
)
BATCH_NORM = (
    "training-mode batch normalisation on both sides: Darknet net->train = 1 (batch mean, UNBIASED batch variance, "
    "x_norm = (x - mean) / (sqrt(var) + 1e-6)), Keras called with training=True; Darknet's backward uses "
    "sqrt(var + 1e-5) and / N (not the derivative of its forward)"
)
UPSTREAM = (
    "upstream gradient: Darknet's yolo-layer delta on Darknet's own outputs, fed to both backward passes at the "
    "yolo layers' inputs (no loss re-implemented)"
)

PORT_LOSS = (
    "upstream gradient: Darknet's yolo-layer delta on Darknet's outputs; the port's: the gradient of the registered "
    "loss '{}' on the port's own outputs (the loss and the port's backward checked together)"
)


class ParamDiff(BaseModel):
    """One parameter of one layer."""

    layer: str
    param: Literal["weights", "biases", "scales"]
    shape: list[int]
    reduction: int
    darknet_norm: float
    port_norm: float
    norm_ratio: float
    cosine: float
    rel_l2: float
    max_abs: float
    float32_sensitivity: float | None
    kink_allowance: float = 0.0
    tolerance: float
    passed: bool

    @property
    def ratio(self) -> float:
        return self.rel_l2 / self.tolerance if self.tolerance > 0 else math.inf


class ForwardDiff(BaseModel):
    """One layer's training-mode output, Darknet vs the port (relative max error, kink crossings)."""

    layer: str
    max_abs: float
    rel: float
    kink_crossings: int | None = None
    """Leaky units whose sign differs between Darknet's and the port's training-mode output."""
    rounding_kink_crossings: int | None = None
    """The same against the float32 yardstick (rounding alone)."""


class Determinism(BaseModel):
    darknet_spread: float
    port_spread: float
    deterministic: bool
    note: str


class GradientDiffResult(BaseModel):
    """``kind = "gradient_diff"`` as stored (``store.diffs``) and printed with ``--json``."""

    kind: Literal["gradient_diff"] = "gradient_diff"
    manifest: str
    reference: str = "darknet (libdarknet forward_network + backward_network, net->train = 1)"
    candidate: str
    dataset: str
    samples: int
    batch: int
    images: list[str]
    verdict: Literal["passed", "failed"]
    summary: str
    conventions: dict[str, str]
    port: dict[str, Any]
    port_loss: str | None = None
    """The registered loss whose gradient on the port's outputs was the port's upstream (None: Darknet's delta)."""
    cost: float
    yolo_costs: dict[str, float]
    k: float
    tolerance_formula: str = (
        "k * max(float32 sensitivity ||port32 - port64|| / ||port64||, eps(float32) * sqrt(n), run-to-run spread) "
        "+ 2 * the kink effect ||port64 with Darknet's leaky derivative pattern - port64|| / ||port64||"
    )
    params: list[ParamDiff] = Field(default_factory=list)
    forward: list[ForwardDiff] = Field(default_factory=list)
    first_divergent: str | None = None
    """``layer.param`` of the first gradient over tolerance, in backward order (the store's headline)."""
    first_divergent_detail: ParamDiff | None = None
    determinism: Determinism
    passed: bool


def _rel_l2(a: np.ndarray, b: np.ndarray) -> float:
    den = float(np.linalg.norm(b.astype(np.float64).ravel()))
    num = float(np.linalg.norm((a.astype(np.float64) - b.astype(np.float64)).ravel()))
    return num / den if den > 0 else (0.0 if num == 0 else math.inf)


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a64, b64 = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    den = float(np.linalg.norm(a64) * np.linalg.norm(b64))
    return float(a64 @ b64) / den if den > 0 else 1.0


def _spread(first: dict[str, dict[str, np.ndarray]], second: dict[str, dict[str, np.ndarray]]) -> float:
    return max((_rel_l2(second[layer][p], first[layer][p]) for layer in first for p in first[layer]), default=0.0)


def backward_order(trainer: DarknetTrainer) -> list[str]:
    """Convolutional layers in the order the backward pass reaches them (last layer first)."""
    return [lay.name for lay in reversed(trainer.network.layers) if lay.type == "convolutional"]


def _kinks(trainer: DarknetTrainer, dn: dict[str, np.ndarray], port: dict[str, np.ndarray]) -> dict[str, int]:
    out = {}
    for lay in trainer.network.layers:
        if lay.type == "convolutional" and lay.params.get("activation") == "leaky" and lay.name in port:
            out[lay.name] = int(np.count_nonzero((dn[lay.name] > 0) != (port[lay.name] > 0)))
    return out


def _leaky_layers(trainer: DarknetTrainer) -> set[str]:
    return {
        lay.name
        for lay in trainer.network.layers
        if lay.type == "convolutional" and lay.params.get("activation") == "leaky"
    }


def run_gradient_diff(
    trainer: DarknetTrainer,
    port: KerasPort | TfmgPort,
    x: np.ndarray,
    truth: np.ndarray,
    *,
    yardstick: Yardstick | None = None,
    k: float = GRADIENT_K,
    manifest_name: str = "",
    dataset: str = "",
    images: list[str] | None = None,
    port_loss: tuple[str, Upstream] | None = None,
) -> GradientDiffResult:
    """Darknet's gradients vs the port's (module doc) for the batch ``x`` (B, C, H, W) and ``truth`` (B, boxes,
    5). ``yardstick``: repliscope's training port with Darknet's conventions in float32 and in float64 (the float32
    sensitivity and the rounding kink crossings); without it the tolerance is ``k * max(eps * sqrt(n), spread)``.
    ``port_loss``: (name, upstream function) of a registered loss evaluated on the PORT's outputs as the port's
    upstream gradient (Darknet keeps its own delta): the loss and the network's backward checked together."""
    from repliscope.errors import RepliscopeError

    runs: list[DarknetGradients] = [trainer.gradients(x, truth), trainer.gradients(x, truth)]
    dn = runs[0]
    upstream = {y: -d.astype(np.float32) for y, d in dn.deltas.items()}
    port_upstream: Upstream = upstream if port_loss is None else port_loss[1]
    p1, _ = port.gradients(x, port_upstream)
    p2, _ = port.gradients(x, port_upstream)
    y32 = y64 = y64_kinks = y32_loss = None
    if yardstick is not None:
        up64 = {y: u.astype(np.float64) for y, u in upstream.items()}
        y32 = yardstick[0].gradients(x, upstream)[0]
        y64 = yardstick[1].gradients(x, up64)[0]
        leaky = {n: o > 0 for n, o in dn.outputs.items() if n in _leaky_layers(trainer)}
        yardstick[2].set_leaky_masks(leaky)  # float64 with Darknet's leaky derivatives: the kink effect alone
        try:
            y64_kinks = yardstick[2].gradients(x, up64)[0]
        finally:
            yardstick[2].set_leaky_masks(None)
        if port_loss is not None:  # the loss on the yardstick's own float32 outputs: rounding through the loss
            y32_loss = yardstick[0].gradients(x, port_loss[1])[0]
    dn_spread, port_spread = _spread(runs[0].gradients, runs[1].gradients), _spread(p1.gradients, p2.gradients)
    deterministic = dn_spread == 0.0 and port_spread == 0.0
    note = (
        "both sides bit-identical across two runs: with fixed weights, inputs and deterministic kernels the "
        "magnitudes are comparable"
        if deterministic
        else f"run-to-run spread (relative L2): darknet {dn_spread:.3g}, port {port_spread:.3g}: kernels are not "
        "deterministic, gradient magnitudes are comparable only above that spread"
    )
    eps = dtype_eps("float32")
    kinks = _kinks(trainer, dn.outputs, p1.outputs)
    rounding_kinks = _kinks(trainer, dn.outputs, y32.outputs) if y32 is not None else {}
    rows: list[ParamDiff] = []
    for layer in backward_order(trainer):
        lay = trainer.network.layer(layer)
        n = trainer.batch * lay.out_shape[1] * lay.out_shape[2]
        params: tuple[Literal["weights", "biases", "scales"], ...] = ("weights", "biases", "scales")
        for param in params:
            if param not in dn.gradients[layer]:
                continue
            ref, cand = dn.gradients[layer][param], p1.gradients[layer][param]
            if cand.shape != ref.shape:
                raise RepliscopeError(
                    f"{layer}.{param}: the port's gradient has shape {cand.shape}, Darknet's {ref.shape}"
                )
            sens = None
            if y32 is not None and y64 is not None:
                sens = _rel_l2(y32.gradients[layer][param], y64.gradients[layer][param])
            through_loss = 0.0
            if y32_loss is not None and y32 is not None:
                through_loss = _rel_l2(y32_loss.gradients[layer][param], y32.gradients[layer][param])
            allowance = 0.0
            if y64_kinks is not None and y64 is not None:
                allowance = KINK_FACTOR * _rel_l2(y64_kinks.gradients[layer][param], y64.gradients[layer][param])
            tol = k * max(sens or 0.0, eps * math.sqrt(n), port_spread, dn_spread, through_loss) + allowance
            rel = _rel_l2(cand, ref)
            dn_norm = float(np.linalg.norm(ref.astype(np.float64).ravel()))
            port_norm = float(np.linalg.norm(cand.astype(np.float64).ravel()))
            rows.append(
                ParamDiff(
                    layer=layer,
                    param=param,
                    shape=list(ref.shape),
                    reduction=n,
                    darknet_norm=dn_norm,
                    port_norm=port_norm,
                    norm_ratio=port_norm / dn_norm if dn_norm > 0 else math.inf,
                    cosine=_cosine(cand, ref),
                    rel_l2=rel,
                    max_abs=float(np.max(np.abs(cand.astype(np.float64) - ref))),
                    float32_sensitivity=sens,
                    kink_allowance=allowance,
                    tolerance=tol,
                    passed=rel <= tol,
                )
            )
    forward = []
    for lay in trainer.network.layers:
        if lay.name not in p1.outputs:  # a port that exposes its yolo inputs only (the Model Garden's, in its stack)
            continue
        r, c = dn.outputs[lay.name], p1.outputs[lay.name]
        err = float(np.max(np.abs(c.astype(np.float64) - r)))
        scale = float(np.max(np.abs(r))) or 1.0
        forward.append(
            ForwardDiff(
                layer=lay.name,
                max_abs=err,
                rel=err / scale,
                kink_crossings=kinks.get(lay.name),
                rounding_kink_crossings=rounding_kinks.get(lay.name),
            )
        )
    first = next((r for r in rows if not r.passed), None)
    passed = first is None
    if first is None:
        worst = max(rows, key=lambda r: r.ratio)
        summary = f"{len(rows)} gradients within tolerance; closest {worst.layer}.{worst.param} at {worst.ratio:.2f}"
    else:
        summary = (
            f"first divergent gradient (backward order): {first.layer}.{first.param}, relative L2 {first.rel_l2:.3g} "
            f"> tolerance {first.tolerance:.3g}"
        )
    return GradientDiffResult(
        manifest=manifest_name,
        candidate=str(port.description.get("port", "port")),
        dataset=dataset,
        samples=int(x.shape[0]),
        batch=trainer.batch,
        images=list(images or []),
        verdict="passed" if passed else "failed",
        summary=summary,
        conventions={
            "sign": SIGN,
            "batch_norm": BATCH_NORM,
            "upstream": UPSTREAM if port_loss is None else PORT_LOSS.format(port_loss[0]),
            "determinism": note,
        },
        port_loss=None if port_loss is None else port_loss[0],
        port=port.description,
        cost=dn.cost,
        yolo_costs=dn.costs,
        k=k,
        params=rows,
        forward=forward,
        first_divergent=None if first is None else f"{first.layer}.{first.param}",
        first_divergent_detail=first,
        determinism=Determinism(
            darknet_spread=dn_spread, port_spread=port_spread, deterministic=deterministic, note=note
        ),
        passed=passed,
    )
