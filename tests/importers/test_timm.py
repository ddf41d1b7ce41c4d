"""The timm importer (issue 13): timm's eval-transform math without timm installed, golden translations of
timm configs op by op, every warning code from a config that triggers it, offline validation, the CLI's --json."""

from __future__ import annotations

import copy
import hashlib
import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from repliscope.cli.main import app
from repliscope.importers.base import ConfigImportError, ImportResult
from repliscope.importers.batch import import_folder, import_one
from repliscope.importers.timm import PLACEHOLDER_SHA256, TIMM_VERSIONS, TimmImporter, resize_and_crop, scale_size
from repliscope.manifest.checks import check_manifest
from repliscope.ops.pipeline import Pipeline, decode_input

FIXTURES = Path(__file__).parent / "fixtures" / "timm"
RESNET = FIXTURES / "resnet50.a1_in1k.json"
NFNET = FIXTURES / "dm_nfnet_f0.dm_in1k.json"
VIT = FIXTURES / "vit_base_patch16_224.augreg2_in21k_ft_in1k.json"
runner = CliRunner(env={"COLUMNS": "200"})

IMAGENET_MEAN = [0.485, 0.456, 0.406]
IMAGENET_STD = [0.229, 0.224, 0.225]


def tail(mean: list[float], std: list[float]) -> list[dict[str, Any]]:
    """ToTensor + Normalize + CHW as the importer writes them."""
    return [
        {"op": "to_float", "dtype": "float32"},
        {"op": "divide_std", "value": 255.0},
        {"op": "subtract_mean", "value": mean},
        {"op": "divide_std", "value": std},
        {"op": "data_layout", "layout": "NCHW"},
    ]


DECODE = {"op": "decode", "library": "pillow", "channels": "RGB"}


def codes(result: ImportResult) -> list[str]:
    return [w.code for w in result.warnings]


