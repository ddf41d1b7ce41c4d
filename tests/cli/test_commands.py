"""Command-line details of issue 7: `pitfalls --list` without a manifest and without frameworks, `convert` as
the docs write it, TensorFlow's start-up noise filtered, the docs' CLI reference and exit codes."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from repliscope.cli import convert_cmd
from repliscope.cli.main import app
from tests.conftest import LITE0, REPO

runner = CliRunner(env={"COLUMNS": "200"})
README = REPO / "README.md"
DOCS = REPO / "docs"
CLI_REFERENCE = DOCS / "reference" / "cli.md"
ERRORS_GUIDE = DOCS / "guides" / "errors.md"
HEAVY = ("torch", "onnx", "onnxruntime", "tensorflow", "keras", "cv2", "scipy", "sqlalchemy", "matplotlib")


def test_pitfalls_list_needs_no_manifest_and_imports_no_framework() -> None:
    code = (
        "import json, sys\n"
        "sys.argv = ['repliscope', 'pitfalls', '--list']\n"
        "from repliscope.cli.main import app\n"
        "try:\n    app()\nexcept SystemExit as exc:\n    rc = exc.code\n"
        f"print(json.dumps([rc, sorted(m for m in {HEAVY!r} if m in sys.modules)]), file=sys.stderr)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "200"}
    )
    rc, loaded = json.loads(proc.stderr.strip().splitlines()[-1])
    assert rc == 0 and loaded == []
    assert "data_layout_reshape" in proc.stdout and "color_layout_swapped" in proc.stdout


def test_pitfalls_without_manifest_or_list() -> None:
    res = runner.invoke(app, ["pitfalls"])
    assert res.exit_code == 2
    assert (
        res.stderr == "error: missing MANIFEST: give a model manifest (YAML) to sweep, or --list to list the pitfalls\n"
    )


def _doc_pages() -> list[Path]:
    """The README and every hand-written page of the docs site (not the build output, not generated pages)."""
    pages = [p for p in sorted(DOCS.rglob("*.md")) if not {"_build", "_generated"} & set(p.parts)]
    return [README, *pages]


def _readme_commands(word: str) -> list[list[str]]:
    """Every ``repliscope WORD ...`` line of the README's and the docs' code blocks, split as a shell would."""
    text = "\n".join(p.read_text(encoding="utf-8") for p in _doc_pages())
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", text, flags=re.S | re.M)
    lines = [ln.strip() for b in blocks for ln in b.splitlines() if ln.strip().startswith(f"repliscope {word} ")]
    return [shlex.split(ln, comments=True)[1:] for ln in lines]


def test_convert_as_the_docs_write_it(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[object, ...]] = []
    monkeypatch.setattr(convert_cmd, "_run", lambda *args: calls.append(args) or True)
    commands = _readme_commands("convert")
    assert commands, "neither the README nor the docs show a `repliscope convert` line"
    monkeypatch.chdir(REPO)
    for argv in commands:
        res = runner.invoke(app, argv)
        assert res.exit_code == 0, (argv, res.output)
    manifest, to, mapping, out = calls[0][:4]
    assert (manifest, to, mapping, out) == (
        Path("examples/efficientnet-lite0.yaml"),
        "keras",
        Path("examples/keras_efficientnet_lite/mapping.yaml"),
        Path("lite0.keras"),
    )
    # every mapping the docs name exists (a darknet source needs none: its cfg is the mapping)
    assert all(Path(REPO, str(c[2])).is_file() for c in calls if c[2] is not None)
    assert any(c[2] is None and str(c[0]).endswith("yolov3-tiny.yaml") for c in calls)


def test_convert_bad_mapping_is_refused_before_any_work(tmp_path: Path) -> None:
    res = runner.invoke(app, ["convert", str(LITE0), "--to", "keras", "--out", "x.keras"])
    assert res.exit_code == 2 and "error: --to keras needs --mapping MAPPING.yaml" in res.stderr
    onnx = tmp_path / "m.onnx"
    onnx.write_bytes(b"\x08\x07\x12\x8f")
    res = runner.invoke(app, ["convert", str(LITE0), "--mapping", str(onnx), "--out", str(tmp_path / "x.keras")])
    assert res.exit_code == 2
    assert res.stderr == f"error: --mapping {onnx}: a mapping is a YAML file (.yaml or .yml), not '.onnx'\n"
    bad = tmp_path / "m.yaml"
    bad.write_bytes(b"layers: \xff\xfe")
    res = runner.invoke(app, ["convert", str(LITE0), "--mapping", str(bad), "--out", str(tmp_path / "x.keras")])
    assert res.exit_code == 2 and res.stderr == f"error: --mapping {bad}: not UTF-8 text (byte 8); a mapping is YAML\n"
    res = runner.invoke(app, ["convert", str(LITE0), "--mapping", str(tmp_path / "no.yaml"), "--out", "x.keras"])
    assert res.exit_code == 2 and res.stderr == (
        f"error: --mapping {tmp_path / 'no.yaml'}: no such file (the mapping "
        "of the shipped Keras example is "
        "examples/keras_efficientnet_lite/mapping.yaml)\n"
    )


def test_tensorflow_info_lines_are_filtered(capfd: pytest.CaptureFixture[str]) -> None:
    from repliscope.cli.common import _TF_INFO, _filtered_stderr

    with _filtered_stderr(_TF_INFO):
        os.write(
            2,
            b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
            b"I0000 00:00:1795429474.435186   13928 port.cc:153] oneDNN custom operations are on.\n"
            b"W0000 00:00:1795429474.5   13928 op.cc:1] a real warning\n"
            b"plain text from a library\n",
        )
    assert capfd.readouterr().err == (
        "W0000 00:00:1795429474.5   13928 op.cc:1] a real warning\nplain text from a library\n"
    )


def test_quiet_keras_prints_nothing_at_import() -> None:
    pytest.importorskip("keras")
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "from repliscope.cli.common import quiet_keras; quiet_keras(); "
            "import sys; print('tensorflow' in sys.modules)",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0 and proc.stdout == "True\n" and proc.stderr == ""


def test_every_command_of_the_cli_reference_exists() -> None:
    section = CLI_REFERENCE.read_text(encoding="utf-8")
    commands = re.findall(r"^\| `repliscope ([a-z]+(?: [a-z]+)?)", section, flags=re.M)
    assert {"evaluate", "pitfalls", "report", "runs list", "diff", "convert", "manifest validate"} <= set(commands)
    for command in commands:
        res = runner.invoke(app, [*command.split(), "--help"])
        assert res.exit_code == 0, (command, res.output)


def test_docs_list_the_exit_codes() -> None:
    text = ERRORS_GUIDE.read_text(encoding="utf-8")
    section = text[text.index("# Errors and exit codes") :]
    section = section[: section.index("\n## ", 3)]
    for code in ("0", "1", "2", "3", "130"):
        assert re.search(rf"^\| `{code}` \|", section, flags=re.M), code
    assert "REPLISCOPE_LOG_DIR" in section
