"""Op-level golden diff on the one-block vision transformer (examples/models/tiny_transformer.py): attention written
out (matmul, scale, softmax), LayerNorm, GELU, residuals. Bugs in the ONNX graph and in a torch port are localized
to the op that makes them; true negatives pass; a candidate that compares module layers only lists the ops as not
compared instead of passing them."""

from __future__ import annotations

import copy
import types
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
import torch

from repliscope.backends.onnxruntime.candidate import OnnxCandidate
from repliscope.diff.base import LayerInfo
from repliscope.diff.layers.driver import diff_layers
from repliscope.diff.layers.layer_result import LayerDiffResult
from repliscope.diff.layers.torch_reference import TorchReference
from tests.diff.conftest import drop_node, edited, export_onnx, find_node, jitter_weights, set_attribute

ATTN_OPS = [
    "reshape",
    "permute",
    "getitem",
    "getitem#2",
    "getitem#3",
    "transpose",
    "matmul",
    "mul",
    "softmax",
    "matmul#2",
    "transpose#2",
    "reshape#2",
]
OPS = [
    "/flatten",
    "/transpose",
    "/add",
    *[f"blocks.0.attn/{o}" for o in ATTN_OPS],
    "blocks.0/add",
    "blocks.0.mlp/gelu",
    "blocks.0/add#2",
    "/mean",
]


def _diff(model: Any, candidate: OnnxCandidate, x: np.ndarray) -> LayerDiffResult:
    return diff_layers(TorchReference(model), candidate, x)


def _failing(result: LayerDiffResult) -> list[str]:
    return [r.path for r in result.layers if r.missing or (r.golden is not None and not r.golden.passed)]


def test_healthy_attention_ops_are_units(tiny_transformer: tuple[Any, onnx.ModelProto], tiny_x: np.ndarray) -> None:
    model, proto = tiny_transformer
    result = _diff(model, OnnxCandidate(proto), tiny_x)
    assert result.passed and result.uncompared == []
    assert [r.path for r in result.layers if r.op] == OPS
    assert (result.reference_layers, result.reference_ops) == (9, len(OPS))
    golden = result.summary["golden"]
    assert (golden.compared, golden.ops, golden.missing) == (9 + len(OPS), len(OPS), 0) and golden.max_ratio < 0.5
    rows = {r.path: r for r in result.layers}
    softmax = rows["blocks.0.attn/softmax"]
    assert softmax.source.endswith("examples/models/tiny_transformer.py:29") and softmax.reduction == 16
    assert softmax.ref_shape == [4, 4, 16, 16]
    assert rows["blocks.0.attn/matmul"].reduction == 8 and rows["blocks.0.attn/matmul#2"].reduction == 16
    assert rows["blocks.0.mlp/gelu"].golden is not None and rows["blocks.0.mlp/gelu"].golden.passed


def test_softmax_over_the_wrong_axis(tiny_transformer: tuple[Any, onnx.ModelProto], tiny_x: np.ndarray) -> None:
    model, proto = tiny_transformer
    broken = edited(proto)
    set_attribute(find_node(broken, "Softmax", "blocks.0.attn"), "axis", -2)
    result = _diff(model, OnnxCandidate(broken), tiny_x)
    first = result.first_divergent["golden"]
    assert first is not None and first.path == "blocks.0.attn/softmax" and first.kind == "softmax"
    assert _failing(result) == ["blocks.0.attn/softmax"] and not result.passed


def test_missing_attention_scale_in_the_onnx(tiny_transformer: tuple[Any, onnx.ModelProto], tiny_x: np.ndarray) -> None:
    model, proto = tiny_transformer
    broken = edited(proto)
    drop_node(broken, find_node(broken, "Mul", "blocks.0.attn"), keep=0)
    result = _diff(model, OnnxCandidate(broken), tiny_x)
    first = result.first_divergent["golden"]
    assert first is not None and first.path == "blocks.0.attn/mul" and first.missing
    assert first.source.endswith("tiny_transformer.py:28")
    assert _failing(result) == ["blocks.0.attn/mul"]
    assert result.first_divergent["carried"] is not None and result.first_divergent["carried"].path == first.path