def write_config(tmp_path: Path, cfg: dict[str, Any], name: str = "config.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(cfg), encoding="utf-8")
    return path


def base_cfg(**pretrained: Any) -> dict[str, Any]:
    """The resnet50.a1_in1k fixture with pretrained_cfg entries replaced (None deletes)."""
    cfg = json.loads(RESNET.read_text(encoding="utf-8"))
    for key, value in pretrained.items():
        if value is None:
            cfg["pretrained_cfg"].pop(key, None)
        else:
            cfg["pretrained_cfg"][key] = value
    return cfg


# --- the crop_pct math (timm: scale = math.floor(size / crop_pct), per side) ---------------------------------


@pytest.mark.parametrize(
    ("size", "crop_pct", "expected"),
    [
        ((224, 224), 0.95, (235, 235)),  # resnet50.a1_in1k: 224 / 0.95 = 235.79
        ((224, 224), 0.9, (248, 248)),  # vit *_224: 248.89
        ((224, 224), 0.875, (256, 256)),  # convnext / the default crop_pct: exactly 256
        ((288, 288), 1.0, (288, 288)),  # convnext test size, crop_pct 1.0: no resize margin
        ((192, 192), 0.9, (213, 213)),  # dm_nfnet_f0: 213.33
        ((384, 384), 1.0, (384, 384)),
        ((256, 320), 0.875, (292, 365)),  # non-square (height, width): 292.57, 365.71
    ],
)
def test_scale_size_is_floor_of_size_over_crop_pct(
    size: tuple[int, int], crop_pct: float, expected: tuple[int, int]
) -> None:
    assert scale_size(size, crop_pct) == expected


def test_center_mode_resizes_the_shorter_side_then_crops() -> None:
    ops = resize_and_crop((224, 224), 0.95, "center", "bicubic", IMAGENET_MEAN)
    assert ops == [
        {
            "op": "resize",
            "size": 235,
            "keep_aspect_ratio": True,
            "method": "bicubic",
            "library": "pillow",
            "antialias": True,
            "long_side": "truncate",
        },
        {"op": "center_crop", "size": 224},
    ]


def test_squash_mode_resizes_both_sides_without_keeping_the_aspect() -> None:
    ops = resize_and_crop((224, 224), 0.875, "squash", "bilinear", IMAGENET_MEAN)
    assert ops == [
        {
            "op": "resize",
            "size": [256, 256],
            "keep_aspect_ratio": False,
            "method": "bilinear",
            "library": "pillow",
            "antialias": True,
        },
        {"op": "center_crop", "size": 224},
    ]


def test_border_mode_fits_inside_then_pads_with_the_mean_colour() -> None:
    # ResizeKeepRatio(256, longest=1.0) + CenterCropOrPad(224, fill=[round(255 * m) for m in mean]):
    # 255 * (0.485, 0.456, 0.406) = (123.675, 116.28, 103.53) -> (124, 116, 104)
    ops = resize_and_crop((224, 224), 0.875, "border", "bicubic", IMAGENET_MEAN)
    assert ops == [
        {
            "op": "resize",
            "size": [256, 256],
            "keep_aspect_ratio": True,
            "fit": "inside",
            "method": "bicubic",
            "library": "pillow",
            "antialias": True,
        },
        {"op": "center_crop", "size": 224, "fill": [124, 116, 104]},
    ]


def test_border_mode_refuses_a_mean_that_is_no_colour() -> None:
    with pytest.raises(ValueError, match=r"must be in 0\.\.1 units"):
        resize_and_crop((224, 224), 0.875, "border", "bicubic", [123.675, 116.28, 103.53])


@pytest.mark.parametrize(("version", "method"), [("1.0.29", "bilinear"), ("1.0.30", "bilinear"), ("1.0.31", "bicubic")])
def test_non_square_center_is_resize_keep_ratio_cover_per_timm_version(version: str, method: str) -> None:
    ops = resize_and_crop((256, 320), 0.875, "center", "bicubic", IMAGENET_MEAN, version)
    # timm: ResizeKeepRatio((292, 365)) longest=0 (cover); 1.0.31 passes the config's interpolation, earlier
    # releases leave ResizeKeepRatio's default bilinear
    assert ops == [
        {
            "op": "resize",
            "size": [292, 365],
            "keep_aspect_ratio": True,
            "fit": "cover",
            "method": method,
            "library": "pillow",
            "antialias": True,
        },
        {"op": "center_crop", "size": [256, 320]},
    ]


def test_non_square_squash_is_exact() -> None:
    ops = resize_and_crop((256, 320), 0.875, "squash", "bicubic", IMAGENET_MEAN)
    assert ops[0]["size"] == [292, 365] and ops[1] == {"op": "center_crop", "size": [256, 320]}


# --- golden translations of the fixtures, op by op ------------------------------------------------------------


def test_resnet50_a1_in1k_golden() -> None:
    r = import_one("timm", RESNET)
    m = r.manifest
    assert m["preprocess"] == [
        DECODE,
        {
            "op": "resize",
            "size": 235,
            "keep_aspect_ratio": True,
            "method": "bicubic",
            "library": "pillow",
            "antialias": True,
            "long_side": "truncate",
        },
        {"op": "center_crop", "size": 224},
        *tail(IMAGENET_MEAN, IMAGENET_STD),
    ]
    assert m["name"] == "resnet50.a1_in1k"
    assert m["architecture"] == {
        "factory": "timm:create_model",
        "package": "timm==1.0.31",
        "kwargs": {"model_name": "resnet50", "pretrained": False, "num_classes": 1000},
    }
    assert m["inputs"] == [{"name": "input", "shape": [-1, 3, 224, 224], "dtype": "float32", "layout": "NCHW"}]
    assert m["outputs"] == [
        {"name": "logits", "shape": [-1, 1000], "dtype": "float32", "layout": "NC", "kind": "logits"}
    ]
    assert m["postprocess"] == [{"op": "softmax", "axis": -1}, {"op": "topk", "k": 5}, {"op": "labels"}]
    assert m["labels"] == {"source": "builtin:imagenet-1k", "num_classes": 1000}
    assert m["source"] == {"uri": "model.safetensors", "sha256": PLACEHOLDER_SHA256, "format": "pytorch_state_dict"}
    prov = m["provenance"]["imported_from"]
    assert prov["format"] == "timm" and prov["file"] == str(RESNET)
    assert prov["sha256"] == hashlib.sha256(RESNET.read_bytes()).hexdigest()
    assert codes(r) == [
        "timm.test_size_ignored",
        "timm.test_size_ignored",
        "timm.weights_missing",
        "timm.license_missing",
    ]
    assert [w.field for w in r.warnings[:2]] == ["pretrained_cfg.test_input_size", "pretrained_cfg.test_crop_pct"]


def test_dm_nfnet_f0_squash_golden() -> None:
    r = import_one("timm", NFNET)
    assert r.manifest["preprocess"] == [
        DECODE,
        {
            "op": "resize",
            "size": [213, 213],
            "keep_aspect_ratio": False,
            "method": "bicubic",
            "library": "pillow",
            "antialias": True,
        },
        {"op": "center_crop", "size": 192},
        *tail(IMAGENET_MEAN, IMAGENET_STD),
    ]
    assert r.manifest["inputs"][0]["shape"] == [-1, 3, 192, 192]
    assert codes(r) == ["timm.test_size_ignored", "timm.weights_missing", "timm.license_missing"]


def test_vit_golden() -> None:
    r = import_one("timm", VIT)
    assert r.manifest["preprocess"] == [
        DECODE,
        {
            "op": "resize",
            "size": 248,
            "keep_aspect_ratio": True,
            "method": "bicubic",
            "library": "pillow",
            "antialias": True,
            "long_side": "truncate",
        },
        {"op": "center_crop", "size": 224},
        *tail([0.5, 0.5, 0.5], [0.5, 0.5, 0.5]),
    ]
    assert r.manifest["license"] == "apache-2.0"
    assert r.manifest["name"] == "vit_base_patch16_224.augreg2_in21k_ft_in1k"
    assert codes(r) == ["timm.weights_missing"]


# --- the translated pipeline computes what timm's eval transform computes (PIL + numpy reference) ------------


def _png(height: int, width: int) -> bytes:
    rng = np.random.default_rng(13)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


def _timm_reference(
    png: bytes, resize_wh: tuple[int, int], crop: int, mean: list[float], std: list[float]
) -> np.ndarray:
    """torchvision on a PIL image: Image.resize(filter) -> CenterCrop (int(round((H - h) / 2))) -> to_tensor
    (/255, CHW) -> Normalize((x - mean) / std), all in float32."""
    im = Image.open(io.BytesIO(png)).convert("RGB").resize(resize_wh, Image.Resampling.BICUBIC)
    a = np.asarray(im)
    top, left = round((a.shape[0] - crop) / 2.0), round((a.shape[1] - crop) / 2.0)
    a = a[top : top + crop, left : left + crop].astype(np.float32) / np.float32(255)
    a = (a - np.asarray(mean, np.float32)) / np.asarray(std, np.float32)
    return a.transpose(2, 0, 1)


def _run(manifest: dict[str, Any], png: bytes) -> np.ndarray:
    pipe = Pipeline.from_specs(manifest["preprocess"], [])
    return pipe.preprocess(decode_input(png)).data


def test_squash_pipeline_equals_timms_eval_transform() -> None:
    png = _png(300, 400)
    got = _run(import_one("timm", NFNET).manifest, png)
    want = _timm_reference(png, (213, 213), 192, IMAGENET_MEAN, IMAGENET_STD)
    assert got.shape == (3, 192, 192) and got.dtype == np.float32
    np.testing.assert_array_equal(got, want)


def test_center_pipeline_equals_timms_eval_transform_when_the_long_side_agrees() -> None:
    # 300x400 -> shorter side 235: longer 235 * 400 / 300 = 313.33, torchvision int() and Python round() agree
    png = _png(300, 400)
    got = _run(import_one("timm", RESNET).manifest, png)
    want = _timm_reference(png, (313, 235), 224, IMAGENET_MEAN, IMAGENET_STD)
    np.testing.assert_array_equal(got, want)


def test_center_pipeline_truncates_the_long_side_like_torchvision() -> None:
    # 375x500 -> shorter side 235: 235 * 500 / 375 = 313.33 -> 313 (truncated; rounding agrees here);
    # a 224 resize of 375x500 gives 298.67: torchvision int() -> 298, round() would give 299
    from repliscope.ops.resize import Resize, ResizeParams

    op = Resize(
        ResizeParams(
            size=224, keep_aspect_ratio=True, method="bicubic", library="pillow", antialias=True, long_side="truncate"
        )
    )
    assert op.output_size(375, 500) == (224, 298) == (224, int(224 * 500 / 375))
    png = _png(375, 500)
    got = _run(import_one("timm", RESNET).manifest, png)
    want = _timm_reference(png, (313, 235), 224, IMAGENET_MEAN, IMAGENET_STD)
    np.testing.assert_array_equal(got, want)


def _normalize(a: np.ndarray, mean: list[float], std: list[float]) -> np.ndarray:
    out = (a.astype(np.float32) / np.float32(255) - np.asarray(mean, np.float32)) / np.asarray(std, np.float32)
    return out.transpose(2, 0, 1)


def test_border_pipeline_on_a_landscape_image(tmp_path: Path) -> None:
    # input 224, crop_pct 0.875 -> scale 256; a 500x375 (W x H) image: ratio = max(375 / 256, 500 / 256)
    # = 1.953125 -> (round(375 / 1.953125), round(500 / 1.953125)) = (192, 256); CenterCropOrPad(224):
    # 32 rows of fill (124, 116, 104), 16 above and 16 below, columns cropped at round(32 / 2) = 16
    r = import_one("timm", write_config(tmp_path, base_cfg(crop_mode="border", crop_pct=0.875)))
    png = _png(375, 500)
    got = _run(r.manifest, png)
    assert 224 / 0.875 == 256 and round(375 / max(375 / 256, 500 / 256)) == 192
    resized = np.asarray(Image.open(io.BytesIO(png)).convert("RGB").resize((256, 192), Image.Resampling.BICUBIC))
    want = np.empty((224, 224, 3), np.uint8)
    want[...] = np.array([124, 116, 104], np.uint8)
    want[16:208] = resized[:, 16:240]
    assert got.shape == (3, 224, 224)
    np.testing.assert_array_equal(got, _normalize(want, IMAGENET_MEAN, IMAGENET_STD))


def test_non_square_center_pipeline(tmp_path: Path) -> None:
    # input [256, 320], crop_pct 0.875 -> scale (292, 365); a 400x300 (W x H) image: ratio = min(300 / 292,
    # 400 / 365) = 1.0274 -> (292, round(400 / 1.0274) = round(389.33) = 389), bilinear (timm's default there);
    # CenterCrop([256, 320]): top round(36 / 2) = 18, left round(69 / 2) = round(34.5) = 34 (half to even)
    r = import_one(
        "timm", write_config(tmp_path, base_cfg(input_size=[3, 256, 320], crop_pct=0.875)), {"timm_version": "1.0.30"}
    )
    assert r.manifest["architecture"]["package"] == "timm==1.0.30"
    assert r.manifest["provenance"]["imported_from"]["reproduces"] == "timm==1.0.30"
    png = _png(300, 400)
    got = _run(r.manifest, png)
    assert round(400 / min(300 / 292, 400 / 365)) == 389
    resized = np.asarray(Image.open(io.BytesIO(png)).convert("RGB").resize((389, 292), Image.Resampling.BILINEAR))
    np.testing.assert_array_equal(got, _normalize(resized[18:274, 34:354], IMAGENET_MEAN, IMAGENET_STD))


# --- every warning code, from a config that triggers it -------------------------------------------------------


def test_defaults_are_warned_per_field(tmp_path: Path) -> None:
    cfg = {"architecture": "resnet18", "num_classes": 1000}
    r = import_one("timm", write_config(tmp_path, cfg))
    fields = [w.field for w in r.warnings if w.code == "timm.default_applied"]
    # no pretrained_cfg: timm's "old form", the top level is the pretrained config (read there, defaults named)
    assert fields == ["input_size", "interpolation", "crop_pct", "crop_mode", "mean", "std"]
    # resolve_data_config defaults: 224, bicubic, crop_pct 0.875 -> 256, ImageNet mean/std
    assert r.manifest["preprocess"][1] == {
        "op": "resize",
        "size": 256,
        "keep_aspect_ratio": True,
        "method": "bicubic",
        "library": "pillow",
        "antialias": True,
        "long_side": "truncate",
    }
    assert r.manifest["preprocess"][2:] == [{"op": "center_crop", "size": 224}, *tail(IMAGENET_MEAN, IMAGENET_STD)]


def test_falsy_values_mean_the_default_like_resolve_data_config(tmp_path: Path) -> None:
    r = import_one("timm", write_config(tmp_path, base_cfg(crop_pct=0, crop_mode="")))
    assert [w.field for w in r.warnings if w.code == "timm.default_applied"] == [
        "pretrained_cfg.crop_pct",
        "pretrained_cfg.crop_mode",
    ]
    assert r.manifest["preprocess"][1]["size"] == 256  # 224 / 0.875


@pytest.mark.parametrize(("interp", "method"), [("hamming", "bilinear"), ("random", "bilinear")])
def test_interpolation_substituted(tmp_path: Path, interp: str, method: str) -> None:
    r = import_one("timm", write_config(tmp_path, base_cfg(interpolation=interp)))
    assert "timm.interpolation_substituted" in codes(r)
    assert r.manifest["preprocess"][1]["method"] == method


@pytest.mark.parametrize(
    ("interp", "method"), [("box", "area"), ("lanczos", "lanczos"), ("nearest", "nearest"), ("bilinear", "bilinear")]
)
def test_interpolation_mapping(tmp_path: Path, interp: str, method: str) -> None:
    r = import_one("timm", write_config(tmp_path, base_cfg(interpolation=interp)))
    assert r.manifest["preprocess"][1]["method"] == method
    assert "timm.interpolation_substituted" not in codes(r)


def test_border_and_non_square_and_unknown_crop_mode(tmp_path: Path) -> None:
    r = import_one("timm", write_config(tmp_path, base_cfg(crop_mode="border", crop_pct=1.0)))
    assert r.manifest["preprocess"][1]["size"] == [224, 224] and r.manifest["preprocess"][1]["fit"] == "inside"
    assert r.manifest["preprocess"][2] == {"op": "center_crop", "size": 224, "fill": [124, 116, 104]}
    r = import_one("timm", write_config(tmp_path, base_cfg(input_size=[3, 256, 320], crop_pct=0.875)))
    assert r.manifest["inputs"][0]["shape"] == [-1, 3, 256, 320]
    assert r.manifest["preprocess"][1]["fit"] == "cover"
    assert r.manifest["preprocess"][2] == {"op": "center_crop", "size": [256, 320]}
    r = import_one("timm", write_config(tmp_path, base_cfg(crop_mode="centre")))
    assert next(w for w in r.warnings if w.code == "timm.crop_mode_unknown").field == "pretrained_cfg.crop_mode"
    assert r.manifest["preprocess"][1]["keep_aspect_ratio"] is True  # timm's else-branch: center
    with pytest.raises(ConfigImportError, match=r"pretrained_cfg\.mean.*0\.\.1 units"):
        import_one("timm", write_config(tmp_path, base_cfg(crop_mode="border", mean=[123.675, 116.28, 103.53])))


def test_mean_std_in_255_units_is_warned(tmp_path: Path) -> None:
    r = import_one(
        "timm", write_config(tmp_path, base_cfg(mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375]))
    )
    assert "timm.mean_std_units" in codes(r)
    assert r.manifest["preprocess"][5] == {"op": "subtract_mean", "value": [123.675, 116.28, 103.53]}


