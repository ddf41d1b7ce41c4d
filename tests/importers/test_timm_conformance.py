"""Conformance of the timm importer against the real timm, bit for bit.

A provisioned stack (``repliscope stack create``; ``make timm-stack`` builds it once, later runs reuse it) runs
timm's own ``create_transform(**resolve_data_config(pretrained_cfg=cfg), is_training=False)`` on images opened
as timm's datasets open them (``Image.open(path).convert("RGB")``), over a grid of pretrained configs: every
crop mode x every interpolation timm maps to a PIL filter x square / non-square input x two crop_pct x two
mean/std. The same configs go through ``manifest import timm`` and repliscope's pipeline; every tensor must have
the same float32 bytes (sha256).

The stack is torch 2.13.0 (the +cpu wheel) + torchvision 0.28.0 + timm 1.0.31: torch 2.14.1 + torchvision
0.29.1 (the issue's pairing) cannot be had as a CPU build from the package registry (PyPI's torch 2.14.1 Linux
wheel is the CUDA build, 555 MB plus the nvidia-* wheels); the transforms compared run in PIL and in torch's
elementwise ``div``/``sub`` on CPU, which those torch versions do not change. torchvision 0.28.0 from the
registry is a CUDA build too: its C operators do not load beside the CPU torch, so ``timm_reference.py`` skips
their fake-kernel registration (the eval transform never calls them).

Measured (2-core machine shared with other jobs): 120 configs x 12 images = 1,440 tensors, all bit-exact with
timm 1.0.31; about 4 minutes for both grid tests once the stack exists.
"""

from __future__ import annotations

import hashlib
import io
import itertools
import json
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from repliscope.importers.batch import import_one
from repliscope.ops.pipeline import Pipeline, decode_input

pytestmark = [pytest.mark.slow, pytest.mark.stack, pytest.mark.network, pytest.mark.timeout(1800)]
"""A first run builds the stack (about 4 minutes, 1.3 GB) inside the first test's time."""

SPEC = "torch==2.13.0 torchvision==0.28.0 timm==1.0.31"
"""The stack ``make timm-stack`` builds (see the module docstring for why not torch 2.14.1)."""
SAMPLES = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "imagenet-sample"
REFERENCE = Path(__file__).with_name("timm_reference.py")

CROP_MODES = ("center", "squash", "border")
INTERPOLATIONS = ("bilinear", "bicubic", "nearest", "box", "lanczos")
SIZES = ([3, 224, 224], [3, 192, 256])
CROP_PCTS = (0.875, 1.0)
NORMS = (((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)), ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)))
GRID: list[dict[str, Any]] = [
    {
        "input_size": size,
        "interpolation": interp,
        "crop_mode": mode,
        "crop_pct": pct,
        "mean": list(mean),
        "std": list(std),
        "num_classes": 1000,
    }
    for mode, interp, size, pct, (mean, std) in itertools.product(CROP_MODES, INTERPOLATIONS, SIZES, CROP_PCTS, NORMS)
]
"""120 pretrained configs."""


def _synthetic(folder: Path) -> list[Path]:
    """Images the ImageNet sample lacks: grayscale, palette, RGBA, 16-bit gray, extreme aspect ratios."""
    rng = np.random.default_rng(25)
    made = {
        "gray.png": Image.fromarray(rng.integers(0, 256, (200, 300), dtype=np.uint8), "L"),
        "palette.png": Image.fromarray(rng.integers(0, 256, (90, 130, 3), dtype=np.uint8)).quantize(64),
        "rgba.png": Image.fromarray(rng.integers(0, 256, (120, 90, 4), dtype=np.uint8), "RGBA"),
        "gray16.png": Image.fromarray(rng.integers(0, 65536, (48, 64), dtype=np.uint16)),
        "wide.png": Image.fromarray(rng.integers(0, 256, (24, 1000, 3), dtype=np.uint8)),
        "tall.png": Image.fromarray(rng.integers(0, 256, (1000, 24, 3), dtype=np.uint8)),
    }
    paths = []
    for name, im in made.items():
        path = folder / name
        im.save(path)
        paths.append(path)
    assert Image.open(folder / "gray16.png").mode.startswith("I;16")
    return paths


def _images(folder: Path) -> list[Path]:
    real = sorted(SAMPLES.glob("*.JPEG"))[:6] if SAMPLES.is_dir() else []
    return real + _synthetic(folder)


@pytest.fixture(scope="module")
def stack_python() -> Path:
    from repliscope.stacks.spec import StackError
    from repliscope.stacks.store import create_stack

    try:
        stack = create_stack(SPEC)
    except StackError as exc:
        pytest.skip(f"the timm stack cannot be built here ({str(exc).splitlines()[-1]}); see make timm-stack")
    return stack.python_executable