def test_missing_attention_scale_in_a_torch_port(
    tiny_transformer: tuple[Any, onnx.ModelProto], tiny_x: np.ndarray
) -> None:
    model, _ = tiny_transformer
    port = copy.deepcopy(model)
    attn = port.blocks[0].attn

    def forward(self: Any, x: torch.Tensor) -> torch.Tensor:
        n, t, d = x.shape
        qkv = self.qkv(x).reshape(n, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = torch.matmul(q, k.transpose(-2, -1)).softmax(dim=-1)  # the port forgot "* self.scale"
        return self.proj(torch.matmul(attn, v).transpose(1, 2).reshape(n, t, d))

    attn.forward = types.MethodType(forward, attn)
    result = _diff(model, OnnxCandidate(export_onnx(port)), tiny_x)
    first = result.first_divergent["golden"]
    assert first is not None and first.path == "blocks.0.attn/mul" and first.missing
    assert _failing(result) == ["blocks.0.attn/mul"]


def test_dropped_residual_in_the_onnx(tiny_transformer: tuple[Any, onnx.ModelProto], tiny_x: np.ndarray) -> None:
    model, proto = tiny_transformer
    broken = edited(proto)
    drop_node(broken, find_node(broken, "Add", "blocks.0", nth=0), keep=1)  # x + attn(...) -> attn(...)
    result = _diff(model, OnnxCandidate(broken), tiny_x)
    first = result.first_divergent["golden"]
    assert first is not None and first.path == "blocks.0/add" and first.source.endswith("tiny_transformer.py:53")
    assert _failing(result) == ["blocks.0/add"]
    assert result.output is not None and not result.output.passed


def test_layer_norm_eps_changed(tiny_transformer: tuple[Any, onnx.ModelProto], tiny_x: np.ndarray) -> None:
    model, proto = tiny_transformer
    broken = edited(proto)
    set_attribute(find_node(broken, "LayerNormalization", "blocks.0.norm2"), "epsilon", 1e-3)
    result = _diff(model, OnnxCandidate(broken), tiny_x)
    first = result.first_divergent["golden"]
    assert first is not None and first.path == "blocks.0.norm2" and first.kind == "LayerNorm" and first.ratio > 10
    assert _failing(result) == ["blocks.0.norm2"]


def test_true_negatives_pass(tiny_transformer: tuple[Any, onnx.ModelProto], tiny_x: np.ndarray) -> None:
    """1-ulp weight jitter; the softmax's axis permuted consistently (scores gathered in a permuted key order,
    softmax, gathered back: the same normalisation summed in another order)."""
    model, proto = tiny_transformer
    assert _diff(model, OnnxCandidate(jitter_weights(proto)), tiny_x).passed
    permuted = edited(proto)
    softmax = find_node(permuted, "Softmax", "blocks.0.attn")
    order = np.random.default_rng(0).permutation(16)
    permuted.graph.initializer.extend(
        [
            onnx.numpy_helper.from_array(order.astype(np.int64), "perm"),
            onnx.numpy_helper.from_array(np.argsort(order).astype(np.int64), "unperm"),
        ]
    )
    before = onnx.helper.make_node("Gather", [softmax.input[0], "perm"], ["scores_p"], axis=-1)
    after = onnx.helper.make_node("Gather", ["probs_p", "unperm"], [softmax.output[0]], axis=-1)
    for node in (before, after):
        node.metadata_props.extend(softmax.metadata_props)  # inside the softmax unit
    nodes = [onnx.NodeProto.FromString(n.SerializeToString()) for n in permuted.graph.node]
    at = next(i for i, n in enumerate(nodes) if n.op_type == "Softmax")
    nodes[at].input[0], nodes[at].output[0] = "scores_p", "probs_p"
    permuted.graph.ClearField("node")
    permuted.graph.node.extend([*nodes[:at], before, nodes[at], after, *nodes[at + 1 :]])
    result = _diff(model, OnnxCandidate(permuted), tiny_x)
    assert result.passed and {r.path: r for r in result.layers}["blocks.0.attn/softmax"].golden is not None


class ModulesOnly(OnnxCandidate):
    """The same ONNX candidate, but one that compares module layers only (as the Keras port does)."""

    supports_ops = False

    def mapped_layers(self, reference_layers: Sequence[LayerInfo]) -> list[str]:
        return super().mapped_layers([layer for layer in reference_layers if not layer.is_op])

    def unmatched(self) -> list[Any]:
        return []


def test_ops_a_candidate_cannot_compare_are_listed_not_passed(
    tiny_transformer: tuple[Any, onnx.ModelProto], tiny_x: np.ndarray
) -> None:
    model, proto = tiny_transformer
    broken = edited(proto)
    set_attribute(find_node(broken, "Softmax", "blocks.0.attn"), "axis", -2)
    result = _diff(model, ModulesOnly(broken), tiny_x)
    assert [u.path for u in result.uncompared] == OPS
    assert {u.reason for u in result.uncompared} == {
        "the onnxruntime candidate compares module layers only, not functional ops"
    }
    assert result.summary["golden"].ops == 0 and result.first_divergent["golden"] is None
    assert result.output is not None and not result.output.passed and not result.passed  # the output still fails


def test_onnx_without_torch_metadata_lists_the_ops(
    tiny_transformer: tuple[Any, onnx.ModelProto], tiny_x: np.ndarray
) -> None:
    """An ONNX file from another exporter (no pkg.torch.onnx metadata): nothing can be matched, nothing passes
    silently; the ops are listed with the reason, and the final output is still compared."""
    model, proto = tiny_transformer
    bare = edited(proto)
    for node in bare.graph.node:
        node.ClearField("metadata_props")
    result = _diff(model, OnnxCandidate(bare), tiny_x)
    assert result.layers == [] and len(result.uncompared) == 9 + len(OPS)
    reasons = {u.path: u.reason for u in result.uncompared}
    assert "no pkg.torch.onnx.name_scopes metadata" in reasons["blocks.0/add"]
    assert reasons["blocks.0.norm1"] == "the candidate maps no unit to it"
    assert result.output is not None and result.output.passed and result.passed


def test_dropped_residual_in_a_torch_port_is_told_apart_by_data_flow(
    tiny_transformer: tuple[Any, onnx.ModelProto], tiny_x: np.ndarray
) -> None:
    """The port's block drops the FIRST of its two residual adds. Its call sites (this file) match no reference
    line, so the block's two reference adds and the port's one add are aligned by the data flow: the port's add
    reads the MLP and feeds the final norm, like the reference's second add, so the first one is missing."""
    model, _ = tiny_transformer
    port = copy.deepcopy(model)
    block = port.blocks[0]

    def forward(self: Any, x: torch.Tensor) -> torch.Tensor:
        x = self.attn(self.norm1(x))  # the port forgot "x +"
        return x + self.mlp(self.norm2(x))

    block.forward = types.MethodType(forward, block)
    result = _diff(model, OnnxCandidate(export_onnx(port)), tiny_x)
    first = result.first_divergent["golden"]
    assert first is not None and first.path == "blocks.0/add" and first.missing
    assert _failing(result) == ["blocks.0/add"]