def test_labels_unknown_keys_and_license(tmp_path: Path) -> None:
    cfg = base_cfg(license="mit", food="x")
    cfg["num_classes"] = 10
    cfg["pretrained_cfg"]["num_classes"] = 10
    cfg["label_names"] = [f"c{i}" for i in range(10)]
    cfg["model_args"] = {"drop_rate": 0.0, "pretrained": True}
    cfg["extra_top"] = 1
    r = import_one("timm", write_config(tmp_path, cfg))
    assert "timm.labels_not_embedded" in codes(r) and "timm.license_missing" not in codes(r)
    assert {w.field for w in r.warnings if w.code == "timm.unknown_key"} == {"extra_top", "pretrained_cfg.food"}
    m = r.manifest
    assert m["labels"] == {"source": "labels.txt", "num_classes": 10}
    assert m["outputs"][0]["shape"] == [-1, 10] and m["license"] == "mit"
    assert m["architecture"]["kwargs"] == {
        "model_name": "resnet50",
        "pretrained": False,
        "num_classes": 10,
        "drop_rate": 0.0,
    }
    del cfg["label_names"]
    r = import_one("timm", write_config(tmp_path, cfg))
    assert "timm.labels_missing" in codes(r)


def test_every_documented_code_is_triggered_by_these_tests() -> None:
    import repliscope.importers.timm as mod

    documented = {
        c
        for c in (mod.__doc__ or "").replace("``", " ").replace(",", " ").split()
        if c.startswith("timm.") and c.count(".") == 1 and c[5:].replace("_", "").isalpha()
    }
    tested = {
        "timm.default_applied",
        "timm.test_size_ignored",
        "timm.interpolation_substituted",
        "timm.crop_mode_unknown",
        "timm.mean_std_units",
        "timm.weights_missing",
        "timm.labels_not_embedded",
        "timm.labels_missing",
        "timm.license_missing",
        "timm.unknown_key",
    }
    assert documented == tested


