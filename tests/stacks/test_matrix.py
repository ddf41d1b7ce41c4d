"""build_matrix on hand-made records: agreement, flips both ways, hash equality, output differences (exact)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from repliscope.errors import RepliscopeError
from repliscope.evaluation.record import EvaluationRecord, SamplePrediction
from repliscope.stacks.matrix import StackMatrix, build_matrix
from repliscope.stacks.spec import StackError
from tests.cli._records import failed, pred, record


def in_stack(rec: EvaluationRecord, key: str, ort: str) -> EvaluationRecord:
    software = {
        "numpy": "2.4.6",
        "distributions": {"onnxruntime": ort, "onnx": "1.19.0", "torch": "2.13.0"},
        "stack": {"key": key, "spec": f"onnxruntime=={ort}" if key != "current" else "current"},
    }
    return rec.model_copy(update={"software": software})


def samples(tops: list[int]) -> list[SamplePrediction]:
    labels = [1, 2, 3, 4, None]
    return [pred(f"s{i}", labels[i], [t, 9]) for i, t in enumerate(tops)]


A = in_stack(record(samples([1, 2, 3, 0, 7])), "current", "1.32.0")  # right on s0 s1 s2, wrong on s3
B = in_stack(record(samples([1, 5, 3, 4, 7])), "aaaaaaaaaaaa", "1.20.1")  # s1 right->wrong, s3 wrong->right
C = in_stack(record(samples([1, 2, 3, 0, 7])), "bbbbbbbbbbbb", "1.18.0")  # identical to A
D = in_stack(record([*samples([1, 2, 3, 0])[:3], failed("s3", 4), pred("s4", None, [8])]), "cccccccccccc", "1.19.0")


def rows(values: dict[str, list[float]]) -> dict[str, np.ndarray]:
    return {k: np.array(v, dtype=np.float32) for k, v in values.items()}


OUT_A = rows({"s0": [1.0, 2.0], "s1": [0.5, 0.25], "s2": [0.0, 0.0], "s3": [3.0, 1.0], "s4": [2.0, 2.0]})
OUT_B = rows({"s0": [1.0, 2.5], "s1": [0.5, 0.0], "s2": [0.0, 0.0], "s3": [3.0, 1.0], "s4": [2.0, 1.0]})


def test_pairs_of_three_stacks() -> None:
    m = build_matrix(
        [A, B, C],
        {"current": OUT_A, "aaaaaaaaaaaa": OUT_B, "bbbbbbbbbbbb": OUT_A},
        agents={"current": "host-1", "aaaaaaaaaaaa": "host-2"},
    )
    assert [s.key for s in m.stacks] == ["current", "aaaaaaaaaaaa", "bbbbbbbbbbbb"]
    assert [(p.a, p.b) for p in m.pairs] == [
        ("current", "aaaaaaaaaaaa"),
        ("current", "bbbbbbbbbbbb"),
        ("aaaaaaaaaaaa", "bbbbbbbbbbbb"),
    ]
    ab = m.pairs[0]
    assert ab.compared == 5 and ab.agree == 3 and ab.agreement == 3 / 5
    assert ab.flips_ab == ["s1"] and ab.flips_ba == ["s3"]
    assert ab.max_abs_output_diff == 1.0 and ab.outputs_compared == 5
    assert ab.mean_abs_output_diff == pytest.approx((0.5 + 0.25 + 1.0) / 10)
    assert ab.result_hash_equal is False
    ac = m.pairs[1]
    assert (
        ac.agreement,
        ac.flips_ab,
        ac.flips_ba,
        ac.max_abs_output_diff,
        ac.mean_abs_output_diff,
        ac.result_hash_equal,
    ) == (1.0, [], [], 0.0, 0.0, True)
    first = m.stacks[0]
    assert first.versions == {"onnxruntime": "1.32.0", "onnx": "1.19.0", "numpy": "2.4.6"}
    assert (first.agent_id, m.stacks[2].agent_id) == ("host-1", None)
    assert (first.top1, m.stacks[1].top1, first.top5) == (0.75, 0.75, None)
    assert first.run_id == A.run_id and first.result_hash == A.result_hash
    assert (m.manifest.name, m.runtime, m.dataset.identity, m.dataset.n) == (
        "efficientnet-lite0",
        "onnxruntime",
        "id-foolbox_imagenet",
        5,
    )
    swapped = m.pair("aaaaaaaaaaaa", "current")
    assert (swapped.flips_ab, swapped.flips_ba) == (["s3"], ["s1"])


def test_failed_samples_and_missing_outputs() -> None:
    m = build_matrix([A, D], {"current": OUT_A})
    p = m.pairs[0]
    assert p.compared == 4 and p.agree == 3 and p.agreement == 3 / 4  # s3 failed on D; s4: 7 vs 8
    assert p.flips_ab == [] and p.flips_ba == []
    assert (p.max_abs_output_diff, p.mean_abs_output_diff, p.outputs_compared) == (None, None, 0)
    assert m.stacks[1].failed == 1 and m.stacks[1].evaluated == 4


def test_round_trip_json() -> None:
    m = build_matrix([A, B], {"current": OUT_A, "aaaaaaaaaaaa": OUT_B})
    assert StackMatrix.model_validate_json(m.model_dump_json()) == m


def test_refusals() -> None:
    with pytest.raises(StackError, match="same stack"):
        build_matrix([A, in_stack(B, "current", "1.20.1")])
    other = B.model_copy(update={"dataset": {**B.dataset, "identity": "other"}})
    with pytest.raises(StackError, match="read other data"):
        build_matrix([A, other])
    with pytest.raises(StackError, match="differ in shape"):
        build_matrix([A, B], {"current": OUT_A, "aaaaaaaaaaaa": {**OUT_B, "s0": np.zeros(3, np.float32)}})
    with pytest.raises(StackError, match="no pair"):
        build_matrix([A, B]).pair("current", "zzz")


def test_summary_rows_and_report(tmp_path: Path) -> None:
    from repliscope.report.stack_matrix import diff_chart, write_stack_matrix_report
    from repliscope.stacks.matrix import summary_rows

    m = build_matrix([A, B, C], {"current": OUT_A, "aaaaaaaaaaaa": OUT_B, "bbbbbbbbbbbb": OUT_A})
    rows = summary_rows(m)
    assert [
        (r["stack"], r["top1"], r["delta"], r["agreement"], r["flips"], r["max_diff"], r["hash_equal"]) for r in rows
    ] == [
        ("current", "75.00 %", "(reference)", "–", "–", "–", "–"),
        ("aaaaaaaaaaaa", "75.00 %", "+0.00 pp", "60.00 % (3/5)", "1 / 1", "1", "no"),
        ("bbbbbbbbbbbb", "75.00 %", "+0.00 pp", "100.00 % (5/5)", "0 / 0", "0", "yes"),
    ]
    assert rows[1]["versions"] == "onnxruntime 1.20.1, onnx 1.19.0, numpy 2.4.6"
    png = diff_chart(m)
    assert png is not None and png.startswith(b"\x89PNG")
    assert diff_chart(build_matrix([A, B])) is None  # no raw outputs: no chart
    html = write_stack_matrix_report(m, tmp_path / "m.html").read_text()
    assert "efficientnet-lite0 1.0.0 across 3 software stacks" in html and "data:image/png;base64," in html
    assert "<td>s1</td><td>s3</td>" in html  # the current/aaaaaaaaaaaa pair's flips both ways
    md = write_stack_matrix_report(m, tmp_path / "m.md", "md").read_text().splitlines()
    assert md[4].startswith("| stack | versions |") and md[7].startswith("| aaaaaaaaaaaa |") and len(md) == 11
    with pytest.raises(RepliscopeError, match="unknown report format 'pdf'"):
        write_stack_matrix_report(m, tmp_path / "m.pdf", "pdf")
