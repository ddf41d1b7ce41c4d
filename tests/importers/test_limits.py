"""Hostile foreign configs: every one is refused with a clear one-line message (exit 2, reason ``limits`` where a
reading limit is passed), never a crash (exit 3), and a 40 MB file is refused before it is read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from repliscope.cli.main import app
from repliscope.importers.base import ConfigImportError
from repliscope.importers.batch import import_folder, import_one

FIX = Path(__file__).parent / "fixtures"
TIMM = json.loads((FIX / "timm" / "resnet50.a1_in1k.json").read_text(encoding="utf-8"))
MLMS = (FIX / "mlmodelscope" / "caffe" / "BVLC_AlexNet.yml").read_text(encoding="utf-8")


def _timm(tmp_path: Path, **pretrained: object) -> Path:
    cfg = json.loads(json.dumps(TIMM))
    cfg["pretrained_cfg"].update(pretrained)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg), encoding="utf-8")
    return path


def _refused(fmt: str, path: Path, reason: str, *words: str) -> str:
    with pytest.raises(ConfigImportError) as err:
        import_one(fmt, path)
    message = str(err.value)
    assert err.value.reason == reason, message
    assert str(path) in message and all(w in message for w in words), message
    res = CliRunner().invoke(app, ["manifest", "import", fmt, str(path)])
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    return message


@pytest.mark.parametrize(
    ("field", "value", "reason", "words"),
    [
        ("input_size", [3, 10**400, 224], "limits", ("integer of 401 digits", "max_int")),
        ("input_size", [3, int("9" * 300), 224], "limits", ("integer of 300 digits",)),
        ("input_size", [3, 10**9, 10**9], "limits", ("1000000000 x 1000000000", "max_pixels")),
        ("crop_pct", 1e-300, "limits", ("crop_pct", "max_pixels")),
        ("interpolation", {"a": 1}, "invalid", ("interpolation", "dict", "expected a string")),
        ("interpolation", ["bicubic"], "invalid", ("expected a string",)),
        ("std", [0.229, 0.0, 0.225], "invalid", ("std", "divides by zero")),
        ("std", [0.229, -1.0, 0.225], "invalid", ("must be positive",)),
    ],
)
def test_timm_hostile_fields(tmp_path: Path, field: str, value: object, reason: str, words: tuple[str, ...]) -> None:
    message = _refused("timm", _timm(tmp_path, **{field: value}), reason, *words)
    assert "importer bug" not in message


def test_timm_deep_nesting(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text('{"architecture": "resnet50", "x": ' + "[" * 100_000 + "]" * 100_000 + "}", encoding="utf-8")
    _refused("timm", path, "limits", "nested")


def test_timm_moderate_nesting_past_the_depth_limit(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text('{"architecture": "resnet50", "x": ' + "[" * 40 + "]" * 40 + "}", encoding="utf-8")
    _refused("timm", path, "limits", "nested more than 32 levels", "yaml_depth")


def test_timm_node_count(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**TIMM, "label_names": [str(i) for i in range(20_000)]}), encoding="utf-8")
    _refused("timm", path, "limits", "more than 10,000 values")


def test_timm_huge_number_text(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text('{"architecture": "resnet50", "num_classes": 1' + "0" * 5000 + "}", encoding="utf-8")
    _refused("timm", path, "limits", "too large")


@pytest.mark.parametrize(
    ("edit", "reason", "words"),
    [
        (("dimensions: [3, 227, 227]", "dimensions: [3, " + "1" + "0" * 400 + ", 227]"), "limits", ("401 digits",)),
        (("dimensions: [3, 227, 227]", "dimensions: [3, " + "9" * 300 + ", 227]"), "limits", ("300 digits",)),
        (("dimensions: [3, 227, 227]", "dimensions: [3, 1e400, 227]"), "limits", ("not a finite number",)),
        (("dimensions: [3, 227, 227]", "dimensions: [3, 1000000000, 1000000000]"), "limits", ("max_pixels",)),
    ],
)
def test_mlmodelscope_hostile_numbers(
    tmp_path: Path, edit: tuple[str, str], reason: str, words: tuple[str, ...]
) -> None:
    assert edit[0] in MLMS
    path = tmp_path / "m.yml"
    path.write_text(MLMS.replace(edit[0], edit[1]), encoding="utf-8")
    _refused("mlmodelscope", path, reason, *words)


@pytest.mark.parametrize("nest", ["[" * 5000 + "]" * 5000, "{a: " * 60 + "1" + "}" * 60, "[" * 40 + "]" * 40])
def test_mlmodelscope_deep_nesting(tmp_path: Path, nest: str) -> None:
    path = tmp_path / "m.yml"
    path.write_text(MLMS + f"\nextra: {nest}\n", encoding="utf-8")
    _refused("mlmodelscope", path, "limits", "nested more than 32 levels")


def test_mlmodelscope_alias_bomb(tmp_path: Path) -> None:
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
        f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
        for i in range(8)
    )
    path = tmp_path / "m.yml"
    path.write_text(MLMS + "\nattributes2:\n" + "".join("  " + ln + "\n" for ln in bomb.splitlines()), encoding="utf-8")
    _refused("mlmodelscope", path, "limits", "expands to more than")


@pytest.mark.parametrize("fmt", ["mlmodelscope", "timm"])
def test_a_40_mb_file_is_refused_before_reading(tmp_path: Path, fmt: str) -> None:
    path = tmp_path / ("m.yml" if fmt == "mlmodelscope" else "config.json")
    with path.open("wb") as fh:
        fh.truncate(40 << 20)  # sparse: 40 MB without writing them
    _refused(fmt, path, "limits", "41,943,040 bytes", "manifest_bytes", "refused before reading")


def test_a_folder_import_counts_hostile_files_under_limits(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "ok.yml").write_text(MLMS, encoding="utf-8")
    (folder / "deep.yml").write_text(MLMS + "\nextra: " + "[" * 3000 + "]" * 3000 + "\n", encoding="utf-8")
    rows = import_folder("mlmodelscope", folder, tmp_path / "out")
    assert [(r.file, r.outcome, r.reason) for r in rows] == [
        ("deep.yml", "refused", "limits"),
        ("ok.yml", "with warnings", ""),
    ]
