"""The command line end to end (typer's CliRunner, the per-test database from conftest)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from repliscope.cli.main import app
from tests.conftest import LITE0

runner = CliRunner(env={"COLUMNS": "200"})


def invoke(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.output


def test_evaluate_json_then_runs_list_show_compare() -> None:
    code, out = invoke("evaluate", str(LITE0), "--runtime", "onnxruntime", "--limit", "6", "--json")
    assert code == 0, out
    a = json.loads(out)
    assert a["counts"] == {"total": 6, "evaluated": 6, "failed": 0, "labelled": 6}
    assert a["metrics"][0]["successes"] == 6 and a["claims"][0]["verdict"] == "not comparable"
    code, out = invoke("evaluate", str(LITE0), "--runtime", "opencv_dnn", "--limit", "8", "--json")
    b = json.loads(out)
    assert code == 0 and b["metrics"][0]["successes"] == 6  # images 6 and 7 are the two misses

    code, out = invoke("runs", "list", "--json")
    listed = json.loads(out)
    assert code == 0 and [r["run_id"] for r in listed] == [b["run_id"], a["run_id"]]

    code, out = invoke("runs", "show", a["run_id"][:8])
    assert code == 0 and "6 evaluated, 0 failed" in out and a["run_id"] in out
    assert "6/6" in out and "not comparable" in out

    code, out = invoke("runs", "compare", a["run_id"], b["run_id"], "--json")
    cmp = json.loads(out)
    assert code == 0 and cmp["common_samples"] == 6 and cmp["only_in_b"] == 2 and cmp["top1_flips"] == []
    code, out = invoke("runs", "compare", a["run_id"], b["run_id"])
    assert code == 0 and "no sample's top-1 differs" in out


def test_evaluate_declared_dataset_gets_a_verdict() -> None:
    code, out = invoke("evaluate", str(LITE0), "--runtime", "onnxruntime", "--as", "imagenet-1k/val", "--json")
    [claim] = json.loads(out)["claims"]  # 18 of 20: ±13.7 pt, too wide to confirm the claim (issue 35)
    assert code == 0 and (claim["verdict"], claim["direction"]) == ("not comparable", "within")
    assert "too few samples to judge" in claim["reason"] and "a verdict needs ±2 pt or narrower" in claim["reason"]
    code, out = invoke("evaluate", str(LITE0), "--as", "imagenet-1k")
    assert code == 2 and "NAME/SPLIT" in out


def test_manifest_validate_ok_and_bad(tmp_path: Path) -> None:
    code, out = invoke("manifest", "validate", str(LITE0))
    assert code == 0 and "ok" in out and "7 pre-processing ops" in out
    bad = tmp_path / "bad.yaml"
    bad.write_text(LITE0.read_text().replace("method: bicubic", "method: bicubicc"))
    code, out = invoke("manifest", "validate", str(bad))
    line = next(i for i, ln in enumerate(bad.read_text().splitlines(), 1) if "bicubicc" in ln)
    assert code == 2
    assert f"{bad}:{line}: field 'preprocess[1].method'" in out
    assert "allowed: area, bicubic, bilinear, lanczos, nearest" in out


def test_manifest_show_resolved() -> None:
    code, out = invoke("manifest", "show", str(LITE0), "--resolved", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["source"]["verified"] is True
    ops = data["pipeline"]["preprocess"]
    assert [o["op"] for o in ops][:2] == ["decode", "resize"]
    assert ops[0]["library"] == "pillow" and ops[0]["library_version"]


def test_unknown_runtime_and_dataset() -> None:
    code, out = invoke("evaluate", str(LITE0), "--runtime", "onnx")
    assert code == 2 and "unknown runtime 'onnx'" in out and "onnxruntime" in out
    code, out = invoke("evaluate", str(LITE0), "--dataset", "/no/such/folder")
    assert code == 2 and "foolbox_imagenet" in out


def test_empty_dataset_folder(tmp_path: Path) -> None:
    code, out = invoke("evaluate", str(LITE0), "--dataset", str(tmp_path))
    assert code == 2 and "no image" in out.lower()


def test_pitfalls_list_and_small_sweep() -> None:
    code, out = invoke("pitfalls", str(LITE0), "--list")
    assert code == 0 and "data_layout_reshape" in out
    code, out = invoke(
        "pitfalls",
        str(LITE0),
        "--runtime",
        "onnxruntime",
        "--limit",
        "4",
        "--variant",
        "color_layout_swapped",
        "--variant",
        "data_layout_reshape",
        "--json",
    )
    assert code == 0, out
    sweep = json.loads(out)
    assert [v["name"] for v in sweep["variants"]] == ["color_layout_swapped", "data_layout_reshape"]
    code, out = invoke("runs", "list", "--json")
    assert len([r for r in json.loads(out) if r["sweep_id"] == sweep["sweep_id"]]) == 3
    code, out = invoke("runs", "list", "--sweep", sweep["sweep_id"][:8], "--json")
    assert code == 0 and sorted(r["variant"] for r in json.loads(out)) == [
        "color_layout_swapped",
        "data_layout_reshape",
        "reference",
    ]
    code, out = invoke("runs", "list", "--kind", "evaluation", "--json")
    assert code == 0 and all(r["kind"] == "evaluation" for r in json.loads(out))


def test_report_with_layer_diff_figure(tmp_path: Path) -> None:
    import io

    from PIL import Image

    code, out = invoke("evaluate", str(LITE0), "--runtime", "onnxruntime", "--limit", "2", "--json")
    run_id = json.loads(out)["run_id"]
    png = tmp_path / "layers.png"
    buf = io.BytesIO()
    Image.new("RGB", (40, 20), (200, 30, 30)).save(buf, format="PNG")
    png.write_bytes(buf.getvalue())
    html = tmp_path / "r.html"
    code, out = invoke("report", run_id[:10], "--figure", str(png), "--out", str(html))
    assert code == 0, out
    text = html.read_text()
    assert 'id="layer-diff"' in text and "layer-level diff (layers)" in text


def test_validate_checks_every_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\n")
    code, out = invoke("manifest", "validate", str(bad), str(LITE0))
    assert code == 2 and "ok" in out and "efficientnet-lite0" in out and "required field is missing" in out


def test_all_samples_failing_exits_nonzero(tmp_path: Path) -> None:
    (tmp_path / "a_1.jpg").write_bytes(b"not a jpeg")
    (tmp_path / "b_2.jpg").write_bytes(b"")
    code, out = invoke("evaluate", str(LITE0), "--runtime", "onnxruntime", "--dataset", str(tmp_path))
    assert code == 1 and "0 evaluated, 2 failed" in out and "every one of the 2 samples failed" in out


def test_onnx_source_defaults_to_onnxruntime(tmp_path: Path) -> None:
    import hashlib
    import shutil

    code, out = invoke("evaluate", str(LITE0), "--runtime", "onnxruntime", "--limit", "1", "--json")
    onnx_path = Path(json.loads(out)["runtime"]["export"]["onnx_path"])
    shutil.copy(onnx_path, tmp_path / "m.onnx")
    sha = hashlib.sha256((tmp_path / "m.onnx").read_bytes()).hexdigest()
    text = LITE0.read_text()
    start, end = text.index("framework:"), text.index("inputs:")
    (tmp_path / "m.yaml").write_text(
        text[:start] + "framework:\n  name: onnx\n  version: '>=1.14'\nsource:\n"
        f"  uri: m.onnx\n  sha256: {sha}\n  format: onnx\n" + text[end:]
    )
    code, out = invoke("evaluate", str(tmp_path / "m.yaml"), "--limit", "2", "--json")
    assert code == 0, out
    assert json.loads(out)["runtime"]["runtime"] == "onnxruntime"