# --- weights beside the config, offline validation ------------------------------------------------------------


def test_weights_beside_the_config_are_hashed_and_the_manifest_validates_offline(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_bytes(VIT.read_bytes())
    (tmp_path / "pytorch_model.bin").write_bytes(b"not really weights")
    (tmp_path / "model.safetensors").write_bytes(b"safetensors first")
    r = import_one("timm", config)
    assert r.manifest["source"] == {
        "uri": "model.safetensors",
        "sha256": hashlib.sha256(b"safetensors first").hexdigest(),
        "format": "pytorch_state_dict",
    }
    assert "timm.weights_missing" not in codes(r)
    out = tmp_path / "manifest.yaml"
    out.write_text(r.to_yaml(), encoding="utf-8")
    report = check_manifest(out, cache_dir=tmp_path / "cache", offline=True)
    assert report.ok, report.errors
    res = runner.invoke(app, ["manifest", "validate", str(out), "--offline"])
    assert res.exit_code == 0, res.output


# --- hard errors: only what leaves the pipeline undefined -----------------------------------------------------


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda c: c.pop("architecture"), "'architecture'"),
        (
            lambda c: (c.__setitem__("num_classes", 0), c["pretrained_cfg"].__setitem__("num_classes", 0)),
            "'num_classes'",
        ),
        (lambda c: c["pretrained_cfg"].__setitem__("input_size", [1, 224, 224]), "'pretrained_cfg.input_size'"),
        (lambda c: c["pretrained_cfg"].__setitem__("input_size", [224, 224]), "'pretrained_cfg.input_size'"),
        (lambda c: c["pretrained_cfg"].__setitem__("crop_pct", 1.15), "'pretrained_cfg.crop_pct'"),
        (lambda c: c["pretrained_cfg"].__setitem__("mean", [0.5]), "'pretrained_cfg.mean'"),
        (lambda c: c["pretrained_cfg"].__setitem__("interpolation", "cubic"), "'pretrained_cfg.interpolation'"),
    ],
)
def test_refused_configs_name_file_and_field(tmp_path: Path, mutate: Any, field: str) -> None:
    cfg = copy.deepcopy(base_cfg())
    mutate(cfg)
    path = write_config(tmp_path, cfg)
    with pytest.raises(ConfigImportError) as exc:
        TimmImporter().translate(path)
    assert str(path) in str(exc.value) and f"field {field}" in str(exc.value)