def _reference(
    python: Path,
    folder: Path,
    images: list[Path],
    configs: list[dict[str, Any]],
    arrays: Sequence[tuple[int, int]] = (),
) -> tuple[str, dict[tuple[int, int], str]]:
    job = folder / "job.json"
    job.write_text(
        json.dumps({"images": [str(p) for p in images], "configs": configs, "arrays": [list(a) for a in arrays]}),
        encoding="utf-8",
    )
    out = subprocess.run(
        [str(python), str(REFERENCE), str(job)], capture_output=True, text=True, timeout=1200, check=True
    )
    lines = [json.loads(ln) for ln in out.stdout.splitlines() if ln.strip()]
    return lines[0]["timm"], {(ln["c"], ln["i"]): ln["sha256"] for ln in lines[1:]}


def _ours(
    folder: Path, images: list[Path], configs: list[dict[str, Any]], version: str
) -> dict[tuple[int, int], np.ndarray]:
    data = [decode_input(p.read_bytes()) for p in images]
    out: dict[tuple[int, int], np.ndarray] = {}
    for c, cfg in enumerate(configs):
        path = folder / f"cfg{c}" / "config.json"
        path.parent.mkdir(exist_ok=True)
        path.write_text(
            json.dumps({"architecture": "resnet50", "num_classes": 1000, "pretrained_cfg": cfg}), encoding="utf-8"
        )
        manifest = import_one("timm", path, {"timm_version": version}).manifest
        pipe = Pipeline.from_specs(manifest["preprocess"], [])
        for i, item in enumerate(data):
            out[c, i] = np.ascontiguousarray(pipe.preprocess(item).data, dtype=np.float32)
    return out


def _sha(a: np.ndarray) -> str:
    return hashlib.sha256(a.tobytes()).hexdigest()


def test_every_config_and_image_is_bit_exact_with_timm_1_0_31(stack_python: Path, tmp_path: Path) -> None:
    images = _images(tmp_path)
    version, want = _reference(stack_python, tmp_path, images, GRID)
    assert version == "1.0.31"
    assert len(GRID) == 120 and len(want) == 120 * len(images)
    got = _ours(tmp_path, images, GRID, "1.0.31")
    differ = sorted(k for k in want if _sha(got[k]) != want[k])
    if differ:
        c, i = differ[0]
        _, _ = _reference(stack_python, tmp_path, images, GRID, [(c, i)])
        ref = np.load(tmp_path / f"job.{c}.{i}.npy")
        pytest.fail(
            f"{len(differ)} of {len(want)} tensors differ; first: config {GRID[c]} on {images[i].name}: "
            f"shape {got[c, i].shape} vs {ref.shape}, max |diff| "
            f"{np.abs(got[c, i] - ref).max() if got[c, i].shape == ref.shape else 'n/a'}"
        )


def test_the_grid_tells_timm_versions_apart(stack_python: Path, tmp_path: Path) -> None:
    """Translated for timm 1.0.30 (bilinear ResizeKeepRatio), exactly the non-square center configs with
    another interpolation differ from timm 1.0.31: the grid detects the version rule."""
    images = _images(tmp_path)
    configs = [
        cfg
        for cfg in GRID
        if cfg["crop_mode"] == "center" and cfg["input_size"][1] != cfg["input_size"][2] and cfg["crop_pct"] == 0.875
    ]
    _, want = _reference(stack_python, tmp_path, images, configs)
    got = _ours(tmp_path, images, configs, "1.0.30")
    differing_configs = {configs[c]["interpolation"] for (c, i) in want if _sha(got[c, i]) != want[c, i]}
    assert differing_configs == {"bicubic", "nearest", "box", "lanczos"}


def test_sixteen_bit_gray_follows_pillow_convert(tmp_path: Path) -> None:
    """timm opens images with Pillow's convert('RGB'), which clips 16-bit gray at 255; repliscope's pillow decode
    does the same (OpenCV's keeps the high byte)."""
    values = np.array([[0, 200, 255, 256, 1000, 65535]], dtype=np.uint16)
    buf = io.BytesIO()
    Image.fromarray(values).save(buf, format="PNG")
    ref = np.asarray(Image.open(io.BytesIO(buf.getvalue())).convert("RGB"))
    assert ref[0, :, 0].tolist() == [0, 200, 255, 255, 255, 255]
    pipe = Pipeline.from_specs([{"op": "decode", "library": "pillow", "channels": "RGB"}], [])
    np.testing.assert_array_equal(pipe.preprocess(decode_input(buf.getvalue())).data, ref)
