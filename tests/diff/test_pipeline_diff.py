"""``repliscope diff MANIFEST --pipeline``: a user's own pre-processing against the manifest's, on generated images.

Every registered classification pitfall variant that changes pre-processing has an independent candidate
(tests/diff/pipeline_candidates.py: PIL / numpy / OpenCV / torch written out, never repliscope's ops) that the
diagnosis must name with a residual of 0; the correct Lite0 candidate matches bit for bit."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from repliscope.cli.main import app
from repliscope.datasets import resolve_dataset
from repliscope.datasets.base import Dataset
from repliscope.diff.pipeline.candidate import align, classify, load_candidate, to_array
from repliscope.diff.pipeline.diagnosis import derive_variants, hints
from repliscope.diff.pipeline.driver import PipelineDiffResult, diff_pipeline, preprocess_pipeline
from repliscope.manifest.loader import LoadedManifest, load_manifest
from repliscope.pitfalls.base import PitfallContext
from repliscope.pitfalls.sweep import task_pitfalls
from tests.conftest import EXAMPLES, LITE0
from tests.diff import pipeline_candidates as pc

CANDIDATES = Path(pc.__file__)
BLAZEFACE = EXAMPLES / "blazeface-full-range.yaml"


def _texture(h: int, w: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([(x * 0.9 + y * 0.2) % 256, (y * 1.3) % 256, ((x - y) * 0.7) % 256], -1)
    return (base + rng.integers(0, 60, base.shape)).clip(0, 255).astype(np.uint8)


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    """Four JPEGs: landscape, portrait, odd size, and a CMYK one (Pillow and OpenCV decode it one level apart)."""
    root = tmp_path_factory.mktemp("images")
    for name, (h, w), seed in (
        ("land_0.jpg", (300, 400), 1),
        ("port_1.jpg", (410, 290), 2),
        ("odd_2.jpg", (263, 301), 3),
    ):
        Image.fromarray(_texture(h, w, seed)).save(root / name, quality=92)
    Image.fromarray(_texture(300, 380, 4)).convert("CMYK").save(root / "cmyk_3.jpg", quality=92)
    return resolve_dataset(str(root))


@pytest.fixture(scope="module")
def lite0() -> LoadedManifest:
    return load_manifest(LITE0)


def _diff(loaded: LoadedManifest, name: str, data: Dataset) -> PipelineDiffResult:
    return diff_pipeline(loaded, load_candidate(f"{CANDIDATES}:{name}"), data.samples, data.name)


def test_independent_lite0_matches_bit_exact(lite0: LoadedManifest, images: Dataset) -> None:
    r = _diff(lite0, "lite0", images)
    assert (r.verdict, r.samples, r.failed, r.max_abs_error, r.fraction_differing) == ("match", 4, 0, 0.0, 0.0)
    assert r.diagnosis.verdict == "match" and r.first_divergent_stage is None
    assert r.output_message == (
        "candidate returns (3, 224, 224) float32 (numpy array); the manifest's input is (3, 224, 224) float32"
    )
    assert r.timing.samples_timed == 3 and r.timing.ratio is not None and r.timing.ratio > 0


def test_layout_and_batch_axis_are_detected_and_reported(lite0: LoadedManifest, images: Dataset) -> None:
    r = _diff(lite0, "lite0_hwc_batched", images)
    assert r.verdict == "match" and r.max_abs_error == 0.0
    assert r.candidate_output == "(1, 224, 224, 3) float32 (numpy array)"
    assert r.alignment == ["HWC, compared after transposing to CHW", "a batch axis of 1 was dropped"]


def test_every_preprocessing_variant_is_named(lite0: LoadedManifest, images: Dataset) -> None:
    spec = lite0.manifest.inputs[0]
    ctx = PitfallContext(tuple(spec.shape), spec.layout, "torch", 8, 2)
    plans, settings_only, not_applicable = derive_variants(preprocess_pipeline(lite0), ctx, "image_classification")
    # every registered classification variant is either named by an independent candidate below, or changes no
    # pre-processing (nothing to find in a model input): a new registered variant fails here until it has one
    assert {p.name for p in plans if p.name == p.pitfall} == set(pc.INDEPENDENT)  # each default; degrees apart
    assert set(settings_only) == {
        "batch_size_1",
        "bfloat16_inference",
        "bfloat16_normalization",
        "float16_inference",
        "float16_normalization",
        "threads_changed",
    }
    assert set(task_pitfalls("image_classification")) == set(pc.INDEPENDENT) | set(settings_only) | set(not_applicable)
    for variant, fn in pc.INDEPENDENT.items():
        r = _diff(lite0, fn.__name__, images)
        assert r.verdict == "explained", (variant, r.diagnosis.message)
        assert r.diagnosis.variant == variant, (variant, r.diagnosis.candidates[:3])
        assert r.diagnosis.residual_max_abs_error == 0.0, variant
        assert r.max_abs_error is not None and r.max_abs_error > 0
        assert r.diagnosis.pairs == 0 and r.diagnosis.searched == len(plans)  # singles only: one explained it


def test_a_pair_of_mistakes_is_named(lite0: LoadedManifest, images: Dataset) -> None:
    r = _diff(lite0, "color_swapped_bilinear", images)
    assert (r.verdict, r.diagnosis.variant, r.diagnosis.residual_max_abs_error) == (
        "explained",
        "color_layout_swapped + resize_bilinear",
        0.0,
    )
    assert r.diagnosis.message.startswith("your pipeline = the manifest with `color_layout_swapped + resize_bilinear`")


def test_unexplained_differences_get_hints(lite0: LoadedManifest, images: Dataset) -> None:
    r = _diff(lite0, "mean_off_by_one", images)
    assert r.verdict == "unexplained" and r.diagnosis.variant is None
    assert r.diagnosis.hints == [
        "a per-channel constant offset [-0.00781, -0.00781, -0.00781]: another mean (or the mean in other units)"
    ]
    shifted = _diff(lite0, "shifted_crop", images)  # a crop offset has degrees now: named with its degree
    assert (shifted.verdict, shifted.diagnosis.variant) == ("explained", "center_crop_offset[offset=[2, 0]]")


def test_hints_on_arrays() -> None:
    rng = np.random.default_rng(0)
    ref = rng.random((3, 16, 16)).astype(np.float32)
    assert hints(ref, ref[::-1].copy(), "CHW", 1e-6) == ["the channels are reversed (RGB <-> BGR)"]
    scaled = ref * np.float32(255)
    assert hints(ref, scaled, "CHW", 1e-6)[0].startswith("a per-channel scale [255, 255, 255] and offset")
    smooth = (ref + np.roll(ref, 1, 1) + np.roll(ref, 1, 2) + np.roll(ref, (1, 1), (1, 2))) / 4
    assert hints(ref, smooth, "CHW", 1e-6)[-1].startswith("the candidate is smoother")


def test_named_stages_give_the_first_divergent_stage(lite0: LoadedManifest, images: Dataset) -> None:
    good = _diff(lite0, "STAGES", images)
    assert good.verdict == "match"
    assert [(s.stage, s.compared_with, s.within_tolerance) for s in good.stages] == [
        ("load", "preprocess[0] decode", True),
        ("resize", "preprocess[1] resize", True),
        ("center crop", "preprocess[2] center_crop", True),
        ("normalize", "preprocess[5] divide_std", True),
        ("to CHW", "preprocess[6] data_layout", True),
    ]
    bad = _diff(lite0, "BROKEN_STAGES", images)
    assert (bad.verdict, bad.first_divergent_stage, bad.diagnosis.variant) == ("explained", "resize", "resize_bilinear")
    assert [s.within_tolerance for s in bad.stages] == [True, False, False, False, False]


def test_torchvision_style_compose(lite0: LoadedManifest, images: Dataset) -> None:
    r = _diff(lite0, "TIMM_STYLE", images)
    assert r.candidate_kind == "compose" and r.verdict == "match"
    assert r.max_abs_error is not None and 0 < r.max_abs_error <= r.tolerance  # (x/255 - m/255) / (s/255)
    totensor = r.stages[3]
    assert (totensor.stage, totensor.compared_with) == ("3:ToTensor", "preprocess[3] to_float")
    assert totensor.note.startswith("same content in other units (per-channel scale [0.003922")
    tv = _diff(lite0, "TIMM_TORCHVISION_CONSTANTS", images)
    assert (tv.verdict, tv.diagnosis.variant, tv.first_divergent_stage) == (
        "explained",
        "torchvision_mean_std",
        "4:Normalize",
    )


def test_a_sample_the_candidate_fails_on_is_recorded(lite0: LoadedManifest, tmp_path: Path, images: Dataset) -> None:
    src = tmp_path / "cand.py"
    src.write_text(
        "from tests.diff.pipeline_candidates import lite0\n"
        "def flaky(path):\n"
        "    if 'port_1' in path:\n"
        "        raise ValueError('portrait not supported')\n"
        "    return lite0(path)\n"
    )
    r = diff_pipeline(lite0, load_candidate(f"{src}:flaky"), images.samples, images.name)
    assert (r.samples, r.failed, r.max_abs_error, r.verdict) == (3, 1, 0.0, "unexplained")
    bad = [s for s in r.per_sample if s.error]
    assert [(s.sample_id, s.error) for s in bad] == [
        ("port_1.jpg", "the candidate raised ValueError: portrait not supported")
    ]


def test_load_errors_are_one_line(tmp_path: Path) -> None:
    broken = tmp_path / "broken.py"
    broken.write_text("def f(path):\n    return path +\n")
    with pytest.raises(Exception, match=r"broken.py does not import: SyntaxError: invalid syntax \(line 2\)"):
        load_candidate(f"{broken}:f")
    raising = tmp_path / "raising.py"
    raising.write_text("import no_such_module_here\n")
    with pytest.raises(Exception, match="does not import: ModuleNotFoundError: No module named 'no_such_module_here'"):
        load_candidate(f"{raising}:f")
    with pytest.raises(Exception, match=r"no such file"):
        load_candidate(f"{tmp_path / 'absent.py'}:f")
    with pytest.raises(Exception, match=r"expected FILE.py:NAME or module:NAME"):
        load_candidate("just_a_name")
    with pytest.raises(Exception, match=r"stage 0 is 3; a stage list holds \(name, callable\) pairs"):
        classify("x:y", [3])
    assert load_candidate("tests.diff.pipeline_candidates:lite0").kind == "function"


def test_output_conversion_and_shape_causes() -> None:
    import torch

    arr, what = to_array(torch.zeros(1, 3, 4, 4))
    assert (arr.shape, what) == ((1, 3, 4, 4), "torch tensor")
    assert to_array(Image.new("RGB", (5, 4)))[0].shape == (4, 5, 3)
    assert align(np.zeros((256, 341, 3)), (3, 224, 224), "NCHW").error == (
        "shape (256, 341, 3) does not match (3, 224, 224) (NCHW): spatial size (256, 341) is larger than (224, 224): "
        "the crop (or the resize to the input size) is missing"
    )
    assert "alpha channel kept" in str(align(np.zeros((224, 224, 4)), (3, 224, 224), "NCHW").error)
    assert "a batch of 2 samples" in str(align(np.zeros((2, 3, 224, 224)), (3, 224, 224), "NCHW").error)
    assert str(align(np.array(["a"] * 3), (3,), "NC").error).startswith("dtype <U1 is not a number type")


def test_cli_json_exit_codes_and_store(images: Dataset, tmp_path: Path) -> None:
    runner = CliRunner()
    folder = str(Path(images.samples[0].location).parent)
    db = f"sqlite:///{tmp_path / 'diffs.db'}"
    ok = runner.invoke(
        app,
        [
            "diff",
            str(LITE0),
            "--pipeline",
            f"{CANDIDATES}:lite0",
            "--dataset",
            folder,
            "--limit",
            "2",
            "--json",
            "--db",
            db,
        ],
    )
    assert ok.exit_code == 0, ok.output
    body = json.loads(ok.stdout)["pipeline_diff"]
    assert (body["samples"], body["max_abs_error"], body["diagnosis"]["verdict"]) == (2, 0.0, "match")
    assert set(body["timing"]) >= {"reference_ms_per_image", "candidate_ms_per_image", "ratio"}
    png = tmp_path / "heat.png"
    bad = runner.invoke(
        app,
        [
            "diff",
            str(LITE0),
            "--pipeline",
            f"{CANDIDATES}:color_layout_swapped",
            "--dataset",
            folder,
            "--limit",
            "2",
            "--heatmaps",
            str(png),
            "--db",
            db,
        ],
    )
    assert bad.exit_code == 1, bad.output
    assert "your pipeline = the manifest with `color_layout_swapped`" in " ".join(bad.stdout.split())
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    missing = runner.invoke(
        app, ["diff", str(LITE0), "--pipeline", f"{CANDIDATES}:nope", "--dataset", folder, "--db", db]
    )
    assert (
        missing.exit_code == 2
        and missing.stderr.startswith("error: --pipeline ")
        and len(missing.stderr.strip().splitlines()) == 1
    )
    shape = runner.invoke(
        app,
        [
            "diff",
            str(LITE0),
            "--pipeline",
            f"{CANDIDATES}:not_cropped",
            "--dataset",
            folder,
            "--limit",
            "2",
            "--db",
            db,
        ],
    )
    assert shape.exit_code == 2 and "the crop (or the resize to the input size) is missing" in shape.stderr
    stray = runner.invoke(app, ["diff", str(LITE0), "--runtimes", "torch", "onnxruntime", "--limit", "2"])
    assert stray.exit_code == 2 and "go with --pipeline FILE.py:NAME" in stray.stderr
    mixed = runner.invoke(app, ["diff", str(LITE0), "--pipeline", f"{CANDIDATES}:lite0", "--layers"])
    assert mixed.exit_code == 2 and "--pipeline compares your pre-processing" in mixed.stderr
    listed = runner.invoke(app, ["diffs", "list", "--json", "--db", db])
    rows = json.loads(listed.stdout)["diffs"]
    assert [(r["kind"], r["verdict"], r["has_figure"]) for r in rows] == [
        ("pipeline_diff", "explained", True),
        ("pipeline_diff", "match", False),
    ]
    shown = runner.invoke(app, ["diffs", "show", rows[0]["diff_id"][:8], "--json", "--db", db])
    assert json.loads(shown.stdout)["pipeline_diff"]["diagnosis"]["variant"] == "color_layout_swapped"
    html = tmp_path / "diff.html"
    report = runner.invoke(app, ["report", rows[0]["diff_id"][:8], "-o", str(html), "--db", db])
    assert report.exit_code == 0, report.output
    text = html.read_text()
    assert "your pipeline = the manifest with `color_layout_swapped`" in text and "data:image/png;base64," in text


def test_detection_letterbox_stretch_is_named(images: Dataset) -> None:
    """BlazeFace's letterbox (pad to square, then bilinear 192x192, [-1, 1], NHWC): a candidate that stretches
    instead is named ``letterbox_stretch_swapped``; the correct letterbox matches."""
    loaded = load_manifest(BLAZEFACE)
    src = load_candidate(f"{CANDIDATES}:blazeface_letterbox")
    r = diff_pipeline(loaded, src, images.samples, images.name)
    assert r.verdict == "match" and r.max_abs_error is not None and r.max_abs_error <= r.tolerance, r.diagnosis
    stretch = diff_pipeline(loaded, load_candidate(f"{CANDIDATES}:blazeface_stretch"), images.samples, images.name)
    assert (stretch.verdict, stretch.diagnosis.variant, stretch.diagnosis.residual_max_abs_error) == (
        "explained",
        "letterbox_stretch_swapped",
        0.0,
    )


def test_detection_model_effect_of_swapped_channels(tmp_path: Path) -> None:
    """The rect-detector (decode only, uint8 input of any size) on synthetic_detection: RGB matches bit for bit;
    BGR is named ``color_layout_swapped`` and, through the model, swaps red and blue rectangles: 1/3 of the
    detections still match (the green ones), AP 1.0 -> 1/3."""
    manifest = str(Path(__file__).parents[1] / "fixtures" / "detection" / "rect-detector.yaml")
    common = ["--dataset", "synthetic_detection", "--limit", "8", "--json", "--db", f"sqlite:///{tmp_path / 'd.db'}"]
    runner = CliRunner()
    ok = runner.invoke(app, ["diff", manifest, "--pipeline", f"{CANDIDATES}:rgb_uint8", *common])
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.stdout)["pipeline_diff"]["tolerance"] == 0.0  # uint8 input: bit-exact
    bad = runner.invoke(
        app,
        [
            "diff",
            manifest,
            "--pipeline",
            f"{CANDIDATES}:bgr_uint8",
            "--model-effect",
            "--model-runtime",
            "onnxruntime",
            *common,
        ],
    )
    assert bad.exit_code == 1, bad.output
    body = json.loads(bad.stdout)["pipeline_diff"]
    assert (body["diagnosis"]["variant"], body["diagnosis"]["residual_max_abs_error"]) == ("color_layout_swapped", 0)
    effect = body["model_effect"]
    assert (effect["task"], effect["source"], effect["compared"], effect["agreements"]) == (
        "object_detection",
        "pipelines",
        8,
        0,
    )
    paired = effect["paired"]
    assert (paired["n_reference_detections"], paired["n_variant_detections"], paired["mean_iou"]) == (19, 19, 1.0)
    assert (round(paired["matched_fraction"], 4), paired["ap_reference"], round(paired["ap_variant"], 4)) == (
        0.3158,
        1.0,
        0.3333,
    )