def test_not_json_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text("{not json", encoding="utf-8")
    with pytest.raises(ConfigImportError, match="not valid JSON"):
        TimmImporter().translate(path)


# --- the CLI ----------------------------------------------------------------------------------------------------


def test_cli_json_shape() -> None:
    res = runner.invoke(app, ["manifest", "import", "timm", str(NFNET), "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert set(data) >= {"manifest", "warnings"}
    assert data["manifest"]["preprocess"][1]["size"] == [213, 213]
    assert data["warnings"][0] == {
        "code": "timm.test_size_ignored",
        "field": "pretrained_cfg.test_input_size",
        "message": "[3, 256, 256] is used by timm's validate.py (use_test_size); the translation uses the "
        "train-time input_size/crop_pct, as timm.data.resolve_model_data_config does by default "
        "(--test-size uses it)",
    }


def test_cli_yaml_has_warnings_as_comments_and_folder_mode(tmp_path: Path) -> None:
    res = runner.invoke(app, ["manifest", "import", "timm", str(VIT)])
    assert res.exit_code == 0, res.output
    assert "# WARNING timm.weights_missing (file):" in res.stdout
    for name, src in (("a", RESNET), ("b", VIT)):
        (tmp_path / "repo" / name).mkdir(parents=True)
        (tmp_path / "repo" / name / "config.json").write_bytes(src.read_bytes())
    (tmp_path / "repo" / "c").mkdir()
    (tmp_path / "repo" / "c" / "config.json").write_text('{"architecture": "x"}', encoding="utf-8")
    rows = import_folder("timm", tmp_path / "repo", tmp_path / "out")
    assert [(r.file, r.outcome) for r in rows] == [
        ("a/config.json", "with warnings"),
        ("b/config.json", "with warnings"),
        ("c/config.json", "refused"),
    ]
    assert (tmp_path / "out" / "a" / "config.yaml").is_file()


# --- timm versions, legacy configs, test size, fixed-size models ----------------------------------------------


def test_legacy_config_without_pretrained_cfg_is_read_as_timm_reads_it(tmp_path: Path) -> None:
    """timm's load_model_config_from_hf: no pretrained_cfg -> the top level (minus architecture, num_features)
    is the pretrained config, 'labels' the old name of 'label_names'."""
    cfg = {
        "architecture": "vit_small_patch16_384",
        "num_features": 384,
        "num_classes": 10,
        "input_size": [3, 384, 384],
        "interpolation": "bilinear",
        "mean": [0.5, 0.5, 0.5],
        "std": [0.5, 0.5, 0.5],
        "crop_pct": 1.0,
        "labels": [str(i) for i in range(10)],
        "model_args": {"drop_rate": 0.0},
    }
    r = import_one("timm", write_config(tmp_path, cfg))
    m = r.manifest
    assert [w.field for w in r.warnings if w.code == "timm.default_applied"] == ["crop_mode"]
    assert "timm.unknown_key" not in codes(r)
    assert m["inputs"][0]["shape"] == [-1, 3, 384, 384]
    assert m["preprocess"][1] == {
        "op": "resize",
        "size": 384,
        "keep_aspect_ratio": True,
        "method": "bilinear",
        "library": "pillow",
        "antialias": True,
        "long_side": "truncate",
    }
    assert m["preprocess"][2:] == [{"op": "center_crop", "size": 384}, *tail([0.5] * 3, [0.5] * 3)]
    assert m["architecture"]["kwargs"] == {
        "model_name": "vit_small_patch16_384",
        "pretrained": False,
        "num_classes": 10,
        "drop_rate": 0.0,
    }
    assert "timm.labels_not_embedded" in codes(r)  # 'labels' read as label_names


def test_test_size_uses_test_input_size_and_test_crop_pct(tmp_path: Path) -> None:
    path = write_config(tmp_path, base_cfg())  # resnet50.a1_in1k: 224 / 0.95, test 288 / 1.0
    train = import_one("timm", path)
    test = import_one("timm", path, {"test_size": True})
    assert "timm.test_size_ignored" in codes(train) and "timm.test_size_ignored" not in codes(test)
    assert train.manifest["inputs"][0]["shape"] == [-1, 3, 224, 224]
    assert test.manifest["inputs"][0]["shape"] == [-1, 3, 288, 288]
    assert test.manifest["preprocess"][1:3] == [
        {
            "op": "resize",
            "size": 288,
            "keep_aspect_ratio": True,
            "method": "bicubic",
            "library": "pillow",
            "antialias": True,
            "long_side": "truncate",
        },
        {"op": "center_crop", "size": 288},
    ]
    assert "at the test size" in test.manifest["description"]


def test_fixed_size_model_gets_img_size_and_refuses_another_test_size(tmp_path: Path) -> None:
    cfg = json.loads((FIXTURES / "vit_base_patch16_224.augreg2_in21k_ft_in1k.json").read_text(encoding="utf-8"))
    r = import_one("timm", write_config(tmp_path, cfg))
    # timm _update_default_model_kwargs: fixed_input_size -> kwargs.setdefault('img_size', input_size[-2:])
    assert r.manifest["architecture"]["kwargs"]["img_size"] == [224, 224]
    cfg["model_args"] = {"img_size": 224}
    assert import_one("timm", write_config(tmp_path, cfg)).manifest["architecture"]["kwargs"]["img_size"] == 224
    cfg["pretrained_cfg"]["test_input_size"] = [3, 384, 384]
    with pytest.raises(ConfigImportError, match="fixed_input_size"):
        import_one("timm", write_config(tmp_path, cfg), {"test_size": True})


def test_timm_version_default_and_unknown(tmp_path: Path) -> None:
    path = write_config(tmp_path, base_cfg())
    r = import_one("timm", path)
    assert r.manifest["architecture"]["package"] == f"timm=={TIMM_VERSIONS[-1]}" == "timm==1.0.31"
    assert r.manifest["provenance"]["imported_from"]["reproduces"] == "timm==1.0.31"
    with pytest.raises(ConfigImportError, match=r"--timm-version '0.9.16'.*allowed: 1.0.29, 1.0.30, 1.0.31"):
        import_one("timm", path, {"timm_version": "0.9.16"})


def test_cli_timm_options(tmp_path: Path) -> None:
    path = write_config(tmp_path, base_cfg(input_size=[3, 256, 320]))
    res = CliRunner().invoke(app, ["manifest", "import", "timm", str(path), "--timm-version", "1.0.29", "--json"])
    assert res.exit_code == 0, res.output
    m = json.loads(res.stdout)["manifest"]
    assert m["architecture"]["package"] == "timm==1.0.29" and m["preprocess"][1]["method"] == "bilinear"
    res = CliRunner().invoke(app, ["manifest", "import", "mlmodelscope", str(path), "--test-size"])
    assert res.exit_code == 2 and "the mlmodelscope importer takes no --test-size" in res.output
