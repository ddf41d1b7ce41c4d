"""Mixed-precision pitfall variants (issue 34 section 4; seed 003: bfloat16 normalisation layers stopped
MaskFormer's convergence): the training port with its batch normalisation run in ``bfloat16`` / ``float16`` (all
of them, or chosen layers), measured for inference (each layer's output with the rolling statistics, against
libdarknet's ``network_predict``) and for training (the gradient diff against libdarknet's backward).

A variant whose training-mode forward overflows (float16: the batch variance sums 43 264 squares at 416x416, past
65 504) is reported with the port's NaN/Inf error instead of a gradient diff."""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel

from repliscope.backends.darknet.training import DarknetTrainer
from repliscope.diff.training.gradients import run_gradient_diff
from repliscope.diff.training.port import KerasPort, Yardstick, load_port
from repliscope.errors import RepliscopeError


class PrecisionVariant(BaseModel):
    """One variant: ``bn_dtype`` on ``layers`` (empty: every batch-normalised layer)."""

    bn_dtype: str
    layers: list[str]
    inference_rel: dict[str, float]
    """Darknet layer -> max |port - darknet| / max |darknet| in inference mode (rolling statistics)."""
    gradient_passed: bool | None
    first_divergent: str | None
    worst_gradient: str | None
    worst_ratio: float | None
    training_error: str | None = None


def inference_errors(port: KerasPort, reference: dict[str, np.ndarray], x: np.ndarray) -> dict[str, float]:
    """Every layer's inference-mode relative max error against libdarknet's outputs of the same batch."""
    outs = port.forward(x, training=False)
    return {
        name: float(np.max(np.abs(outs[name].astype(np.float64) - ref)) / (float(np.max(np.abs(ref))) or 1.0))
        for name, ref in reference.items()
    }


def precision_variant(
    trainer: DarknetTrainer,
    reference: dict[str, np.ndarray],
    x: np.ndarray,
    truth: np.ndarray,
    bn_dtype: str,
    *,
    layers: frozenset[str] | None = None,
    yardstick: Yardstick | None = None,
) -> PrecisionVariant:
    """Measure one variant. ``reference``: libdarknet's inference outputs of ``x`` (layer -> (B, C, H, W))."""
    port = load_port("darknet-keras", trainer.network, trainer.params(), bn_dtype=bn_dtype, low_precision=layers)
    inference = inference_errors(port, reference, x)
    try:
        grad = run_gradient_diff(trainer, port, x, truth, yardstick=yardstick)
    except RepliscopeError as exc:
        return PrecisionVariant(
            bn_dtype=bn_dtype,
            layers=sorted(layers or ()),
            inference_rel=inference,
            gradient_passed=None,
            first_divergent=None,
            worst_gradient=None,
            worst_ratio=None,
            training_error=str(exc),
        )
    worst = max(grad.params, key=lambda p: p.ratio)
    return PrecisionVariant(
        bn_dtype=bn_dtype,
        layers=sorted(layers or ()),
        inference_rel=inference,
        gradient_passed=grad.passed,
        first_divergent=grad.first_divergent,
        worst_gradient=f"{worst.layer}.{worst.param}",
        worst_ratio=worst.ratio,
    )
