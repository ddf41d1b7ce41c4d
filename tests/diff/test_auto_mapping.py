"""The proposed mapping when the candidate runs a parallel branch in another order: TensorFlow lists attention's
``v`` projection after the softmax (a Keras port exported as a SavedModel), and a layer that cannot be placed in
order is paired out of order with its namesake or left uncovered, never derailing the rest of the alignment."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from repliscope.diff.layers.auto_mapping import ReferenceUnit as R
from repliscope.diff.layers.auto_mapping import propose
from repliscope.diff.layers.mapping import UnitInfo as U

REASON = "no candidate unit in execution order; give --mapping to pair it"

# the token-attention tail of /tmp/r12's MyNet (torch, batch 1) and of its Keras port's SavedModel units (TF 2.21,
# prefix StatefulPartitionedCall/ dropped; -1 = a dimension the graph does not know)
REF = [
    R("/flatten", "flatten", (1, 12, 256)),
    R("/transpose", "transpose", (1, 256, 12)),
    R("q", "Linear", (1, 256, 12)),
    R("k", "Linear", (1, 256, 12)),
    R("v", "Linear", (1, 256, 12)),
    R("/transpose#2", "transpose", (1, 12, 256)),
    R("/matmul", "matmul", (1, 256, 256)),
    R("/div", "div", (1, 256, 256)),
    R("/softmax", "softmax", (1, 256, 256)),
    R("/matmul#2", "matmul", (1, 256, 12)),
    R("/add#2", "add", (1, 256, 12)),
    R("ln", "LayerNorm", (1, 256, 12)),
    R("/tanh", "tanh", (1, 256, 12)),
    R("/mean", "mean", (1, 12)),
    R("fc", "Linear", (1, 10)),
]
SAVEDMODEL = [
    U(f"functional_1/{name}", op, shape)
    for name, op, shape in [
        ("tokens_1/Reshape", "Reshape", (1, 256, 12)),
        *[
            (f"{p}_1/{n}", o, s)
            for p in "qk"
            for n, o, s in [
                ("Tensordot/transpose", "Transpose", (1, 256, 12)),
                ("Tensordot/Reshape", "Reshape", (1, -1)),
                ("Tensordot/MatMul", "MatMul", (1, 12)),
                ("Tensordot", "Reshape", (1, -1, 12)),
                ("BiasAdd", "BiasAdd", (1, -1, 12)),
            ]
        ],
        ("qk_1/transpose", "Transpose", (1, 12, -1)),
        ("qk_1/MatMul", "BatchMatMulV2", (1, -1, -1)),
        ("scale_1/mul", "Mul", (1, -1, -1)),
        ("scale_1/add", "AddV2", (1, -1, -1)),
        ("softmax_1/Softmax", "Softmax", (1, -1, -1)),
        ("v_1/Tensordot/transpose", "Transpose", (1, 256, 12)),
        ("v_1/Tensordot/Reshape", "Reshape", (1, -1)),
        ("v_1/Tensordot/MatMul", "MatMul", (1, 12)),
        ("v_1/Tensordot", "Reshape", (1, -1, 12)),
        ("v_1/BiasAdd", "BiasAdd", (1, -1, 12)),
        ("av_1/MatMul", "BatchMatMulV2", (1, -1, 12)),
        ("add2_1/Add", "AddV2", (1, 256, 12)),
        ("ln_1/moments/mean", "Mean", (1, 256, 1)),
        ("ln_1/moments/SquaredDifference", "SquaredDifference", (1, 256, 12)),
        ("ln_1/moments/variance", "Mean", (1, 256, 1)),
        ("ln_1/add", "AddV2", (1, 256, 1)),
        ("ln_1/Rsqrt", "Rsqrt", (1, 256, 1)),
        ("ln_1/mul", "Mul", (1, 256, 12)),
        ("ln_1/mul_2", "Mul", (1, 256, 12)),
        ("ln_1/Neg", "Neg", (1, 256, 1)),
        ("ln_1/mul_1", "Mul", (1, 256, 12)),
        ("ln_1/add_1", "AddV2", (1, 256, 12)),
        ("ln_1/add_2", "AddV2", (1, 256, 12)),
        ("tanh_1/Tanh", "Tanh", (1, 256, 12)),
        ("mean_1/Mean", "Mean", (1, 12)),
        ("fc_1/MatMul", "MatMul", (1, 10)),
        ("fc_1/BiasAdd", "BiasAdd", (1, 10)),
    ]
]


def test_a_branch_listed_after_the_softmax_is_paired_with_its_namesake_out_of_order() -> None:
    p = propose(REF, SAVEDMODEL, "NHWC")
    assert {k: v.removeprefix("functional_1/") for k, v in p.mapping.items()} == {
        "/transpose": "tokens_1/Reshape",
        "q": "q_1/BiasAdd",
        "k": "k_1/BiasAdd",
        "v": "v_1/BiasAdd",
        "/transpose#2": "qk_1/transpose",
        "/matmul": "qk_1/MatMul",
        "/softmax": "softmax_1/Softmax",
        "/matmul#2": "av_1/MatMul",
        "/add#2": "add2_1/Add",
        "ln": "ln_1/add_2",
        "/tanh": "tanh_1/Tanh",
        "/mean": "mean_1/Mean",
        "fc": "fc_1/BiasAdd",
    }
    assert p.covers["v"] == ["v"] and p.covers["/transpose"] == ["/flatten", "/transpose"]
    assert p.covers["/softmax"] == ["/div", "/softmax"]
    assert p.uncovered_reference == [] and p.reasons == {}
    assert len(p.unmatched_candidate) == len(SAVEDMODEL) - 13 == 25


def test_a_layer_that_cannot_be_placed_in_order_is_left_uncovered_with_the_reason() -> None:
    """Anonymous units: ``v`` (6 features, run after the softmax) has no namesake, so it is left out; the rest
    still pairs (before, the alignment stopped at ``v`` and left the softmax, the second matmul and fc out)."""
    ref = [
        R("q", "Linear", (1, 4, 8)),
        R("k", "Linear", (1, 4, 8)),
        R("v", "Linear", (1, 4, 6)),
        R("/matmul", "matmul", (1, 4, 4)),
        R("/softmax", "softmax", (1, 4, 4)),
        R("/matmul#2", "matmul", (1, 4, 6)),
        R("fc", "Linear", (1, 3)),
    ]
    cand = [
        U("u0", "MatMul", (1, 4, 8)),
        U("u1", "MatMul", (1, 4, 8)),
        U("u2", "BatchMatMulV2", (1, 4, 4)),
        U("u3", "Softmax", (1, 4, 4)),
        U("u4", "MatMul", (1, 4, 6)),
        U("u5", "BatchMatMulV2", (1, 4, 6)),
        U("u6", "MatMul", (1, 3)),
    ]
    p = propose(ref, cand)
    assert p.mapping == {"q": "u0", "k": "u1", "/matmul": "u2", "/softmax": "u3", "/matmul#2": "u5", "fc": "u6"}
    assert p.uncovered_reference == ["v"] and p.reasons == {"v": REASON}
    assert p.covers["/matmul"] == ["/matmul"] and p.unmatched_candidate == ["u4"]


def test_the_reason_of_an_uncovered_layer_reaches_the_result(monkeypatch: pytest.MonkeyPatch) -> None:
    """diff_candidate replaces the generic 'maps no unit to it' of a layer the proposal left out with its reason."""
    import repliscope.diff.layers.driver as layers
    from repliscope.diff.layers.candidate_format import BuiltCandidate, diff_candidate
    from repliscope.diff.layers.layer_result import NotCompared

    generic = "the candidate maps no unit to it"
    fake = SimpleNamespace(
        candidate={"candidate": "savedmodel"},
        notes=[],
        uncompared=[
            NotCompared(path="v", kind="Linear", source="m.py:3", reason=generic),
            NotCompared(path="k", kind="Linear", source="m.py:2", reason=generic),
        ],
    )
    monkeypatch.setattr(layers, "diff_layers", lambda *a, **k: fake)
    built = BuiltCandidate(
        candidate=SimpleNamespace(mode_limits={}),
        format="savedmodel",
        mapping_origin="proposed",  # type: ignore[arg-type]
        mapping={"q": "q_1/BiasAdd"},
        uncovered_reasons={"v": REASON},
    )
    result = diff_candidate(None, built.candidate, np.zeros((1, 3)), ["golden"], built=built)
    assert [u.reason for u in result.uncompared] == [f"the proposed mapping left it uncovered: {REASON}", generic]
    assert result.candidate["mapping_origin"] == "proposed" and result.notes[0].startswith("the layer mapping was")
