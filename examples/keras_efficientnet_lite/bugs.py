"""The bug zoo: variants of the Keras port, each with ONE classic porting bug.

Each :class:`Bug` says how to build the variant (keywords of ``model.build_model``) and how the mapping is
changed for it, and names the torch module whose Keras counterpart carries the bug: the layer-level golden diff
(``repliscope diff ... --layers``) must name exactly that module, and nothing else.

Two bugs cannot get past ``repliscope convert`` with the shipped mapping, which is the point of a strict
converter: a wrong batch-norm epsilon (``batch_norm_epsilon: check``) and a dropped bias (the torch bias would be
an unmapped tensor). Their variants relax the mapping the way a hurried porter would (``ignore``), so that the
layer diff has to find them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Lite0 (the torch port) uses BatchNorm eps = 1e-3; the bug is torch's default 1e-5.
WRONG_BN_EPSILON = 1e-5


@dataclass(frozen=True)
class Bug:
    name: str
    description: str
    carrier: str
    """The torch module path whose counterpart carries the bug (the first one, if several do)."""
    model_kwargs: dict[str, Any] = field(default_factory=dict)
    mapping_rules: tuple[dict[str, Any], ...] = ()
    """Rules tried before the shipped ones (a one-layer conversion bug)."""
    mapping_changes: dict[str, Any] = field(default_factory=dict)
    """Top-level mapping fields replaced (``ignore``, ``batch_norm_epsilon``)."""


BUGS: dict[str, Bug] = {b.name: b for b in (
    Bug("bn_epsilon_one",
        "BatchNorm epsilon 1e-5 (torch's default) instead of the model's 1e-3, on one BN",
        carrier="_blocks.5._bn1",
        model_kwargs={"bn_epsilon_overrides": {"block5_dw_bn": WRONG_BN_EPSILON}},
        mapping_changes={"batch_norm_epsilon": "ignore"}),
    Bug("bn_epsilon_all",
        "BatchNorm epsilon 1e-5 instead of 1e-3 on every BN (the first one is the stem's)",
        carrier="_bn0",
        model_kwargs={"bn_epsilon": WRONG_BN_EPSILON},
        mapping_changes={"batch_norm_epsilon": "ignore"}),
    Bug("symmetric_padding",
        "torch-style symmetric padding (2, 2) instead of the model's TF-'same' (1, 2) on a stride-2 5x5 "
        "depthwise conv: same output shape, feature map shifted by one pixel",
        carrier="_blocks.3._depthwise_conv",
        model_kwargs={"symmetric_padding_layers": ("block3_dw_pad",)}),
    Bug("swish",
        "ReLU6 replaced by swish after one block's expansion conv (EfficientNet-B0 code copied into Lite)",
        carrier="_blocks.6._swish",
        model_kwargs={"swish_layers": ("block6_expand_relu",)}),
    Bug("depthwise_transposed",
        "a depthwise kernel converted with kh and kw swapped: (C, 1, kh, kw) -> (kw, kh, C, 1); square kernels "
        "keep the shape, so only the numbers betray it",
        carrier="_blocks.9._depthwise_conv",
        mapping_rules=({"torch": "_blocks.9._depthwise_conv", "keras": "block9_dw_conv", "kind": "depthwise",
                        "permute": {"weight": [3, 2, 0, 1]}},)),
    Bug("dropped_bias",
        "the classifier's bias dropped (Dense(use_bias=False), torch '_fc.bias' ignored)",
        carrier="_fc",
        model_kwargs={"fc_use_bias": False},
        mapping_changes={"ignore": ["*.num_batches_tracked", "_fc.bias"]}),
    Bug("bgr_input",
        "RGB/BGR swapped at the input (a channel flip before the stem)",
        carrier="_conv_stem",
        model_kwargs={"bgr_input": True}),
)}
